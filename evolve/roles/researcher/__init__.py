"""``researcher``: for one selected group, search other frameworks for how they handle the group's common wish and
return design references with provenance.

The model turns the wish into search questions, calls ``search_corpus`` and ``read_reference``, and answers with
reference ids and how each framework handles the problem (execution flow, state kept, what the model is shown,
signals needed). :func:`research_group` then checks the answer against what the call's tools actually returned:
every cited id must come from this call's searches and re-resolve with a matching hash; anything else is listed
as rejected. No valid reference is the explicit outcome "no precedent found, local design". The search record
(queries, hits, reads) is kept in every case. With ``--no-external-research`` no model is called at all.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evolve.roles.analysis.models import Group
from evolve.roles.researcher.tools import ResearchRecord, read_reference, search_corpus
from evolve.roles.runtime import Limits, Role, RoleError, RoleResult, register_role, run_role
from evolve.roles.runtime.backends import Backend
from research.api import Research
from research.reference import Reference, SearchRecord, Verification

NO_PRECEDENT = "no precedent found, local design"
DISABLED = "external research disabled (--no-external-research): local design"
OUTCOME_VERSION = 1


class ResearcherInputs(BaseModel):
    """One selected group, as analysis hands it over."""

    model_config = ConfigDict(extra="forbid")
    group: str = Field(min_length=1, description="the group's name")
    wish: str = Field(min_length=3, description="the common wish of its findings")
    behaviours: list[str] = Field(default_factory=list, description="Handbook behaviour ids involved")
    tasks: list[str] = Field(default_factory=list)


def inputs_from_group(group: Group) -> ResearcherInputs:
    """The researcher's inputs for one ranked group of analysis."""
    return ResearcherInputs(group=group.name, wish=group.wish, behaviours=group.behaviours, tasks=group.tasks)


class DesignNote(BaseModel):
    """How one framework handles the problem, as the model read it."""

    ref: str = Field(pattern=r"^[0-9a-f]{12}$", description="an id that search_corpus returned")
    how: str = Field(min_length=10, description="how this framework handles the problem, in your words")
    flow: str = Field("", description="execution flow: when it runs, what it calls")
    state: str = Field("", description="state it keeps")
    shown: str = Field("", description="what it shows the model")
    signals: str = Field("", description="signals or inputs it needs")


class ResearcherAnswer(BaseModel):
    """The researcher's answer."""

    questions: list[str] = Field(min_length=1, description="the search questions you derived from the wish")
    references: list[DesignNote] = Field(default_factory=list,
                                         description="empty when nothing found handles the problem")
    conclusion: str = Field(min_length=3, description="what the references suggest, or why none applies")


class CitedReference(BaseModel):
    reference: Reference
    note: DesignNote
    verification: Verification
    from_conclusion: bool = Field(False, description="cited because the conclusion names this read reference's "
                                                     "unit, not listed in the answer's references")


class Rejected(BaseModel):
    ref: str
    reason: str


class ResearchOutcome(BaseModel):
    """What the round keeps of one researcher call."""

    v: int = OUTCOME_VERSION
    group: str
    wish: str
    outcome: Literal["references", "no_precedent", "disabled"]
    statement: str = Field(description="'no precedent found, local design' when nothing valid was found")
    questions: list[str] = Field(default_factory=list)
    conclusion: str = ""
    references: list[CitedReference] = Field(default_factory=list)
    rejected: list[Rejected] = Field(default_factory=list)
    searches: list[SearchRecord] = Field(default_factory=list)
    read: list[str] = Field(default_factory=list)
    call_id: str = ""
    transcript: str = ""
    cost: float = 0.0


RESEARCHER = register_role(Role(
    name="researcher",
    description="You study how other agent harnesses solve a problem, by searching and reading their code.",
    template=Path(__file__).with_name("researcher.md.j2"),
    output=ResearcherAnswer,
    inputs=ResearcherInputs,
    tools=(search_corpus.__name__, read_reference.__name__),
    limits=Limits(max_turns=10, max_output_tokens=1024, deadline_s=2400, corrective_turns=2, min_tool_calls=2,
                  tool_output_chars=6000),
))


