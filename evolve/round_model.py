"""What a round works with and hands back: the candidate inputs and proposals, per-candidate and per-round
reports, the stop signal of a candidate's stages, and the ledger book that grids record their trials in."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trials.errors import RiseError
from trials.results import TrialResult
from validate.evaluate import GridOutcome

from .ledger import Ledger, TrialDone


class ControllerError(RiseError):
    """A round cannot go on: the experiment, its ledger or its harness repository is not as it must be."""


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


class Stop(Exception):
    """Ends one candidate's stages with a status (rejected, blocked) and its reason; the round goes on."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


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
