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
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from pydantic import BaseModel

from trials.results import TrialResult
from trials.time_split import grid_load, grid_split
from validate.adoption import Decision

MAX_LOAD_GAP = 0.5
SPEED_RATIO = (0.8, 1.25)


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


def check_load(candidate: Iterable[TrialResult], incumbent: Iterable[TrialResult], action: str = "flag") -> LoadCheck:
    cand, inc = arm_load(candidate), arm_load(incumbent)
    reasons: list[str] = []
    if cand.load_per_cpu is not None and inc.load_per_cpu is not None:
        gap = cand.load_per_cpu - inc.load_per_cpu
        if abs(gap) > MAX_LOAD_GAP:
            reasons.append(f"mean load per CPU {cand.load_per_cpu:.2f} (candidate) vs {inc.load_per_cpu:.2f} "
                           f"(incumbent): differs by more than {MAX_LOAD_GAP}")
    if cand.decode_tok_s and inc.decode_tok_s:
        ratio = cand.decode_tok_s / inc.decode_tok_s
        if not SPEED_RATIO[0] <= ratio <= SPEED_RATIO[1]:
            reasons.append(f"decode speed {cand.decode_tok_s:.1f} vs {inc.decode_tok_s:.1f} tok/s (ratio "
                           f"{ratio:.2f}, outside [{SPEED_RATIO[0]}, {SPEED_RATIO[1]}])")
    return LoadCheck(candidate=cand, incumbent=inc, comparable=not reasons, reasons=reasons, action=action)


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
    if check.comparable:
        return lines + ["load: comparable"]
    verdict = "refused (not adopted)" if check.action == "refuse" else "flagged (recorded only)"
    return lines + [f"load: NOT comparable, {verdict}: {r}" for r in check.reasons]
