"""Resync support: which behaviours a code change touches, so a reviewer (or the coding agent) knows every
Handbook entry that must be re-read after a change.

Two versions are two :class:`~handbook.source.HarnessSource` objects (two directories, or two git revisions of
a harness repository). A function changed when its syntax tree changed (layout and comments do not count). A
behaviour is affected when

- one of its functions (in either version's Handbook) was added, removed or modified;
- one of its functions calls a changed helper that no behaviour claims (found on the call graph, without
  passing through functions other behaviours own);
- a setting it governs was added, removed, or had its default changed; or a boundary it names stopped or
  started being recorded.

Changed code that no behaviour covers is reported on its own: it is where the Handbook needs a new entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .callgraph import CallGraph
from .model import Handbook
from .source import HarnessSource


@dataclass
class Affected:
    behaviour: str
    name: str
    stage: str
    reasons: list[str] = field(default_factory=list)


@dataclass
class ResyncReport:
    old_label: str
    new_label: str
    functions: dict[str, str]  # module:qualname -> added | removed | modified
    settings: dict[str, str]  # dotted key -> added | removed | changed
    boundaries: dict[str, str]  # boundary -> added | removed
    affected: list[Affected]
    uncovered: list[str]  # changed functions no behaviour covers, directly or through a caller

    def summary(self) -> str:
        return (f"{len(self.functions)} function(s), {len(self.settings)} setting(s) and {len(self.boundaries)} "
                f"boundary(ies) changed between {self.old_label} and {self.new_label}: "
                f"{len(self.affected)} behaviour(s) to review, {len(self.uncovered)} changed function(s) "
                "no behaviour covers")


def changed_functions(old: HarnessSource, new: HarnessSource) -> dict[str, str]:
    """Functions added, removed or modified between two versions, by ``module:qualname``."""
    before = {ref: d.fingerprint() for ref, d in old.definitions().items()}
    after = {ref: d.fingerprint() for ref, d in new.definitions().items()}
    out: dict[str, str] = {}
    for ref in sorted(before.keys() | after.keys()):
        if ref not in after:
            out[ref] = "removed"
        elif ref not in before:
            out[ref] = "added"
        elif before[ref] != after[ref]:
            out[ref] = "modified"
    return out


def _changed_keys(old: dict | None, new: dict | None, what: str = "changed") -> dict[str, str]:
    old, new = old or {}, new or {}
    out: dict[str, str] = {}
    for key in sorted(old.keys() | new.keys()):
        if key not in new:
            out[key] = "removed"
        elif key not in old:
            out[key] = "added"
        elif old[key] != new[key]:
            out[key] = what
    return out


def _resolved(source: HarnessSource, refs: list[str]) -> set[str]:
    out = set(refs)
    for ref in refs:
        res = source.resolve(ref)
        if res.definition:
            out.add(res.definition.ref)
    return out


def affected_behaviours(old: HarnessSource, new: HarnessSource, old_label: str = "old",
                        new_label: str = "new") -> ResyncReport:
    """The behaviours a change from ``old`` to ``new`` touches, each with why."""
    functions = changed_functions(old, new)
    settings = _changed_keys(old.settings(), new.settings())
    boundaries = {b: s for b, s in _changed_keys(dict.fromkeys(old.boundaries() or []),
                                                    dict.fromkeys(new.boundaries() or [])).items()}
    books: list[tuple[HarnessSource, Handbook]] = [(s, h) for s in (old, new) if (h := s.handbook()) is not None]

    # behaviour id -> (name, stage, functions over both versions, settings, spans)
    entries: dict[str, dict] = {}
    for source, book in books:
        for stage, b in book.iter_behaviours():
            entry = entries.setdefault(b.id, {"name": b.name, "stage": stage.id, "functions": set(),
                                              "settings": set(), "spans": set(), "behaviours": []})
            entry["name"], entry["stage"] = b.name, stage.id  # the newer version's wording wins
            entry["functions"] |= _resolved(source, b.functions)
            entry["settings"] |= set(b.settings)
            entry["spans"] |= set(b.spans)
            entry["behaviours"].append(b)
    owned = {ref for e in entries.values() for ref in e["functions"]}

    affected: dict[str, Affected] = {}

    def note(bid: str, reason: str) -> None:
        e = entries[bid]
        item = affected.setdefault(bid, Affected(bid, e["name"], e["stage"]))
        if reason not in item.reasons:
            item.reasons.append(reason)

    for bid, e in entries.items():
        for ref in sorted(e["functions"] & functions.keys()):
            note(bid, f"function {ref} {functions[ref]}")
        for key, status in settings.items():
            if any(b.governs(key) for b in e["behaviours"]):
                note(bid, f"setting {key} {status}")
        for ref in sorted(e["spans"] & boundaries.keys()):
            note(bid, f"boundary {ref} {'no longer recorded' if boundaries[ref] == 'removed' else 'now recorded'}")

    # changed helpers nobody owns: whose behaviour calls them?
    helpers = [ref for ref in functions if ref not in owned]
    uncovered = []
    graphs = {id(s): CallGraph.build(s) for s in (old, new)}
    for ref in helpers:
        source = old if functions[ref] == "removed" else new
        graph = graphs[id(source)]
        reached_by = []
        for bid, e in entries.items():
            entry_points = [f for f in e["functions"] if f in graph.edges]
            paths = graph.reachable(entry_points, stop=owned - e["functions"])
            if ref in paths:
                reached_by.append((bid, paths[ref]))
        for bid, path in reached_by:
            note(bid, f"calls changed helper {ref} ({functions[ref]}) via {' → '.join(path)}")
        if not reached_by:
            uncovered.append(ref)
    order = [bid for bid in entries]
    ranked = sorted(affected.values(), key=lambda a: order.index(a.behaviour))
    return ResyncReport(old_label, new_label, functions, settings, boundaries, ranked, uncovered)
