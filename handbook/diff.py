"""Diff of two Handbooks: behaviours added, removed, and changed field by field; Markdown and HTML renderings.

Behaviours are matched by id (ids are stable across versions; a renamed behaviour keeps its id and shows as a
``name`` change). List fields report the items added and removed; a list with the same items in another order
reports only that. The diff is one of the things users read each morning, beside the code diff of an adopted
candidate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .model import Behaviour, Handbook, Stage
from .render import template_env

# Field order of the report (the Behaviour model's own order, id excluded).
BEHAVIOUR_FIELDS = [name for name in Behaviour.model_fields if name != "id"]
STAGE_FIELDS = ["name", "summary"]
HANDBOOK_FIELDS = ["title", "harness", "summary"]


@dataclass
class FieldChange:
    field: str
    old: Any
    new: Any
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    @property
    def is_list(self) -> bool:
        return isinstance(self.old, list) or isinstance(self.new, list)

    @property
    def reordered(self) -> bool:
        return self.is_list and not self.added and not self.removed


@dataclass
class BehaviourChange:
    id: str
    name: str
    stage: str
    changes: list[FieldChange]


@dataclass
class StageChange:
    id: str
    changes: list[FieldChange]


@dataclass
class HandbookDiff:
    old_label: str
    new_label: str
    added: list[tuple[str, Behaviour]] = field(default_factory=list)  # (stage id, behaviour)
    removed: list[tuple[str, Behaviour]] = field(default_factory=list)
    changed: list[BehaviourChange] = field(default_factory=list)
    stages_added: list[Stage] = field(default_factory=list)
    stages_removed: list[Stage] = field(default_factory=list)
    stages_changed: list[StageChange] = field(default_factory=list)
    handbook_changes: list[FieldChange] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed or self.stages_added or self.stages_removed
                    or self.stages_changed or self.handbook_changes)

    def summary(self) -> str:
        if self.empty:
            return f"Handbooks {self.old_label} and {self.new_label} are the same"
        return (f"{len(self.added)} behaviour(s) added, {len(self.removed)} removed, {len(self.changed)} changed"
                f"; {len(self.stages_added)} stage(s) added, {len(self.stages_removed)} removed, "
                f"{len(self.stages_changed)} changed")


def _field_change(name: str, old: Any, new: Any) -> FieldChange | None:
    if old == new:
        return None
    change = FieldChange(name, old, new)
    if isinstance(old, list) and isinstance(new, list):
        change.added = [x for x in new if x not in old]
        change.removed = [x for x in old if x not in new]
    return change


def _compare(old: Any, new: Any, names: list[str]) -> list[FieldChange]:
    changes = (_field_change(n, getattr(old, n), getattr(new, n)) for n in names)
    return [c for c in changes if c is not None]


def diff_handbooks(old: Handbook, new: Handbook, old_label: str = "old", new_label: str = "new") -> HandbookDiff:
    """Everything that differs between two Handbooks, behaviour by behaviour and field by field."""
    out = HandbookDiff(old_label, new_label, handbook_changes=_compare(old, new, HANDBOOK_FIELDS))
    old_stages = {s.id: s for s in old.stages}
    new_stages = {s.id: s for s in new.stages}
    out.stages_added = [s for sid, s in new_stages.items() if sid not in old_stages]
    out.stages_removed = [s for sid, s in old_stages.items() if sid not in new_stages]
    for sid, stage in new_stages.items():
        if sid in old_stages:
            changes = _compare(old_stages[sid], stage, STAGE_FIELDS)
            if changes:
                out.stages_changed.append(StageChange(sid, changes))

    old_b = {b.id: (s.id, b) for s, b in old.iter_behaviours()}
    new_b = {b.id: (s.id, b) for s, b in new.iter_behaviours()}
    out.added = [(sid, b) for bid, (sid, b) in new_b.items() if bid not in old_b]
    out.removed = [(sid, b) for bid, (sid, b) in old_b.items() if bid not in new_b]
    for bid, (sid, behaviour) in new_b.items():
        if bid not in old_b:
            continue
        old_sid, old_behaviour = old_b[bid]
        changes = []
        if old_sid != sid:
            changes.append(FieldChange("stage", old_sid, sid))
        changes += _compare(old_behaviour, behaviour, BEHAVIOUR_FIELDS)
        if changes:
            out.changed.append(BehaviourChange(bid, behaviour.name, sid, changes))
    return out


def _render(diff: HandbookDiff, template: str, autoescape: bool) -> str:
    return template_env(autoescape=autoescape).get_template(template).render(d=diff, fields=BEHAVIOUR_FIELDS)


def render_diff_markdown(diff: HandbookDiff) -> str:
    """The diff as Markdown (for the terminal, the ledger, a pull-request body)."""
    return re.sub(r"\n{3,}", "\n\n", _render(diff, "diff.md.j2", autoescape=False)).rstrip("\n") + "\n"


def render_diff_html(diff: HandbookDiff) -> str:
    """The diff as a self-contained HTML fragment-with-page for the morning report."""
    return _render(diff, "diff.html.j2", autoescape=True)
