"""What a rejected candidate would have needed: the fewest more passes that would have turned its decision.

The morning page's question after a night that adopted nothing (issue 39): was the best candidate close? Given the
candidate's complete grid and the baseline it was decided against, :func:`passes_needed` turns the candidate's
failed runs into passes one at a time, each where it lowers the policy's p-value most (where several adopt, the
first), until the same rule (:func:`validate.adoption_stats.decide_many`, the one the decision ran) adopts. The
count is that greedy path's length: an upper bound on the fewest passes that adopt, and exact for ``paper`` (any
pass raises the aggregate Pass@1 alike). A grid on which even every run passing is not adopted says so.

``coupled`` decides on the discordant pairs of two interleaved arms, where the same pass counts differently by the
baseline's run at its side: not computed here (the line says so).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .adoption import _counts
from .adoption_stats import decide_many
from .coupled import COUPLED

Grid = dict[str, list[bool | None]]


@dataclass
class Needed:
    passes: int  # the candidate's passes (a ⊥ counted as a run that did not pass, as Pass@1 does)
    runs: int
    more: int | None  # the more passes that adopt (None: none do, not even every run passing)
    added: dict[str, int]  # where the greedy path put them, per task
    baseline_pass_at_1: float

    @property
    def pass_at_1(self) -> float:
        return self.passes / self.runs if self.runs else 0.0

    def line(self, policy: str) -> str:
        have = f"it had {self.passes} passes of {self.runs} runs (Pass@1 {self.pass_at_1:.3f})"
        if self.more is None:
            return (f"{have}: not even every run passing would have been adopted under {policy} against the "
                    f"baseline's {self.baseline_pass_at_1:.3f}")
        if self.more == 0:
            return f"{have}: its counts pass {policy}'s test as they stand (it was rejected for another reason)"
        where = ", ".join(f"{t} +{k}" for t, k in sorted(self.added.items()) if k)
        return (f"{have}; adoption under {policy} needed {self.more} more (Pass@1 "
                f"{(self.passes + self.more) / self.runs:.3f} against the baseline's {self.baseline_pass_at_1:.3f}; "
                f"at most {self.more}, placed {where})")


def passes_needed(candidate: Grid, baseline: Grid, tasks: list[str], policy: str, alpha: float) -> Needed | None:
    """The greedy count of more passes that adopt (see the module docstring); None for ``coupled`` or no runs."""
    if policy == COUPLED:
        return None
    passes, nc = _counts(candidate, tasks)
    base, nb = _counts(baseline, tasks)
    c, b = np.array(passes, dtype=int), np.array(base, dtype=int)
    if not sum(nc):
        return None
    start = c.copy()
    out = Needed(int(c.sum()), sum(nc), None, {}, float(b.sum() / max(1, sum(nb))))
    adopt, _ = decide_many(c[None, :], nc, b[None, :], nb, policy, alpha)
    more = 0
    while not adopt[0]:
        room = [i for i in range(len(tasks)) if c[i] < nc[i]]
        if not room:
            return out  # every run passes and still no adoption
        tries = np.repeat(c[None, :], len(room), axis=0)
        tries[np.arange(len(room)), room] += 1
        adopts, p = decide_many(tries, nc, np.repeat(b[None, :], len(room), axis=0), nb, policy, alpha)
        pick = int(np.argmax(adopts)) if adopts.any() else (int(np.argmin(p)) if p is not None else 0)
        c, more = tries[pick], more + 1
        adopt = adopts[pick:pick + 1]
    out.more = more
    out.added = {t: int(k) for t, k in zip(tasks, c - start)}
    return out
