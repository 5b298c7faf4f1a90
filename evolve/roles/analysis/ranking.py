"""From the grouper's drafts and the reviewer's verdicts to ranked groups.

Review: ``accept`` keeps a group, ``split`` makes one group per listed part (members it did not list form one
more part), ``merge`` joins it with the named groups, ``dispute`` (or no review at all) stops it. Findings the
grouper left out become groups of their own, so none is lost. Rank: distinct tasks covered, then distinct
failing runs, then findings. A group whose signature (its sorted behaviour ids) the ledger shows was tried and
rejected is excluded unless it now covers a failing run the rejected attempt did not.

How a rejected attempt is recognised: the candidate's ``CandidateCreated.proposal["group"]`` holds the group's
``signature`` and ``failing_runs`` (the proposer writes it), and a *final* ``Rejection`` belongs to the same
candidate (:mod:`evolve.experiment.identity`: under its creation commit or any commit a repair moved it to). A blocked
rejection (⊥ cells; a resume decides) excludes nothing.
"""

from __future__ import annotations

import re

from evolve.experiment.identity import final_rejections
from evolve.roles.analysis.models import Finding, Group, GroupDraft, GroupReview


def signature(behaviours: list[str], wish: str) -> str:
    """How a later round recognises the same need: its behaviour ids, or its wish's words when it has none."""
    if behaviours:
        return "+".join(sorted(set(behaviours)))
    return "wish:" + " ".join(re.findall(r"[a-z0-9]+", wish.lower())[:12])


def _group(gid: str, name: str, wish: str, members: list[str], findings: dict[str, Finding], **kw) -> Group:
    found = [findings[m] for m in members]
    behaviours = sorted({b for f in found for b in f.behaviours})
    return Group(id=gid, name=name, wish=wish, members=members, tasks=sorted({f.task for f in found}),
                 failing_runs=sorted({f.failure for f in found}), behaviours=behaviours,
                 signature=signature(behaviours, wish), **kw)


def apply_review(drafts: list[GroupDraft], reviews: list[GroupReview], findings: dict[str, Finding]) -> list[Group]:
    """The groups after review (ranked or disputed; not yet ordered)."""
    drafts = [d.model_copy(update={"members": list(dict.fromkeys(m for m in d.members if m in findings))})
              for d in drafts]
    drafts = [d for d in drafts if d.members]
    placed = {m for d in drafts for m in d.members}
    drafts += [GroupDraft(name=f"{fid} alone", wish=f.answer.revised_wish.action, members=[fid])
               for fid, f in findings.items() if fid not in placed]
    by_name = {d.name: d for d in drafts}
    verdicts = {r.group: r for r in reviews}
    out: list[Group] = []
    merged: set[str] = set()
    for d in drafts:
        if d.name in merged:
            continue
        r = verdicts.get(d.name)
        gid = f"g{len(out) + 1}"
        if r is None:
            out.append(_group(gid, d.name, d.wish, d.members, findings, status="disputed",
                              reason="the reviewer gave no verdict on this group"))
        elif r.verdict == "dispute":
            out.append(_group(gid, d.name, d.wish, d.members, findings, status="disputed", reason=r.reason))
        elif r.verdict == "split" and r.split_into:
            parts = [[m for m in part if m in d.members] for part in r.split_into]
            rest = [m for m in d.members if not any(m in p for p in parts)]
            for k, part in enumerate([p for p in [*parts, rest] if p], 1):
                out.append(_group(f"g{len(out) + 1}", f"{d.name} / part {k}", d.wish, list(dict.fromkeys(part)),
                                  findings, reason=r.reason))
        elif r.verdict == "merge" and r.merge_with:
            others = [by_name[n] for n in r.merge_with if n in by_name and n != d.name and n not in merged]
            members = list(dict.fromkeys([*d.members, *(m for o in others for m in o.members)]))
            merged |= {o.name for o in others}
            out.append(_group(gid, " + ".join([d.name, *(o.name for o in others)]), d.wish, members, findings,
                              reason=r.reason))
        else:
            out.append(_group(gid, d.name, d.wish, d.members, findings, reason=r.reason))
    return out


def rejected_attempts(events: list) -> dict[str, set[str]]:
    """signature -> failing runs it covered, for every group a finally rejected candidate targeted."""
    rejected = final_rejections(events)
    out: dict[str, set[str]] = {}
    for e in events:
        if getattr(e, "kind", None) != "candidate_created" or e.key.removesuffix(":created") not in rejected:
            continue
        group = (e.proposal or {}).get("group") or {}
        if isinstance(group, dict) and group.get("signature"):
            out.setdefault(group["signature"], set()).update(group.get("failing_runs") or [])
    return out


def rank(groups: list[Group], rejected: dict[str, set[str]] | None = None) -> list[Group]:
    """Exclude groups already tried and rejected without new evidence, then order and number the rest."""
    rejected = rejected or {}
    out = []
    for g in groups:
        if g.status == "ranked" and g.signature in rejected and set(g.failing_runs) <= rejected[g.signature]:
            g = g.model_copy(update={"status": "excluded",
                                     "reason": "tried and rejected before; no failing run it did not cover"})
        out.append(g)
    ranked = sorted((g for g in out if g.status == "ranked"),
                    key=lambda g: (-len(g.tasks), -len(g.failing_runs), -len(g.members), g.name))
    numbered = [g.model_copy(update={"rank": i}) for i, g in enumerate(ranked, 1)]
    return numbered + [g for g in out if g.status != "ranked"]