def judge(answer: ResearcherAnswer, record: ResearchRecord, research: Research) -> tuple[
        list[CitedReference], list[Rejected]]:
    """Keep the cited references that this call's searches returned and that still verify."""
    found = record.found()
    cited: list[CitedReference] = []
    rejected: list[Rejected] = []
    seen: set[str] = set()
    for note in answer.references:
        if note.ref in seen:
            continue
        seen.add(note.ref)
        ref = found.get(note.ref)
        if ref is None:
            rejected.append(Rejected(ref=note.ref, reason="not returned by this call's searches"))
            continue
        check = research.verify(ref)
        if not check.ok:
            rejected.append(Rejected(ref=note.ref, reason=f"{check.status}: {check.detail}"))
            continue
        cited.append(CitedReference(reference=ref, note=note, verification=check.model_copy(update={"text": ""})))
    for ref, sentence in named_in_conclusion(answer.conclusion, record, seen):
        check = research.verify(ref)
        if check.ok:
            note = DesignNote(ref=ref.id, how=sentence)
            cited.append(CitedReference(reference=ref, note=note, from_conclusion=True,
                                        verification=check.model_copy(update={"text": ""})))
    return cited, rejected


_MIN_NAME = 6  # a shorter unit name ("run", "step") is too common to stand for one reference


def named_in_conclusion(conclusion: str, record: ResearchRecord, listed: set[str]) -> list[tuple[Reference, str]]:
    """References this call READ, not already ``listed`` in the answer, whose unit the conclusion names (its
    qualified name, or the last part of it when that is distinctive), each with the sentence that names it. The
    bundled 1.5B read OpenHands' ``TaskManager._run_until_finished``, wrote that it handles the problem, and left
    ``references`` empty: the model's own words cite it. A reference only searched, never read, is not taken."""
    found = record.found()
    sentences = [t.strip() for t in re.split(r"(?<=[.!?])\s+", conclusion) if t.strip()]
    out: list[tuple[Reference, str]] = []
    for ref_id in dict.fromkeys(record.read):
        ref = found.get(ref_id)
        if ref is None or ref_id in listed or not ref.unit:
            continue
        names = sorted({n for n in (ref.unit, ref.unit.rsplit(".", 1)[-1])
                        if len(n) >= _MIN_NAME and not n.startswith("<")}, key=len, reverse=True)
        if not names:
            continue
        pattern = re.compile("|".join(rf"(?<![\w.]){re.escape(n)}(?!\w)" for n in names))
        hit = next((t for t in sentences if pattern.search(t)), None)
        if hit is not None and len(hit) >= 10:
            out.append((ref, hit))
    return out


def _statement(cited: list[CitedReference]) -> str:
    named = sum(c.from_conclusion for c in cited)
    text = f"{len(cited)} references from {len({c.reference.framework for c in cited})} frameworks"
    return text + (f" ({named} named in the conclusion, not listed)" if named else "")


def research_group(inputs: ResearcherInputs | dict[str, Any], workspace: str | Path, backend: Backend,
                   research: Research, *, role: Role = RESEARCHER, saved: Path | None = None,
                   **run_options: Any) -> ResearchOutcome:
    """Run the researcher on one group (``role``: the researcher with the limits the experiment configures;
    ``run_options``: ``transcripts``, ``budget`` of :func:`run_role`).

    ``saved``: where the call's result (and its search record) is written the moment it returns; a resume that
    finds it there judges that answer again instead of paying for another call (:func:`evolve.experiment.units.run_once`).
    A :class:`RoleError` propagates with ``research_record`` attached (the searches made before it failed)."""
    from evolve.experiment.units import run_once, write_unit

    data = inputs if isinstance(inputs, ResearcherInputs) else ResearcherInputs.model_validate(inputs)
    if not research.enabled:
        return ResearchOutcome(group=data.group, wish=data.wish, outcome="disabled", statement=DISABLED)
    record = ResearchRecord()
    kept = saved.with_suffix(".record.json") if saved is not None else None

    def call() -> RoleResult:
        res = run_role(role, data, workspace, backend, extra={"research": research, "research_record": record},
                       **run_options)
        if kept is not None:  # before the result itself: a saved result always has its record
            write_unit(kept, record.model_dump(mode="json"))
        return res

    try:
        if saved is not None and saved.is_file() and kept is not None and kept.is_file():
            record = ResearchRecord.model_validate_json(kept.read_text())
        result = run_once(saved, role, call) if saved is not None else call()
    except RoleError as exc:
        exc.research_record = record  # type: ignore[attr-defined]
        raise
    answer: ResearcherAnswer = result.output  # type: ignore[assignment]
    cited, rejected = judge(answer, record, research)
    return ResearchOutcome(
        group=data.group, wish=data.wish, outcome="references" if cited else "no_precedent",
        statement=_statement(cited) if cited else NO_PRECEDENT,
        questions=answer.questions, conclusion=answer.conclusion, references=cited, rejected=rejected,
        searches=record.searches, read=record.read, call_id=result.call_id, transcript=str(result.transcript),
        cost=result.cost)
