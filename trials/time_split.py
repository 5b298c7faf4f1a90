"""Where a trial's wall time went, and a grid's: the one computation behind ``rise trace time`` and the report.

A trial's time (``result.json``) is split into: the model's **prefill**, **decode** and **waiting** (a split call's
wall time that was neither: a slot's queue, HTTP), model time the server did not split (**model**, e.g. vLLM),
the harness's **other** agent time (its commands running in the sandbox, tmux waits, its own code), the
**sandbox**'s start and stop, and the **verifier**. Model calls that ran at once each count their own time, so
the model parts can exceed the agent's time; ``other`` is then 0. A grid sums its trials and averages their
machine load (:mod:`trials.load`).
"""

from __future__ import annotations

from collections.abc import Iterable
from statistics import mean

from pydantic import BaseModel, Field

from .endpoints.timings import InferenceSummary
from .results import TrialResult

PARTS = ("prefill", "decode", "waiting", "model", "other", "sandbox", "verifier")
PART_LABELS = {"prefill": "prefill", "decode": "decode", "waiting": "waiting (queue)", "model": "model (unsplit)",
               "other": "commands + harness", "sandbox": "sandbox start/stop", "verifier": "verifier"}


class TimeSplit(BaseModel):
    """Seconds per part (see the module docstring) of one trial or the sum of a grid's trials."""

    trials: int = 0
    measured: int = Field(default=0, description="trials whose model calls have timings")
    prefill: float = 0.0
    decode: float = 0.0
    waiting: float = 0.0
    model: float = 0.0
    other: float = 0.0
    sandbox: float = 0.0
    verifier: float = 0.0
    total: float = Field(default=0.0, description="the trials' wall time (result.json durations.total)")
    inference: InferenceSummary = Field(default_factory=InferenceSummary)

    def parts(self) -> dict[str, float]:
        return {p: getattr(self, p) for p in PARTS}

    def share(self, part: str) -> float | None:
        """``part``'s seconds over the sum of all parts (None for an empty split)."""
        whole = sum(self.parts().values())
        return getattr(self, part) / whole if whole > 0 else None

    def add(self, other: TimeSplit) -> TimeSplit:
        for name in ("trials", "measured", *PARTS, "total"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.inference.merge(other.inference)
        return self


def trial_split(res: TrialResult) -> TimeSplit:
    """One trial's :class:`TimeSplit` from its ``result.json``."""
    d, inf = res.durations, res.inference or InferenceSummary()
    return TimeSplit(trials=1, measured=int(res.inference is not None), prefill=inf.prefill_sec,
                     decode=inf.decode_sec, waiting=inf.waiting_sec, model=inf.unsplit_sec,
                     other=max(0.0, d.agent - inf.wall_sec), sandbox=d.env_start + d.env_stop,
                     verifier=d.verifier, total=d.total, inference=inf.model_copy())


def grid_split(results: Iterable[TrialResult]) -> TimeSplit:
    """The sum of the trials' splits (⊥ trials included: their time was spent too)."""
    total = TimeSplit()
    for res in results:
        total.add(trial_split(res))
    return total


class GridLoad(BaseModel):
    """A grid's machine load, averaged over the trials that recorded one."""

    trials: int = 0
    cpus: int | None = None
    load_per_cpu: float | None = Field(default=None, description="mean 1-min load average at a trial's end, "
                                       "over the CPU count (above 1: runnable work waited for a CPU)")
    load_per_cpu_max: float | None = None
    busy: float | None = Field(default=None, description="mean share of CPU time busy over a trial")
    steal: float | None = Field(default=None, description="mean share of CPU time stolen (None: not counted)")


def grid_load(results: Iterable[TrialResult]) -> GridLoad:
    loads = [r.machine_load for r in results if r.machine_load is not None]
    per_cpu = [x for x in (m.load_per_cpu for m in loads) if x is not None]
    busy = [m.busy for m in loads if m.busy is not None]
    steal = [m.steal for m in loads if m.steal is not None]
    return GridLoad(trials=len(loads), cpus=max((m.cpus or 0 for m in loads), default=0) or None,
                    load_per_cpu=round(mean(per_cpu), 3) if per_cpu else None,
                    load_per_cpu_max=round(max(per_cpu), 3) if per_cpu else None,
                    busy=round(mean(busy), 4) if busy else None, steal=round(mean(steal), 4) if steal else None)


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f}%"


def _rate(x: float | None) -> str:
    return "—" if x is None else f"{x:.1f} tok/s"


def render_split(split: TimeSplit, load: GridLoad | None = None) -> str:
    """Plain-text lines: seconds and share per part, the cache hit ratio and the speeds (and the load)."""
    lines = [f"{PART_LABELS[p]:<20} {getattr(split, p):9.1f} s  {_pct(split.share(p)):>4}" for p in PARTS]
    inf = split.inference
    lines.append(f"{'trial wall time':<20} {split.total:9.1f} s  ({split.trials} trial(s), {split.measured} "
                 f"with model timings, {inf.calls} model call(s))")
    lines.append(f"prompt cache hits    {_pct(inf.cache_hit_ratio):>11}  ({inf.cache_n} of "
                 f"{inf.cache_n + inf.prompt_n} prompt tokens)" if inf.cache_known else
                 "prompt cache hits              —  (the server did not say)")
    lines.append(f"prefill {_rate(inf.prefill_tok_s)}, decode {_rate(inf.decode_tok_s)}")
    if load is not None and load.trials:
        lines.append(f"machine load: {load.load_per_cpu or 0:.2f} per CPU on average (max "
                     f"{load.load_per_cpu_max or 0:.2f}, {load.cpus} CPUs), busy {_pct(load.busy)}, "
                     f"steal {_pct(load.steal)}")
    return "\n".join(lines)
