"""The experiment ledger: an append-only, fsynced JSONL history from which all state is rebuilt.

Each line is one event, a pydantic model discriminated by ``kind`` and versioned by ``v``. Every unit of work has a
``key`` (``<commit>:<stage>`` or ``<commit>:<task>:<rep>``): a key that already has a finishing event is done and a
resumed run skips it, so ``kill -9`` at any point loses at most the unit in flight and never doubles one.
A torn last line (a crash mid-write: it does not parse) is ignored on read and cut off on the next append; a last
line that parses but lacks its newline is a complete event: it is kept and its newline is written before the next
append. Any other bad line is an error naming the file and line.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

LEDGER_VERSION = 1


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class _Event(BaseModel):
    v: int = LEDGER_VERSION
    ts: str = Field(default_factory=_now)
    key: str = Field(description="the unit of work this event finishes or describes")


class RoundStart(_Event):
    kind: Literal["round_start"] = "round_start"
    round: int
    incumbent: str = Field(description="tag of the version the round starts from, e.g. v0")


class CandidateCreated(_Event):
    kind: Literal["candidate_created"] = "candidate_created"
    round: int
    branch: str
    commit: str
    proposal: dict[str, Any] = Field(default_factory=dict)


class CheckResult(_Event):
    kind: Literal["check_result"] = "check_result"
    commit: str
    stage: Literal["smoke", "contracts"]
    passed: bool
    details: dict[str, Any] = Field(default_factory=dict)
    attempt: int = 1


class TrialDone(_Event):
    kind: Literal["trial_done"] = "trial_done"
    commit: str
    purpose: Literal["screening", "evaluation", "heldout", "reference", "control", "control_arm", "transfer"]
    task: str
    rep: int
    status: str
    trial_dir: str


class Screening(_Event):
    kind: Literal["screening"] = "screening"
    commit: str
    passed: bool
    mechanism_ran: bool
    details: dict[str, Any] = Field(default_factory=dict)


class Evaluation(_Event):
    kind: Literal["evaluation"] = "evaluation"
    commit: str
    purpose: Literal["screening", "evaluation", "heldout", "reference", "control", "control_arm", "transfer"] = "evaluation"
    complete: bool
    metrics: dict[str, Any] = Field(default_factory=dict)
    job_dir: str = ""


class Adoption(_Event):
    kind: Literal["adoption"] = "adoption"
    commit: str
    version: str
    parent: str
    decision: dict[str, Any] = Field(default_factory=dict)


class Rejection(_Event):
    kind: Literal["rejection"] = "rejection"
    commit: str
    reason: str
    decision: dict[str, Any] = Field(default_factory=dict)


class RepairEvent(_Event):
    """One repair call (the implementer, on a failed smoke or contracts check): the commit it repaired, the commit
    it led to (None: nothing changed or the call failed), its number along the candidate's repairs, its call."""

    kind: Literal["repair"] = "repair"
    commit: str
    candidate: str = Field(description="the candidate's identity, rNN:slug (the same whatever repairs changed)")
    stage: Literal["smoke", "contracts"]
    number: int = Field(ge=1, description="1 for the candidate's first repair, up to max_repairs")
    repaired_to: str | None = None
    failures: list[str] = Field(default_factory=list)
    role_call: dict[str, Any] = Field(default_factory=dict, description="call id, transcript, usage, cost, seconds")


class Freeze(_Event):
    kind: Literal["freeze"] = "freeze"
    version: str
    commit: str
    path: str
    sha256: str


class TransferEvent(_Event):
    """The transfer evaluation of an adopted version against its parent (``evolve.round.transfer``): the paired
    table, and each part that was skipped with its reason."""

    kind: Literal["transfer"] = "transfer"
    round: int
    version: str
    parent: str
    commit: str
    table: dict[str, Any] = Field(default_factory=dict)


class FindingEvent(_Event):
    """One analyst call on a pair (``evolve.roles.analysis``): the finding, or why it was sent back or dropped."""

    kind: Literal["finding"] = "finding"
    commit: str
    pair: str
    status: Literal["valid", "sent_back", "dropped", "failed"]
    finding: dict[str, Any] = Field(default_factory=dict)
    reason: str = ""
    role_call: dict[str, Any] = Field(default_factory=dict, description="call id, transcript, usage, cost, seconds")


class GroupEvent(_Event):
    """The grouper's call: findings pooled into groups with a common wish."""

    kind: Literal["group"] = "group"
    commit: str
    groups: list[dict[str, Any]] = Field(default_factory=list)
    role_call: dict[str, Any] = Field(default_factory=dict)


class ReviewEvent(_Event):
    """The reviewer's call and the groups after it: ranked, disputed or excluded."""

    kind: Literal["review"] = "review"
    commit: str
    reviews: list[dict[str, Any]] = Field(default_factory=list)
    groups: list[dict[str, Any]] = Field(default_factory=list)
    role_call: dict[str, Any] = Field(default_factory=dict)


class ResearchEvent(_Event):
    """The researcher's call for one group of a round (``rise evolve``): its outcome, refused or empty ones too."""

    kind: Literal["research"] = "research"
    round: int
    group: str
    outcome: dict[str, Any] = Field(default_factory=dict)
    role_call: dict[str, Any] = Field(default_factory=dict, description="the call's id, transcript and cost; "
                                      "for an outcome taken from an earlier event, reused_from (that event's key)")
    inputs: dict[str, Any] = Field(default_factory=dict, description="the researcher's inputs (empty in ledgers "
                                   "written before 2026-12-07's second night)")


