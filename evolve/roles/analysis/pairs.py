"""Success/failure pairs from a reference corpus: the flipping tasks, and what is kept aside.

A corpus is a job folder of ``<task>__r<k>`` trial folders with ``result.json`` (a version's
``versions/vN/reference``). A task is **flipping** when some runs passed and some failed (⊥ runs count for
neither); each failed run is paired with a successful run of the same task, first round covering every failing
run once (with successes rotated), later rounds other successes, up to ``per_task`` pairs; a ``total`` cap takes
pairs round-robin across tasks so every flipping task is analysed before any gets a second pair. Tasks that
failed every run are listed (not analysed); tasks that passed every run are the **at risk** set for proposals.
"""

from __future__ import annotations

import re
from pathlib import Path

from evolve.roles.analysis.models import Pair, PairSet, TrialRef
from trials.results import FormatError, TrialResult

TRIAL_DIR = re.compile(r"^(?P<task>.+)__r(?P<rep>\d+)$")


class CorpusError(ValueError):
    """A reference corpus that cannot be read."""


def read_corpus(corpus: str | Path) -> dict[str, TrialRef]:
    """Every trial of a corpus by folder name; a trial without a readable result.json is an error naming it."""
    root = Path(corpus)
    if not root.is_dir():
        raise CorpusError(f"{root}: no such reference corpus (run `rise reference` first?)")
    out: dict[str, TrialRef] = {}
    for folder in sorted(root.iterdir()):
        m = TRIAL_DIR.match(folder.name)
        if not m or not folder.is_dir():
            continue
        try:
            res = TrialResult.load(folder / "result.json")
        except FileNotFoundError:
            raise CorpusError(f"{folder}: no result.json (an unfinished trial; finish the grid with --resume)") \
                from None
        except FormatError as exc:
            raise CorpusError(str(exc)) from None
        out[folder.name] = TrialRef(trial=folder.name, task=res.task_name, rep=res.repetition, status=res.status)
    if not out:
        raise CorpusError(f"{root}: no trial folders (<task>__r<k>) in this corpus")
    return out


def _task_pairs(task: str, passed: list[TrialRef], failed: list[TrialRef], per_task: int) -> list[Pair]:
    pairs = []
    for rnd in range(len(passed)):  # round 0 pairs every failing run; later rounds use other successes
        for i, fail in enumerate(failed):
            ok = passed[(i + rnd) % len(passed)]
            pairs.append(Pair(key=f"{task}:{ok.rep}:{fail.rep}", task=task, success=ok, failure=fail))
    return pairs[:per_task]


def make_pairs(corpus: str | Path, *, per_task: int = 2, total: int | None = None) -> PairSet:
    """The pair set of a reference corpus (see the module docstring for the choice)."""
    if per_task < 1:
        raise ValueError(f"per_task must be at least 1 (got {per_task})")
    trials = read_corpus(corpus)
    by_task: dict[str, list[TrialRef]] = {}
    for t in trials.values():
        by_task.setdefault(t.task, []).append(t)
    out = PairSet(corpus=str(corpus), trials=trials)
    per: dict[str, list[Pair]] = {}
    for task in sorted(by_task):
        runs = sorted(by_task[task], key=lambda t: t.rep)
        passed = [t for t in runs if t.status == "passed"]
        failed = [t for t in runs if t.status == "failed"]
        if passed and failed:
            out.flipping.append(task)
            per[task] = _task_pairs(task, passed, failed, per_task)
        elif failed:
            out.all_failure.append(task)
        elif passed:
            out.at_risk.append(task)
        else:
            out.incomplete.append(task)
    depth = max((len(p) for p in per.values()), default=0)
    chosen = [per[t][d] for d in range(depth) for t in out.flipping if d < len(per[t])]
    out.pairs = chosen if total is None else chosen[:total]
    return out
