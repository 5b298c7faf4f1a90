"""The experiment's spending and its limits, in one place.

- :func:`check_budget`: ``budgets.max_trials`` and ``budgets.max_usd`` of experiment.toml, checked by the round
  controller before each grid.
- :class:`LoopBudget`: the limits of ``rise evolve``, checked before each unit of work (a role call, a grid, a round);
  :func:`arm_deadline`: the wall-time limit inside a long unit too.


Spend is read back from what is on disk, so a resumed loop counts everything earlier runs spent:
role calls from their transcripts (every ``end`` row: cost and tokens, failed calls included) anywhere under
``rounds/``, trials from their folders (:func:`evolve.experiment.trial_scan.experiment_spend`). A unit is refused when
the spend so far plus the unit's *reserve* would pass a limit: a role's reserve is its ``limits.max_usd`` when
set, else the dearest call of that role so far (0 before the first one), so the loop stops **before** the unit
that would exceed the budget, not after it.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from evolve.experiment.store import ControllerError, Experiment
from evolve.experiment.trial_scan import experiment_spend
from evolve.roles.runtime.transcript import call_ends
from trials.cost import CostSummary
from trials.harness_api import Cost


@dataclass
class Spend:
    """What an experiment spent so far: its role calls and its trials, each in the platform's cost records."""

    roles: Cost = field(default_factory=Cost)  # role calls: calls, tokens, dollars
    trials: CostSummary = field(default_factory=CostSummary)  # trials: their count, tokens by model role, dollars
    dearest: dict[str, float] = field(default_factory=dict)  # role -> the dearest call so far
    by_role: dict[str, float] = field(default_factory=dict)

    @property
    def usd(self) -> float:
        return self.roles.usd + self.trials.usd


def role_spend(folder: Path) -> Spend:
    """Cost and tokens of every role call whose transcript lies under ``folder`` (``rounds/`` or one round)."""
    out = Spend()
    for row in call_ends(sorted(folder.rglob("transcripts/*.jsonl"))):
        role, cost = str(row.get("role", "?")), float(row.get("cost") or 0.0)
        usage = row.get("usage") or {}
        out.roles.add(int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0), usd=cost)
        out.by_role[role] = out.by_role.get(role, 0.0) + cost
        out.dearest[role] = max(out.dearest.get(role, 0.0), cost)
    return out


def spend(exp: Experiment) -> Spend:
    """Role calls and trials together."""
    out = role_spend(exp.root / "rounds")
    out.trials = CostSummary.total(experiment_spend(exp).values())
    return out


class BudgetStop(Exception):
    """A unit would pass a budget; raising the budget and ``--resume`` continues from that unit."""


class GridBudgetSpent(ControllerError):
    """experiment.toml's ``[budgets]`` are spent before a grid (:func:`check_budget`): a controller error for
    ``rise round``, a budget stop for ``rise evolve``."""


@dataclass
class LoopBudget:
    """The limits of one ``rise evolve``: $ (role calls + trials), tokens (role calls), trials, wall time."""

    max_usd: float | None = None
    max_tokens: int | None = None
    max_trials: int | None = None
    max_seconds: float | None = None
    started: float = field(default_factory=time.monotonic)

    def check(self, exp: Experiment, unit: str, role: str | None = None, limit_usd: float | None = None,
              calls: int = 1) -> Spend:
        """Raise :class:`BudgetStop` naming ``unit`` when it may not start (``role``: the role it calls,
        ``calls`` times, each with ``limit_usd`` as its $ limit); returns the spend so far."""
        s = spend(exp)
        reserve_usd = self.reserve(s, role, limit_usd, calls) if role else 0.0
        if self.max_usd is not None and s.usd + reserve_usd > self.max_usd:
            raise BudgetStop(f"$ budget: ${s.usd:.4f} spent (roles ${s.roles.usd:.4f}, trials ${s.trials.usd:.4f})"
                             f" + ${reserve_usd:.4f} reserved for {unit} > max_usd ${self.max_usd:.4f}")
        if self.max_tokens is not None and s.roles.tokens >= self.max_tokens:
            raise BudgetStop(f"token budget: {s.roles.tokens} role tokens spent >= {self.max_tokens}, before {unit}")
        if self.max_trials is not None and s.trials.trials >= self.max_trials:
            raise BudgetStop(f"trial budget: {s.trials.trials} trials run >= {self.max_trials}, before {unit}")
        if self.max_seconds is not None and time.monotonic() - self.started >= self.max_seconds:
            raise BudgetStop(f"wall-time budget: {self.max_seconds:.0f} s used, before {unit}")
        return s

    def reserve(self, s: Spend, role_name: str, limit_usd: float | None, calls: int = 1) -> float:
        """What ``calls`` calls of a role may cost (see the module docstring)."""
        one = limit_usd if limit_usd is not None else s.dearest.get(role_name, 0.0)
        return one * calls


def check_budget(exp: Experiment) -> None:
    """Refuse to start another grid once the experiment's trials have spent a budget of experiment.toml.

    Checked before each grid (a grid under way may overshoot by at most its own size); trials a kill cut off
    count too. Raising the budget in experiment.toml and resuming continues where the run stopped."""
    budgets = exp.config.budgets
    if budgets.max_trials is None and budgets.max_usd is None:
        return
    total = CostSummary.total(experiment_spend(exp).values())
    trials, usd = total.trials, total.usd
    if budgets.max_trials is not None and trials >= budgets.max_trials:
        raise GridBudgetSpent(f"{exp.config_path}: budget spent: {int(trials)} trials run, "
                              f"budgets.max_trials = {budgets.max_trials}")
    if budgets.max_usd is not None and usd >= budgets.max_usd:
        raise GridBudgetSpent(f"{exp.config_path}: budget spent: ${usd:.4f}, budgets.max_usd = {budgets.max_usd}")


# A unit that ends within this margin after the deadline stops the loop cleanly (LoopBudget.check) before the
# watchdog below has to cut anything off.
DEADLINE_GRACE_SEC = 60.0


def arm_deadline(max_seconds: float, say: Callable[[str], None], grace: float = DEADLINE_GRACE_SEC,
                 stop: Callable[[], None] | None = None) -> threading.Timer:
    """``rise evolve --max-hours``: the loop checks its wall time between units (:meth:`LoopBudget.check`), but a
    unit can last hours (a reference corpus of 136 trials). This watchdog stops the process ``grace`` seconds after
    the deadline if it is still running, as a kill would (SIGTERM: trials in flight are cut off; ``--resume``
    moves them aside and reruns them; nothing finished is lost or done twice). Daemon: it dies with a process
    that stopped by itself. ``stop`` replaces the SIGTERM (tests)."""

    def fire() -> None:
        say(f"wall-time budget: {max_seconds / 3600:g} h reached inside a unit; stopping now as a kill would "
            "(what is in flight is cut off; rerun with --resume to go on)")
        if stop is not None:
            stop()
        else:
            os.kill(os.getpid(), signal.SIGTERM)

    timer = threading.Timer(max(max_seconds + grace, 0.0), fire)
    timer.daemon = True
    timer.start()
    return timer
