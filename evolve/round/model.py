"""What a round works with and hands back: the candidate inputs and proposals, per-candidate and per-round
reports, the stop signal of a candidate's stages, and the ledger book that grids record their trials in."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evolve.experiment.ledger import Ledger, TrialDone
from evolve.experiment.store import ControllerError
from trials.results import TrialResult
from validate.evaluate import GridOutcome

__all__ = ["ControllerError"]  # defined with the experiment, raised by every stage of a round
CHARGED = "candidate_infra"  # agent_error_kind of a ⊥ cell charged to the candidate (charge)


class Proposal(BaseModel):
    """What a candidate claims (from the proposer, or a file next to a patch): the screening reads it."""

    model_config = ConfigDict(extra="allow")
    mechanism: str = ""
    summary: str = ""
    tasks: list[str] = Field(default_factory=list, description="tasks it concerns (screening); empty: all dev")
    boundaries: list[str] = Field(default_factory=list, description="spans that show it ran; empty: contracts'")


@dataclass
class CandidateInput:
    slug: str
    source: str  # a patch file, or a branch/commit of the harness repo
    proposal: Proposal = field(default_factory=Proposal)


@dataclass
class CandidateReport:
    slug: str
    commit: str = ""
    status: str = "pending"  # adopted | rejected | blocked | pending
    reason: str = ""
    version: str | None = None
    regressions: list[str] = field(default_factory=list)
    decision: dict[str, Any] = field(default_factory=dict)


@dataclass
class RoundReport:
    round: int
    incumbent: str
    candidates: list[CandidateReport]
    adopted: str | None = None

    @property
    def blocked(self) -> bool:
        return any(c.status == "blocked" for c in self.candidates)


class LedgerBook:
    """Books a grid's trials as ``TrialDone`` keyed ``<prefix>:<task>:<rep>`` (⊥ attempts: ``…:infra<n>``)."""

    def __init__(self, led: Ledger, root: Path, commit: str, prefix: str, purpose: str):
        self.led, self.root, self.commit, self.prefix = led, root, commit, prefix
        self.purpose = purpose

    def finished(self, task: str, rep: int) -> bool:
        return self.led.done(f"{self.prefix}:{task}:{rep}")

    def record(self, result: TrialResult, trial_dir: Path) -> None:
        key = f"{self.prefix}:{result.task_name}:{result.repetition}"
        if result.is_infra:
            n = 1
            while self.led.done(f"{key}:infra{n}"):
                n += 1
            key = f"{key}:infra{n}"
        rel = os.path.relpath(trial_dir, self.root)
        self.led.append(TrialDone(key=key, commit=self.commit, purpose=self.purpose, task=result.task_name,
                                  rep=result.repetition, status=result.status, trial_dir=rel))


def charged_cells(led: Ledger, commit: str, purpose: str, results: dict[tuple[str, int], TrialResult],
                  baseline: dict[str, list[bool | None]], limit: int) -> dict[tuple[str, int], int]:
    """⊥ cells charged to the candidate, with their ⊥ attempts: those that stayed ⊥ through ``limit`` attempts
    while the incumbent ran the same task without a ⊥ cell. A candidate that breaks its own sandbox would otherwise
    be ⊥ forever and block its round; an infrastructure fault hits the incumbent too. One rule at the decision and
    at publication alike: a charged cell makes the candidate unpublishable (:func:`unpublishable`)."""
    out = {}
    for (task, rep), res in results.items():
        healthy = bool(baseline.get(task)) and all(v is not None for v in baseline[task])
        if not res.is_infra or not healthy:
            continue
        attempts = infra_attempts(led, commit, purpose, task, rep)
        if attempts >= limit:
            out[(task, rep)] = attempts
    return out


def infra_attempts(led: Ledger, commit: str, purpose: str, task: str, rep: int) -> int:
    """How many ⊥ attempts of one cell the ledger has booked (every invocation's)."""
    return sum(1 for e in led.find("trial_done", commit=commit, task=task, rep=rep, status="infra")
               if e.purpose == purpose)


def charge(results: dict[tuple[str, int], TrialResult], charged: dict[tuple[str, int], int]
           ) -> dict[tuple[str, int], TrialResult]:
    """``results`` with each charged ⊥ cell turned into a failure of the candidate (the evidence stays)."""
    out = dict(results)
    for key, attempts in charged.items():
        res = out[key]
        out[key] = res.model_copy(update={
            "status": "failed", "agent_error_kind": CHARGED,
            "agent_error": f"⊥ in {attempts} attempts where the incumbent is healthy: counted as the candidate's "
                           f"failure ({res.infra_cause or 'infra'})"})
    return out


class Stop(Exception):
    """Ends one candidate's stages with a status (rejected, blocked) and its reason; the round goes on."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


class Unpublishable(Stop):
    """Publication cannot adopt this contender (cells of its grid charged as ⊥): it is rejected, the others go on."""

    def __init__(self, candidate: CandidateReport, reason: str, cells: list[str]):
        super().__init__("rejected", reason)
        self.candidate, self.cells = candidate, cells  # the charged cells, task#k


def charged_of(results: dict[tuple[str, int], TrialResult]) -> list[tuple[str, int]]:
    """The cells that :func:`charge` turned into the candidate's failures."""
    return sorted(cell for cell, res in results.items() if res.agent_error_kind == CHARGED)


def unpublishable(led: Ledger, commit: str, cells: list[tuple[str, int]], where: str) -> tuple[str, list[str]]:
    """Why a candidate with charged ⊥ cells is rejected (the same words at the decision and at publication), and
    the cells as ``task#k``."""
    names = [f"{t}#{k}" for t, k in cells]
    each = ", ".join(f"{n} ({infra_attempts(led, commit, 'evaluation', t, k)} attempts)"
                     for n, (t, k) in zip(names, cells))
    return (f"rejected — cannot be published: {each} stayed ⊥ {where} where the incumbent ran the same tasks "
            "without ⊥ (the candidate breaks its own sandbox; counted as its failures); a version's evaluation "
            "becomes the next reference corpus and needs every cell"), names


def with_regressions(reason: str, regressions: list[str]) -> str:
    """``reason`` with the stable-pass regressions appended."""
    return reason + (f"; regressions of stable passes: {', '.join(regressions)}" if regressions else "")


def why(details: dict[str, Any]) -> str:
    """A short reason out of a check's details."""
    for k in ("summary", "reason", "error", "message"):
        if details.get(k):
            return str(details[k])[:500]
    return json.dumps(details, default=str)[:500]


def missing_cells(out: GridOutcome) -> str:
    """The first missing or ⊥ cells of a grid, for messages."""
    return ", ".join(f"{m.task}#{m.repetition} ({m.reason})" for m in out.metrics.missing[:8])
