"""Checking a finding's evidence references against the traces they cite.

A reference must name a trial of the pair, an episode that trial has, a step id that exists (in that episode
when both are given) and a span id present in its ``spans.jsonl`` (in that episode when both are given). Behaviour
ids must exist in the version's Handbook when one is given. The problems come back as sentences the analyst is
shown once; a finding that still has problems keeps its good references (:func:`salvage`), and is dropped with
the problems as the reason when those no longer ground it. A span id names its run, so a
span cited under the pair's other run is attributed to the run that has it (:func:`attribute_spans`) rather than
sent back: the 1.5B analyst did that twice in a row on a real corpus, and lost an otherwise checkable finding.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from evolve.roles.analysis.models import EvidenceRef, FindingAnswer
from evolve.roles.analysis.trial_view import span_id
from monitor.store import TrialTrace, find_agent_dir


@dataclass
class TraceIndex:
    """What exists in one trial: episodes, step ids (with their episode) and span ids (with theirs)."""

    episodes: set[int] = field(default_factory=set)
    steps: dict[int, int | None] = field(default_factory=dict)
    spans: dict[str, int | None] = field(default_factory=dict)

    @classmethod
    def load(cls, folder: Path, with_spans: bool = True) -> TraceIndex:
        trace = TrialTrace.load(find_agent_dir(folder))
        out = cls()
        for st in trace.steps:
            ep = st.get("episode") if isinstance(st.get("episode"), int) else None
            if isinstance(st.get("step_id"), int):
                out.steps[st["step_id"]] = ep
            if ep is not None:
                out.episodes.add(ep)
        if with_spans:
            out.spans = {span_id(s): s.episode for s in trace.spans}
        return out


def all_refs(answer: FindingAnswer) -> list[EvidenceRef]:
    """Every reference a finding makes, in the order it makes them."""
    refs = [r for d in answer.differences for r in d.evidence]
    refs += answer.information_available.evidence + answer.mechanism_existed.evidence + answer.evidence
    return refs


def span_key(span: str) -> str:
    """A cited span id as ``spans.jsonl`` keys it: lower-case hex, no ``0x``, 16 digits."""
    return span.lower().removeprefix("0x").rjust(16, "0")


def attribute_spans(answer: FindingAnswer, traces: dict[str, TraceIndex]) -> tuple[FindingAnswer, list[str]]:
    """A span id is unique to the run that recorded it, and a step id to its episode within a run: a reference
    citing a span of the pair's other run under the wrong trial is attributed to the run that has it, its
    episode taken from the span, its step kept only where that run has the step in that episode; a reference
    whose episode (one the run has) contradicts its step's (and span's) own episode gets theirs. Returns the
    corrected copy and one note per correction. A step and a span in different episodes, the cited episode
    agreeing with one of them, keep the one that agrees. A step or span that does not exist, or a step and a span
    that disagree with each other and with the episode, are left for :func:`check_finding` to report."""
    fixed, notes = answer.model_copy(deep=True), []
    for ref in all_refs(fixed):
        if not ref.span:
            continue
        key = span_key(ref.span)
        if ref.trial in traces and key in traces[ref.trial].spans:
            continue
        owners = [t for t, idx in traces.items() if key in idx.spans]
        if len(owners) != 1:
            continue
        before, idx = ref.label(), traces[owners[0]]
        ref.trial = owners[0]
        if idx.spans[key] is not None:
            ref.episode = idx.spans[key]
        if ref.step is not None and (ref.step not in idx.steps or idx.steps[ref.step] not in (None, ref.episode)):
            ref.step = None
        notes.append(f"{before}: the span is {owners[0]}'s; cited as {ref.label()}")
    for ref in all_refs(fixed):  # an episode that contradicts the step's and span's own: theirs wins
        idx = traces.get(ref.trial)
        if idx is None or ref.episode is None or ref.episode not in idx.episodes:
            continue  # an episode the run never had is not a slip between neighbours: the check reports it
        key = span_key(ref.span) if ref.span else None
        own = {e for e in (idx.steps.get(ref.step) if ref.step is not None else None,
                           idx.spans.get(key) if key else None) if e is not None}
        if ref.step is not None and ref.step not in idx.steps or key and key not in idx.spans:
            continue  # a missing step or span: the check reports it
        if len(own) == 2 and ref.episode in own:
            # step and span in different episodes, the cited episode agreeing with one of them: the other is the
            # slip (the real 1.5B cited "ep1 step3" with a span of episode 0, twice, and lost the finding)
            before = ref.label()
            if idx.steps[ref.step] == ref.episode:
                dropped, ref.span = f"span {ref.span} (episode {idx.spans[key]})", None
            else:
                dropped, ref.step = f"step {ref.step} (episode {idx.steps[ref.step]})", None
            notes.append(f"{before}: {dropped} is not in episode {ref.episode}; cited as {ref.label()}")
            continue
        if len(own) != 1:
            continue  # a step and a span that disagree with each other and with the episode: the check reports it
        if ref.episode not in own:
            before = ref.label()
            ref.episode = own.pop()
            notes.append(f"{before}: {'step' if ref.step is not None else 'span'} is in episode {ref.episode}; "
                         f"cited as {ref.label()}")
    return fixed, notes


def check_ref(ref: EvidenceRef, traces: dict[str, TraceIndex]) -> str | None:
    """The problem with one reference, or None when it points at something that exists."""
    idx = traces.get(ref.trial)
    if idx is None:
        return f"{ref.label()}: trial {ref.trial!r} is not one of this pair's runs ({', '.join(sorted(traces))})"
    if ref.episode is not None and ref.episode not in idx.episodes:
        return f"{ref.label()}: {ref.trial} has no episode {ref.episode} (it has {_span_of(idx.episodes)})"
    if ref.step is not None:
        if ref.step not in idx.steps:
            return f"{ref.label()}: {ref.trial} has no step {ref.step} (steps 1..{max(idx.steps, default=0)})"
        if ref.episode is not None and idx.steps[ref.step] not in (None, ref.episode):
            return f"{ref.label()}: step {ref.step} belongs to episode {idx.steps[ref.step]}, not {ref.episode}"
    if ref.span:
        key = span_key(ref.span)
        if key not in idx.spans:
            owners = sorted(t for t, other in traces.items() if key in other.spans)
            where = f"; it is a span of {owners[0]}: cite it with trial {owners[0]!r}" if owners else ""
            return f"{ref.label()}: {ref.trial} has no span {ref.span}{where}"
        if ref.episode is not None and idx.spans[key] not in (None, ref.episode):
            return f"{ref.label()}: span {ref.span} belongs to episode {idx.spans[key]}, not {ref.episode}"
    return None


def salvage(answer: FindingAnswer, traces: dict[str, TraceIndex]) -> tuple[FindingAnswer | None, list[str]]:
    """What is left of a finding that still has bad references after its one retry. A reference whose only
    problem is a span id that no run of the pair recorded keeps its trial, episode and step (the 16-hex id is what
    a small model garbles: the live 1.5B lost a finding on one); any other bad reference is left out. The finding
    survives when its own evidence list keeps a reference that names a step or a span; None otherwise. Returns
    it with one note per reference cut or left out."""
    fixed, notes = answer.model_copy(deep=True), []
    recorded = {key for idx in traces.values() for key in idx.spans}

    def keep(refs: list[EvidenceRef]) -> list[EvidenceRef]:
        out = []
        for ref in refs:
            problem = check_ref(ref, traces)
            if problem and ref.span and span_key(ref.span) not in recorded:
                cut = ref.model_copy(update={"span": None})
                if check_ref(cut, traces) is None:
                    notes.append(f"{ref.label()}: no run of the pair has span {ref.span}; cited as {cut.label()}")
                    out.append(cut)
                    continue
            if problem:
                notes.append(f"left out: {problem}")
            else:
                out.append(ref)
        return out

    for d in fixed.differences:
        d.evidence = keep(d.evidence)
    for j in (fixed.information_available, fixed.mechanism_existed):
        j.evidence = keep(j.evidence)
    fixed.evidence = keep(fixed.evidence)
    if not any(r.step is not None or r.span for r in fixed.evidence):
        return None, notes
    return fixed, notes


def _span_of(episodes: set[int]) -> str:
    return f"episodes {min(episodes)}..{max(episodes)}" if episodes else "no episodes"


def check_finding(answer: FindingAnswer, traces: dict[str, TraceIndex],
                  behaviours: set[str] | None = None) -> list[str]:
    """Every problem of a finding's references (and behaviour ids, when the Handbook's ids are given)."""
    problems = [p for p in (check_ref(r, traces) for r in all_refs(answer)) if p]
    if behaviours is not None:
        for d in answer.differences:
            problems += [f"behaviour {b!r} is not in the Handbook" for b in d.behaviours if b not in behaviours]
    return list(dict.fromkeys(problems))
