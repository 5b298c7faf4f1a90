"""Freeze and transfer after an adoption: what ``rise evolve`` does once a round has adopted vN.

1. **Freeze** vN into ``versions/vN/<name>-vN.rhz`` (``evolve.experiment.freeze``; ledger ``Freeze``, key ``C:freeze``).
2. **Held-out, fixed model**: vN against its parent on the sealed held-out split with the experiment's own model.
   These are the grids every adopted version gets anyway (``P:heldout``, ``C:heldout``, the controller's
   ``heldout``): run here only if missing, read back otherwise.
3. **Second model**: vN and its parent on the development and held-out tasks with another model
   (``[transfer] model / base_url``, by default the bundled 0.5B), ``[transfer] r`` repetitions. One grid per
   version, keyed ``X:transfer:<model>`` (trials ``X:transfer:<model>:<task>:<rep>``, purpose ``transfer``), in
   ``versions/<tag>/transfer/<model>/``, so the parent's grid is shared with the round that adopts its successor.
   No endpoint configured, or none answering: the part is recorded as *skipped* with the reason.
4. The **paired table** (model × split × task: passes/runs and Pass@1 of each arm, and their difference) is
   booked as a ``TransferEvent`` (key ``C:transfer``); ``rounds/rNN/evolve.md`` and ``rise report`` show it.

Every step is a keyed unit written after its work is durable, so a kill -9 anywhere and ``rise evolve --resume``
finish it without running a finished trial again. Nothing here decides anything: it is a record for the reader.
``[transfer] enabled = false`` turns it off.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from evolve.experiment.freeze import freeze
from evolve.experiment.ledger import Freeze, TransferEvent
from evolve.experiment.store import Experiment
from trials.endpoints.spec import EndpointSpec
from validate.evaluate import grid_of_job, kill_point

DEV, HELD = "development", "held-out"


def second_endpoint(exp: Experiment) -> tuple[EndpointSpec | None, str]:
    """The second model's endpoint (the experiment's endpoint settings, another server and model), or why none."""
    tr = exp.config.transfer
    if not tr.base_url:
        return None, (f"no endpoint configured for the second model {tr.model} ([transfer] base_url in "
                      f"{exp.config_path})")
    spec = exp.config.endpoint.model_copy(update={"base_url": tr.base_url, "model": tr.model, "supports_n": None,
                                                  "supports_choice": None, "context_limit": None})
    return spec, ""


async def unreachable(spec: EndpointSpec) -> str:
    """Why ``spec`` cannot serve trials now (empty when its server answers)."""
    from trials.endpoints.client import ModelClient  # here: openai costs every `rise` command half a second

    client = ModelClient(spec)
    try:
        healthy = await client.health()
    finally:
        await client.aclose()
    return "" if healthy else f"the second model's endpoint {spec.base_url} ({spec.model}) does not answer"


def _slug(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", model).strip("_") or "model"


def task_counts(job_dir: Path) -> dict[str, tuple[int, int]]:
    """Per task of a job folder: (passes, runs that finished); ⊥ and missing cells are not runs."""
    grid, _ = grid_of_job(job_dir)
    return {t: (sum(v is True for v in cells), sum(v is not None for v in cells)) for t, cells in grid.items()}


def _rate(passes: int, runs: int) -> float | None:
    return passes / runs if runs else None


def paired_rows(model: str, split: str, tasks: list[str], parent: dict[str, tuple[int, int]],
                new: dict[str, tuple[int, int]]) -> list[dict[str, Any]]:
    """One row per task and a last row ``all`` (passes and runs pooled, Pass@1 the mean over tasks)."""
    rows = []
    for t in tasks:
        a, b = parent.get(t, (0, 0)), new.get(t, (0, 0))
        pa, pb = _rate(*a), _rate(*b)
        rows.append({"model": model, "split": split, "task": t, "parent": list(a), "new": list(b),
                     "parent_pass1": pa, "new_pass1": pb,
                     "difference": None if pa is None or pb is None else pb - pa})
    if rows:
        def mean(key: str) -> float | None:
            vals = [r[key] for r in rows if r[key] is not None]
            return sum(vals) / len(vals) if vals else None

        pa, pb = mean("parent_pass1"), mean("new_pass1")
        rows.append({"model": model, "split": split, "task": "all",
                     "parent": [sum(r["parent"][0] for r in rows), sum(r["parent"][1] for r in rows)],
                     "new": [sum(r["new"][0] for r in rows), sum(r["new"][1] for r in rows)],
                     "parent_pass1": pa, "new_pass1": pb,
                     "difference": None if pa is None or pb is None else pb - pa})
    return rows


def _incomplete(job_dirs: list[Path], r: int, root: Path) -> list[str]:
    """Cells of the given grids that did not finish (⊥ or never ran), as ``job folder: task#k``."""
    out = []
    for job in job_dirs:
        grid, _ = grid_of_job(job)
        out += [f"{os.path.relpath(job, root)}: {t}#{k}" for t, cells in grid.items() for k in range(1, r + 1)
                if k > len(cells) or cells[k - 1] is None]
    return out


