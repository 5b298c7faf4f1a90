"""The researcher's two tools, registered in the agent-roles tool registry: ``search_corpus`` (BM25 over the
external-harness corpus) and ``read_reference`` (a reference's lines, re-read from its pinned source and
hash-checked). Both write into the call's :class:`ResearchRecord`, so what was searched and read is kept even
when the model's answer cites nothing."""

from __future__ import annotations

import threading
from typing import Annotated

from pydantic import BaseModel, Field

from evolve.roles.runtime import ToolContext, ToolError, tool
from research.api import Research
from research.reference import Reference, SearchRecord
from research.sources import ResearchError

EXCERPT_SHOWN = 6       # excerpt lines per hit in a search result
READ_MAX_LINES = 120    # a longer reference is shown from its start; the model can read the file elsewhere


class ResearchRecord(BaseModel):
    """Every search (with its hits) and every read of one researcher call."""

    searches: list[SearchRecord] = Field(default_factory=list)
    read: list[str] = Field(default_factory=list, description="reference ids read, in order")

    def found(self) -> dict[str, Reference]:
        """Reference ids this call's searches returned."""
        return {r.id: r for s in self.searches for r in s.references}


_lock = threading.Lock()  # tools run on worker threads; the record is shared by one call's tools


def _research(ctx: ToolContext) -> tuple[Research, ResearchRecord]:
    research = ctx.extra.get("research")
    record = ctx.extra.get("research_record")
    if not isinstance(research, Research) or not isinstance(record, ResearchRecord):
        raise ToolError("no research corpus was given to this call (extra['research'], extra['research_record'])")
    if not research.enabled:
        raise ToolError("external research is off for this run (--no-external-research)")
    return research, record


def _where(ref: Reference) -> str:
    return f"{ref.source}@{ref.version}:{ref.path}#L{ref.start_line}-L{ref.end_line}"


@tool(group="read")
def search_corpus(ctx: ToolContext, query: Annotated[str, Field(
        min_length=2, description="a few words that would appear in the code or docs, e.g. 'confirm task "
                                  "complete before finishing'")]) -> str:
    """Search other agent harnesses' code and docs (BM25); returns ranked references: id, framework, place.

    Each hit is one function, class or section. Read a promising one with read_reference(ref=ID).
    """
    research, record = _research(ctx)
    with _lock:
        again = any(s.query.strip().lower() == query.strip().lower() for s in record.searches)
    try:
        rec = research.search(query)
    except ResearchError as exc:
        raise ToolError(str(exc)) from None
    with _lock:
        record.searches.append(rec)
    if not rec.references:
        return f"no references for {query!r}; try other words"
    if again:
        # The bundled 1.5B searched the same words up to 7 times in a row and never read a hit (the nudge "read
        # one instead" did not help). A repeated search therefore moves the call forward itself: it reads the
        # best hit not read yet, recorded as a read like any other.
        return _read_for_repeat(query, rec.references, research, record)
    return _hits(query, rec.references)


def _hits(query: str, refs: list[Reference]) -> str:
    out = [f"{len(refs)} references for {query!r}:"]
    for i, ref in enumerate(refs, 1):
        out.append(f"{i}. id={ref.id} framework={ref.framework} {ref.unit_kind} {ref.unit} ({_where(ref)})")
        out += [f"     | {line[:120]}" for line in ref.excerpt.split("\n")[:EXCERPT_SHOWN]]
    return "\n".join(out)


def _read_for_repeat(query: str, refs: list[Reference], research: Research, record: ResearchRecord) -> str:
    """What a repeated search shows: the best hit this call has not read, read (and hash-checked) for the model;
    the hit list again when every hit was read or none can be read."""
    problems: list[str] = []
    nxt = _read_next(refs, research, record, problems)
    if nxt is not None:
        ref_id, text = nxt
        return (f"You searched {query!r} already, so its best hit not read yet was read for you. If it handles "
                f"the problem, cite id={ref_id} in your answer; otherwise search other words or answer.\n{text}")
    why = "you have read every hit" if not problems else "; ".join(problems)
    return (f"You searched {query!r} already ({why}). Search other words, or answer now, citing the ids you "
            f"read that handle the problem.\n" + _hits(query, refs))


def _read_next(refs: list[Reference], research: Research, record: ResearchRecord,
               problems: list[str] | None = None) -> tuple[str, str] | None:
    """(id, text) of the best of ``refs`` this call has not read, read now; None when every one is read (or
    none can be read: each reason goes to ``problems``)."""
    with _lock:
        done = set(record.read)
    for ref in refs:
        if ref.id in done:
            continue
        try:
            return ref.id, _read(ref, research, record)
        except ToolError as exc:
            if problems is not None:
                problems.append(str(exc))
    return None


def _read(reference: Reference, research: Research, record: ResearchRecord) -> str:
    """One reference re-read from its pinned source and hash-checked, recorded as read."""
    check = research.verify(reference)
    if not check.ok:
        raise ToolError(f"{reference.id}: cannot be read as recorded ({check.status}: {check.detail})")
    with _lock:
        record.read.append(reference.id)
    lines = check.text.split("\n")
    shown = lines[:READ_MAX_LINES]
    body = "\n".join(f"{n:5d}| {line}" for n, line in enumerate(shown, reference.start_line))
    more = f"\n[{len(lines) - len(shown)} more lines not shown]" if len(lines) > len(shown) else ""
    return (f"{reference.framework} {reference.unit_kind} {reference.unit} ({_where(reference)}), "
            f"sha256 verified:\n{body}{more}")


@tool(group="read")
def read_reference(ctx: ToolContext, ref: Annotated[str, Field(
        description="a reference id (12 hex digits) returned by search_corpus")]) -> str:
    """Read the code or text of one reference, re-read from its pinned source (its hash is checked)."""
    research, record = _research(ctx)
    ref = ref.strip()
    reference = record.found().get(ref)
    if reference is None:
        raise ToolError(f"{ref!r} was not returned by search_corpus in this call; search first and use an id "
                        "from the results")
    with _lock:
        again = ref in record.read
    if again:
        # the bundled 1.5B, once it read a hit, read the same one five times over: a repeated read moves on to
        # the best unread hit of the latest search that has one (the text it asked for is in its context already)
        for search in reversed(record.searches):
            nxt = _read_next(search.references, research, record)
            if nxt is not None:
                ref_next, text = nxt
                return (f"You read {ref} already (its text is above; cite id={ref} if it handles the problem). "
                        f"The next unread hit of your search {search.query!r} was read for you; cite "
                        f"id={ref_next} if it handles the problem, or answer now.\n{text}")
        return (f"You read {ref} already, and every hit of your searches too. Answer now: cite the ids you read "
                "that handle the problem, or none.")
    return _read(reference, research, record)
