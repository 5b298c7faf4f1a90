"""Two arms run side by side: the candidate and the incumbent on the same cells at the same time.

A trial's agent phase ends on a wall-clock timeout, so on a small machine the model's speed (what else runs)
decides how many turns a trial gets. A candidate compared with an incumbent grid run hours earlier is compared
under another load as well; run in lockstep, both arms see the same load. ``run_interleaved`` runs the arms'
grids (same tasks, same r, hence the same cell order) concurrently through :func:`validate.evaluate.run_grid`
and makes every arm wait at each cell until each other arm that still has that cell to run reaches it too (or
has finished its run): block (task, repetition) starts in both arms at once. A resumed grid keeps its finished
cells (the scan's rule); the other arm runs its remaining cells of that block alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from trials.job import Cell, scan_cells

from .evaluate import GridOutcome, GridPlan, TrialBook, run_grid


async def _either(a: asyncio.Event, b: asyncio.Event) -> None:
    if a.is_set() or b.is_set():
        return
    waits = [asyncio.create_task(a.wait()), asyncio.create_task(b.wait())]
    _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()


class Lockstep:
    """Arms that start each cell together. ``todo[i]``: the cells arm i will run (its scan before it starts)."""

    def __init__(self, todo: list[set[Cell]]):
        self.todo = todo
        self.arrived: list[dict[Cell, asyncio.Event]] = [{} for _ in todo]
        self.done = [asyncio.Event() for _ in todo]
        self.starts: list[tuple[int, Cell]] = []  # (arm, cell) in the order cells passed the gate: the test's view

    def _event(self, arm: int, cell: Cell) -> asyncio.Event:
        return self.arrived[arm].setdefault(cell, asyncio.Event())

    def gate(self, arm: int) -> Callable[[Cell], Awaitable[None]]:
        async def wait(cell: Cell) -> None:
            self._event(arm, cell).set()
            for other, cells in enumerate(self.todo):
                if other != arm and cell in cells:
                    await _either(self._event(other, cell), self.done[other])
            self.starts.append((arm, cell))

        return wait

    def finished(self, arm: int) -> None:
        self.done[arm].set()  # nobody waits for an arm whose run is over (an error, a stop, nothing left)


async def run_interleaved(arms: list[tuple[GridPlan, TrialBook]], **options: Any) -> list[GridOutcome]:
    """Run the arms' grids in lockstep (module doc); ``options`` go to every ``run_grid``. Returns the outcomes
    in the arms' order."""
    configs = [plan.job_config() for plan, _ in arms]
    if len({(tuple(c.task_names), c.r) for c in configs}) != 1:
        raise ValueError("interleaved arms must share their tasks and r: "
                         + "; ".join(f"{p.job_dir}: {c.task_names} × {c.r}" for (p, _), c in zip(arms, configs)))
    step = Lockstep([set(scan_cells(c, p.job_dir.resolve()).todo) for (p, _), c in zip(arms, configs)])

    async def one(i: int, plan: GridPlan, book: TrialBook) -> GridOutcome:
        try:
            return await run_grid(plan, book, gate=step.gate(i), **options)
        finally:
            step.finished(i)

    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(one(i, plan, book)) for i, (plan, book) in enumerate(arms)]
    return [t.result() for t in tasks]