class ProposalEvent(_Event):
    """The proposer's call for one group: the proposal, or why it was refused (overfitting guard) or failed."""

    kind: Literal["proposal"] = "proposal"
    round: int
    slug: str
    status: Literal["valid", "refused", "failed"]
    proposal: dict[str, Any] = Field(default_factory=dict)
    reason: str = ""
    role_call: dict[str, Any] = Field(default_factory=dict)


class ImplementationEvent(_Event):
    """The implementer's call for one proposal: the candidate branch and commit it left, or why it failed."""

    kind: Literal["implementation"] = "implementation"
    round: int
    slug: str
    status: Literal["done", "refused", "failed"]
    branch: str = ""
    commit: str = ""
    reason: str = ""
    report: dict[str, Any] = Field(default_factory=dict)
    role_call: dict[str, Any] = Field(default_factory=dict)


class GradeEvent(_Event):
    """A decided candidate's predictions graded against the paired per-task outcome (``evolve.round.grading``)."""

    kind: Literal["grade"] = "grade"
    round: int
    slug: str
    commit: str
    grade: dict[str, Any] = Field(default_factory=dict)


class EvolveStop(_Event):
    """Why ``rise evolve`` stopped (rounds done, no flipping tasks, no groups, patience, a budget)."""

    kind: Literal["evolve_stop"] = "evolve_stop"
    round: int
    reason: str
    final: bool = Field(default=True, description="False for a budget stop: raising the budget lets it go on")


class PowerEvent(_Event):
    """A round's power, computed once before its first evaluation (``evolve.round.power``): from the baseline grid
    it decides against (``measured``) and from experiment.toml's prior (``prior``), both at the round's real family
    (M candidates, ``night_rounds`` rounds a night). Each is a ``validate.power.GridPower`` with its ``line``."""

    kind: Literal["power"] = "power"
    round: int
    incumbent: str
    family_size: int = Field(ge=1, description="M: candidates that entered the round")
    night_rounds: int = Field(ge=1)
    measured: dict[str, Any] = Field(default_factory=dict)
    prior: dict[str, Any] = Field(default_factory=dict)


class RoundEnd(_Event):
    """A round finished (``rise evolve``'s, or ``rise round``'s once decided): what it adopted, or why nothing."""

    kind: Literal["round_end"] = "round_end"
    round: int
    adopted: str | None = None
    reason: str = ""


Event = Annotated[
    RoundStart | CandidateCreated | CheckResult | RepairEvent | TrialDone | Screening | Evaluation | Adoption
    | Rejection | Freeze
    | FindingEvent | GroupEvent | ReviewEvent | ResearchEvent | ProposalEvent | ImplementationEvent | GradeEvent
    | EvolveStop | RoundEnd | TransferEvent | PowerEvent,
    Field(discriminator="kind"),
]
_adapter: TypeAdapter[Event] = TypeAdapter(Event)


class LedgerError(ValueError):
    pass


class Ledger:
    """Append-only event log of one experiment (``runs/<name>/ledger.jsonl``)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.events: list[Any] = []
        self._keys: set[str] = set()
        self._torn = False  # the last line does not parse: cut it off on the next append
        self._unterminated = False  # the last line parses but lacks its newline: complete it on the next append
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        raw = self.path.read_bytes()
        lines = raw.split(b"\n")
        unterminated = bool(lines and lines[-1])  # no trailing newline: the last write may have been cut short
        for i, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                ev = _adapter.validate_python(json.loads(line))
            except (json.JSONDecodeError, ValidationError) as exc:
                if unterminated and i == len(lines):
                    self._torn = True  # a torn tail is expected after kill -9; it is dropped on the next append
                    break
                raise LedgerError(f"{self.path}:{i}: invalid ledger event: {exc}") from None
            self.events.append(ev)
            self._keys.add(ev.key)
        # only the newline was lost: the event is complete and counts; the next append writes the newline first
        self._unterminated = unterminated and not self._torn

    def done(self, key: str) -> bool:
        """Whether a unit of work already has its event."""
        return key in self._keys

    def find(self, kind: str, **match: Any) -> list[Any]:
        return [e for e in self.events if e.kind == kind and all(getattr(e, k) == v for k, v in match.items())]

    def append(self, event: Any) -> Any:
        """Write one event durably (fsync) and index it; a key already present is refused."""
        if event.key in self._keys:
            raise LedgerError(f"{self.path}: event key {event.key!r} already recorded; refusing to double it")
        line = event.model_dump_json() + "\n"
        with self.path.open("ab") as fh:
            if self._torn:
                fh.truncate(self._good_length())
                self._torn = False
            elif self._unterminated:
                line = "\n" + line
                self._unterminated = False
            fh.write(line.encode())
            fh.flush()
            os.fsync(fh.fileno())
        self.events.append(event)
        self._keys.add(event.key)
        return event

    def _good_length(self) -> int:
        raw = self.path.read_bytes()
        return raw.rfind(b"\n") + 1
