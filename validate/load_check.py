"""Were the two arms of a decision run under the same load? (``decision["load"]``)

On a small machine a trial's turns before its wall-clock timeout depend on the model's speed, which depends on
what else runs. Each trial's ``result.json`` carries the host's load (``machine_load``: load average, busy share)
and its model calls' speeds (``inference``: decode tokens/s). Per arm: the mean 1-minute load average per CPU
at the trials' end, the mean busy share and the decode speed over all calls (tokens over seconds). The arms
are **not comparable** when

- their mean load per CPU differs by more than ``MAX_LOAD_GAP`` (0.5: half a runnable process per core more
  in one arm, enough on 2 cores to slow a CPU-bound model server by about a third), or
- the candidate's decode speed over the incumbent's is outside ``SPEED_RATIO`` ([0.8, 1.25]).

A measure missing in either arm (old trials, a server that gives no timings) is not compared: the check says so.

**Paired (interleaved) arms** share the load by construction, as long as each block's two trials really ran side by
side; so there the check asks that directly: a block ran **side by side** when its two trials overlapped in time
for at least ``SIDE_BY_SIDE`` (90 %) of the shorter one, and the check notes it when fewer than
``MIN_SIDE_BY_SIDE`` (90 %) of the blocks with both trials' times did (a resume that ran one arm's cells alone, a
lockstep that broke). A note, not yet a reason: every kill -9 and resume leaves the block it cut off apart, which on
a small grid is most of it (2 of 4 blocks in the kill test), and the threshold is not calibrated on real resumes. The decode-speed ratio is shown but is no reason there: in a block the trial that ends first
leaves the model server to its partner, so each arm's speed follows the arms' own lengths, not the machine (the
first real null comparison, 2026-12-07, had the seed at 0.57× of itself after six blocks).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import replace

from pydantic import BaseModel

from trials.results import TrialResult
from trials.time_split import grid_load, grid_split
from validate.adoption import Decision

MAX_LOAD_GAP = 0.5
SPEED_RATIO = (0.8, 1.25)
SIDE_BY_SIDE = 0.9  # a block's two trials overlapped for this share of the shorter one
MIN_SIDE_BY_SIDE = 0.9  # share of the blocks that must have run side by side (paired arms)


class ArmLoad(BaseModel):
    """One arm's load over its trials (None: no trial recorded it)."""

    trials: int = 0
    load_per_cpu: float | None = None
    busy: float | None = None
    decode_tok_s: float | None = None


class LoadCheck(BaseModel):
    """The two arms side by side and whether they are comparable."""

    candidate: ArmLoad
    incumbent: ArmLoad
    comparable: bool = True
    reasons: list[str] = []
    action: str = "flag"  # refuse: a not comparable evaluation is not adopted; flag: recorded only
    paired: bool = False  # interleaved arms: the blocks' overlap decides, the speeds are shown (module doc)
    blocks: int | None = None  # paired: blocks whose two trials both have start and end times
    side_by_side: int | None = None  # paired: of those, the blocks that ran side by side
    notes: list[str] = []  # shown, not reasons

    @property
    def refused(self) -> bool:
        return not self.comparable and self.action == "refuse"


def arm_load(results: Iterable[TrialResult]) -> ArmLoad:
    """One arm's load from its trials that are evidence: the grid's load and decode speed as ``rise trace time``
    computes them (trials.time_split), so the check and the report read one figure."""
    runs = [r for r in results if not r.is_infra]
    load = grid_load(runs)
    return ArmLoad(trials=len(runs), load_per_cpu=load.load_per_cpu,
                   busy=round(load.busy, 3) if load.busy is not None else None,
                   decode_tok_s=grid_split(runs).inference.decode_tok_s)


def _span(res: TrialResult) -> tuple[float, float] | None:
    if not res.started_at or not res.finished_at:
        return None
    try:
        return (dt.datetime.fromisoformat(res.started_at).timestamp(),
                dt.datetime.fromisoformat(res.finished_at).timestamp())
    except ValueError:
        return None


