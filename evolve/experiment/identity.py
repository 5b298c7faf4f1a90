"""One identity per candidate, whatever repairs changed: ``rNN:slug``, the key of its ``candidate_created`` event
less ``:created``.

A candidate's commit moves on with every repair (``C:repair`` books ``repaired_to``), and its checks, decision and
rejection are booked under the commit it had then. Exclusion of a group tried before (``evolve.roles.analysis.ranking``),
the revisit evidence and the repair bound (``evolve.round.checks``) all ask "which candidate is this commit?" and
"was it finally rejected?"; they ask here, from the ledger, so none of them matches commits on its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def repaired_to(event: Any) -> str | None:
    """The commit a repair moved a candidate to: a ``repair`` event's, or (ledgers written before repairs were
    units) a ``check_result``'s ``details.repaired_to``."""
    kind = getattr(event, "kind", None)
    if kind == "repair":
        return event.repaired_to
    if kind == "check_result":
        return (event.details or {}).get("repaired_to")
    return None


def candidate_of_commits(events: Iterable[Any]) -> dict[str, str]:
    """commit -> candidate identity, for every commit a candidate has had (its creation commit and each commit a
    repair moved it to). Events are in ledger order: a repair is booked after the commit it repairs is known."""
    out: dict[str, str] = {}
    for e in events:
        if getattr(e, "kind", None) == "candidate_created":
            out.setdefault(e.commit, e.key.removesuffix(":created"))
        elif (nxt := repaired_to(e)) and e.commit in out:
            out.setdefault(nxt, out[e.commit])
    return out


def is_final(event: Any) -> bool:
    """Whether a rejection settles its candidate (a decision), not a blocked one (⊥ cells: a resume decides)."""
    decision = getattr(event, "decision", None) or {}
    return decision.get("final", True) is not False and ":blocked:" not in event.key


def final_rejections(events: Iterable[Any]) -> dict[str, list[Any]]:
    """candidate identity -> its final rejections (usually one), whatever commit each was booked under."""
    events = list(events)
    ids = candidate_of_commits(events)
    out: dict[str, list[Any]] = {}
    for e in events:
        if getattr(e, "kind", None) == "rejection" and is_final(e) and e.commit in ids:
            out.setdefault(ids[e.commit], []).append(e)
    return out


def repairs_of(events: Iterable[Any], candidate: str) -> list[Any]:
    """The repair events booked for one candidate, in order."""
    return [e for e in events if getattr(e, "kind", None) == "repair" and e.candidate == candidate]
