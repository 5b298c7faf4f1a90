"""Diff of two Handbooks: exactly what changed, as Markdown and HTML."""

from __future__ import annotations

from pathlib import Path

from handbook.diff import diff_handbooks, render_diff_html, render_diff_markdown
from handbook.model import Behaviour, load_handbook

TOY = Path(__file__).parent / "data" / "handbook_toy" / "toyharness"


def test_same_handbook_has_empty_diff():
    hb = load_handbook(TOY)
    diff = diff_handbooks(hb, hb.model_copy(deep=True))
    assert diff.empty
    assert "are the same" in render_diff_markdown(diff)


def test_added_removed_changed_and_moved():
    old = load_handbook(TOY)
    new = old.model_copy(deep=True)
    pick = new.behaviour("model.pick")
    pick.functions = ["picker:build_picker", "picker:Picker.pick", "picker.pick:_score"]
    pick.responsibility = "Sample n replies and keep the longest."
    new.stages[0].behaviours = [b for b in new.stages[0].behaviours if b.id != "loop.dispatch"]
    new.stages[1].behaviours.append(Behaviour(id="parse.xml", name="XML parsing", responsibility="XML replies.",
                                              functions=["parsing:parse_response"]))
    moved = new.stages[2].behaviours.pop(0)  # model.call moves to the loop stage
    new.stages[0].behaviours.append(moved)
    new.stages[1].name = "Reply parsing"

    diff = diff_handbooks(old, new, "v1", "v2")
    assert [(sid, b.id) for sid, b in diff.added] == [("parse", "parse.xml")]
    assert [(sid, b.id) for sid, b in diff.removed] == [("loop", "loop.dispatch")]
    changed = {c.id: {f.field: f for f in c.changes} for c in diff.changed}
    assert set(changed) == {"model.call", "model.pick"}
    assert set(changed["model.pick"]) == {"functions", "responsibility"}
    assert changed["model.pick"]["functions"].added == ["picker.pick:_score"]
    assert changed["model.pick"]["functions"].removed == []
    assert (changed["model.call"]["stage"].old, changed["model.call"]["stage"].new) == ("model", "loop")
    assert [(s.id, [c.field for c in s.changes]) for s in diff.stages_changed] == [("parse", ["name"])]

    md = render_diff_markdown(diff)
    assert "# Handbook diff: v1 → v2" in md
    assert "### XML parsing (`parse.xml`, stage `parse`)" in md
    assert "- `loop.dispatch` Command dispatch (stage `loop`)" in md
    assert "  - added: `picker.pick:_score`" in md
    assert "  - was: Sample n replies and keep the best." in md
    html = render_diff_html(diff)
    assert html.startswith("<!DOCTYPE html>")
    assert 'id="changed-model.pick"' in html and "<code>picker.pick:_score</code>" in html


def test_html_escapes_text():
    old = load_handbook(TOY)
    new = old.model_copy(deep=True)
    new.behaviour("parse.json").responsibility = "Parse <script>alert(1)</script>"
    html = render_diff_html(diff_handbooks(old, new))
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_reordered_list_reports_order_only():
    old = load_handbook(TOY)
    new = old.model_copy(deep=True)
    new.behaviour("model.call").functions.reverse()
    (change,) = diff_handbooks(old, new).changed[0].changes
    assert change.reordered and change.field == "functions"
    assert "same items, new order" in render_diff_markdown(diff_handbooks(old, new))