def blocks_side_by_side(candidate: Iterable[TrialResult], incumbent: Iterable[TrialResult]) -> tuple[int, int]:
    """(blocks (task, k) both arms finished with start and end times, of which ran side by side: the two trials
    overlapped for at least ``SIDE_BY_SIDE`` of the shorter one)."""
    inc = {(r.task_name, r.repetition): r for r in incumbent if not r.is_infra}
    blocks = together = 0
    for c in candidate:
        i = inc.get((c.task_name, c.repetition))
        if c.is_infra or i is None or (a := _span(c)) is None or (b := _span(i)) is None:
            continue
        blocks += 1
        shorter = min(a[1] - a[0], b[1] - b[0])
        together += shorter <= 0 or min(a[1], b[1]) - max(a[0], b[0]) >= SIDE_BY_SIDE * shorter
    return blocks, together


def check_load(candidate: Iterable[TrialResult], incumbent: Iterable[TrialResult], action: str = "flag",
               paired: bool = False) -> LoadCheck:
    """The two arms' load side by side and whether they are comparable (module doc); ``paired``: interleaved
    arms, whose blocks must have run side by side."""
    candidate, incumbent = list(candidate), list(incumbent)
    cand, inc = arm_load(candidate), arm_load(incumbent)
    reasons: list[str] = []
    notes: list[str] = []
    if cand.load_per_cpu is not None and inc.load_per_cpu is not None:
        gap = cand.load_per_cpu - inc.load_per_cpu
        if abs(gap) > MAX_LOAD_GAP:
            reasons.append(f"mean load per CPU {cand.load_per_cpu:.2f} (candidate) vs {inc.load_per_cpu:.2f} "
                           f"(incumbent): differs by more than {MAX_LOAD_GAP}")
    if cand.decode_tok_s and inc.decode_tok_s:
        ratio = cand.decode_tok_s / inc.decode_tok_s
        if not SPEED_RATIO[0] <= ratio <= SPEED_RATIO[1]:
            what = (f"decode speed {cand.decode_tok_s:.1f} vs {inc.decode_tok_s:.1f} tok/s (ratio {ratio:.2f}, "
                    f"outside [{SPEED_RATIO[0]}, {SPEED_RATIO[1]}])")
            if paired:
                notes.append(f"{what}: not a reason with paired arms (a trial that ends first leaves the server to "
                             "its partner)")
            else:
                reasons.append(what)
    blocks = together = None
    if paired:
        blocks, together = blocks_side_by_side(candidate, incumbent)
        if blocks and together < MIN_SIDE_BY_SIDE * blocks:  # shown, not yet a reason: see the module doc
            notes.append(f"only {together} of {blocks} blocks ran side by side (both trials overlapping for "
                           f"{SIDE_BY_SIDE:.0%} of the shorter one); the others ran apart")
    return LoadCheck(candidate=cand, incumbent=inc, comparable=not reasons, reasons=reasons, action=action,
                     paired=paired, blocks=blocks, side_by_side=together, notes=notes)


def apply_load_check(decision: Decision, load: LoadCheck) -> Decision:
    """``decision``, or, when ``load`` refuses and it adopted, the same decision turned into a rejection that says
    why (the round and ``rise pair`` alike)."""
    if load.refused and decision.adopt:
        return replace(decision, adopt=False, reason=f"not comparable, the arms ran under different load "
                       f"({'; '.join(load.reasons)}): {decision.reason}")
    return decision


def load_lines(load: dict | None) -> list[str]:
    """``decision["load"]`` as lines for ``rise show`` and the report: both arms side by side, then the verdict."""
    if not load:
        return []
    check = LoadCheck.model_validate(load)

    def cell(x: float | None, fmt: str) -> str:
        return "—" if x is None else format(x, fmt)

    c, i = check.candidate, check.incumbent
    head = (f"load (candidate | incumbent): load/CPU {cell(c.load_per_cpu, '.2f')} | {cell(i.load_per_cpu, '.2f')}, "
            f"busy {cell(c.busy, '.0%')} | {cell(i.busy, '.0%')}, decode {cell(c.decode_tok_s, '.1f')} | "
            f"{cell(i.decode_tok_s, '.1f')} tok/s, {c.trials} | {i.trials} trials")
    lines = [head]
    if check.paired and check.blocks is not None:
        lines.append(f"paired arms: {check.side_by_side} of {check.blocks} blocks ran side by side")
    lines += [f"load note: {n}" for n in check.notes]
    if check.comparable:
        return lines + ["load: comparable"]
    verdict = "refused (not adopted)" if check.action == "refuse" else "flagged (recorded only)"
    return lines + [f"load: NOT comparable, {verdict}: {r}" for r in check.reasons]