def new_part(model: str, role: str, splits: list[str], r: int) -> dict[str, Any]:
    """One part of the table (a model and its splits) before it ran: every field the pages read."""
    return {"model": model, "role": role, "splits": splits, "r": r, "status": "pending", "reason": "", "rows": [],
            "missing": [], "job_dirs": []}


class Transfer:
    """The freeze and transfer units of one adopted version; ``ctl`` is the round's controller (grids, worktrees
    of versions, the held-out split)."""

    def __init__(self, exp: Experiment, ctl: Any, say: Any = print):
        self.exp, self.ctl, self.say = exp, ctl, say
        self.cfg = exp.config

    @property
    def led(self) -> Any:
        return self.ctl.led

    async def run(self, round_no: int, version: str) -> TransferEvent:
        """Freeze ``version`` and run (or finish) its transfer evaluation; returns its booked event."""
        self.ctl.led = self.exp.ledger  # the events of this round so far
        adoption = next((e for e in self.led.find("adoption") if e.version == version), None)
        if adoption is None:
            raise ValueError(f"{self.exp.root}: {version} was never adopted; nothing to transfer")
        commit, parent = adoption.commit, adoption.parent
        if (done := self.led.find("transfer", key=f"{commit}:transfer")):
            return done[0]
        frozen = self.freeze(version, commit)
        parts = [await self.heldout_part(parent, version, commit), await self.second_model_part(parent, version,
                                                                                               commit)]
        table = {"version": version, "parent": parent, "frozen": frozen, "parts": parts}
        ev = self.led.append(TransferEvent(key=f"{commit}:transfer", round=round_no, version=version, parent=parent,
                                           commit=commit, table=table))
        kill_point("transfer")
        return ev

    def freeze(self, version: str, commit: str) -> str:
        out = self.exp.root / "versions" / version / f"{self.cfg.name}-{version}.rhz"
        rel = os.path.relpath(out, self.exp.root)
        if not self.led.done(f"{commit}:freeze"):
            freeze(self.exp, version, out)
            sha = hashlib.sha256(out.read_bytes()).hexdigest()
            self.led.append(Freeze(key=f"{commit}:freeze", version=version, commit=commit, path=rel, sha256=sha))
            self.say(f"froze {version} into {rel} (rise eval --agent {out})")
            kill_point("transfer-freeze")
        return rel

    async def heldout_part(self, parent: str, version: str, commit: str) -> dict[str, Any]:
        """vN against its parent on the held-out split with the experiment's model."""
        model, held = self.cfg.endpoint.model, sorted(self.cfg.tasks.heldout)
        part = new_part(model, "fixed model", [HELD], self.cfg.r)
        if not held:
            return {**part, "status": "skipped", "reason": "no held-out tasks ([tasks] heldout is empty)"}
        jobs = []
        for tag, c in ((parent, self.exp.commit_of(parent)), (version, commit)):
            if not self.led.done(f"{c}:heldout"):  # normally booked already: the parent's reference, vN's adoption
                self.say(f"transfer: {tag} on the held-out split with {model}")
                await self.ctl.heldout(tag, c, self.ctl.version_dir(tag))
            ev = self.led.find("evaluation", key=f"{c}:heldout")
            jobs.append(self.exp.root / ev[0].job_dir)
        rows = paired_rows(model, HELD, held, task_counts(jobs[0]), task_counts(jobs[1]))
        return self._finished(part, rows, jobs, self.cfg.r)

    async def second_model_part(self, parent: str, version: str, commit: str) -> dict[str, Any]:
        """vN against its parent on the development and held-out tasks with the second model."""
        tr = self.cfg.transfer
        dev, held = self.ctl.dev_tasks(), sorted(self.cfg.tasks.heldout)
        part = {**new_part(tr.model, "second model", [DEV] + ([HELD] if held else []), tr.r),
                "base_url": tr.base_url or ""}
        spec, why = second_endpoint(self.exp)
        arms = [(parent, self.exp.commit_of(parent)), (version, commit)]
        prefixes = [f"{c}:transfer:{tr.model}" for _, c in arms]
        if spec is not None and not all(self.led.done(p) for p in prefixes):
            why = await unreachable(spec)
        if spec is None or why:
            self.say(f"transfer: second model skipped: {why}")
            return {**part, "status": "skipped", "reason": why}
        jobs = []
        for (tag, c), prefix in zip(arms, prefixes, strict=True):
            job = self.exp.root / "versions" / tag / "transfer" / _slug(tr.model)
            if not self.led.done(prefix):
                self.say(f"transfer: {tag} on {len(dev) + len(held)} task(s) x r = {tr.r} with {tr.model}")
                plan = replace(self.ctl.plan("transfer", self.ctl.version_dir(tag), dev + held, tr.r, job),
                               endpoint=spec)
                out = await self.ctl.grid(plan, c, prefix)
                self.ctl._evaluation_event(prefix, c, out, "transfer", model=tr.model)
                kill_point("transfer-grid")
            jobs.append(job)
        counts = [task_counts(j) for j in jobs]
        rows = paired_rows(tr.model, DEV, dev, counts[0], counts[1])
        if held:
            rows += paired_rows(tr.model, HELD, held, counts[0], counts[1])
        return self._finished(part, rows, jobs, tr.r)

    def _finished(self, part: dict[str, Any], rows: list[dict[str, Any]], jobs: list[Path],
                  r: int) -> dict[str, Any]:
        missing = _incomplete(jobs, r, self.exp.root)
        return {**part, "status": "incomplete" if missing else "done", "rows": rows, "missing": missing,
                "job_dirs": [os.path.relpath(j, self.exp.root) for j in jobs]}


def transfer_pending(exp: Experiment, version: str) -> bool:
    """Whether ``rise evolve`` still has to freeze and transfer adopted ``version`` (``[transfer] enabled``)."""
    return exp.config.transfer.enabled and not exp.ledger.done(f"{exp.commit_of(version)}:transfer")


async def run_transfer(exp: Experiment, ctl: Any, round_no: int, version: str, say: Any = print) -> TransferEvent:
    """Freeze ``version`` and run its transfer evaluation against its parent (see the module docstring)."""
    return await Transfer(exp, ctl, say).run(round_no, version)


def transfer_of_round(exp: Experiment, round_no: int) -> dict[str, Any] | None:
    """The transfer table booked in round ``round_no`` (None: no adoption, or not run yet)."""
    ev = exp.ledger.find("transfer", round=round_no)
    return ev[-1].table if ev else None
