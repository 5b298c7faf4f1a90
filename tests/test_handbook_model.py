"""The Handbook format: validation on read names the file and the field; rendering stays in sync."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from handbook.model import HandbookError, dumps_handbook, load_handbook, loads_handbook
from handbook.render import render_markdown, rendering_is_current, write_rendered

TOY = Path(__file__).parent / "data" / "handbook_toy" / "toyharness"


def test_toy_handbook_loads_with_stages_and_behaviours():
    hb = load_handbook(TOY)
    assert [s.id for s in hb.stages] == ["loop", "parse", "model"]
    assert hb.behaviour("parse.json").settings == ["parsing.format"]
    assert hb.stage_of("model.pick").id == "model"
    assert [b.id for b in hb.behaviours_for_span("loop:Agent.step")] == ["loop.episodes"]
    assert hb.behaviour("model.pick").governs("picker.temperature")
    assert not hb.behaviour("model.pick").governs("pickerx.n")


def test_round_trip_through_toml():
    hb = load_handbook(TOY)
    assert loads_handbook(dumps_handbook(hb)) == hb


def _with(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize("old,new,field,words", [
    ('functions = ["parsing:parse_response"]', 'functions = ["parsing.parse_response"]',
     "stages[1] (parse).behaviours[0] (parse.json).functions", "not a module:qualname"),
    ('settings = ["parsing.format"]', 'setting = ["parsing.format"]',
     "stages[1] (parse).behaviours[0] (parse.json).setting", "unknown key"),
    ('id = "parse.json"', 'id = "loop.dispatch"', None, "used in stage 'loop' and again in stage 'parse'"),
    ("schema_version = 1", "schema_version = 7", "schema_version", "not supported"),
    ('responsibility = "One chat call per episode."\n', "",
     "stages[2] (model).behaviours[0] (model.call).responsibility", "Field required"),
])
def test_invalid_handbook_names_file_and_field(tmp_path, old, new, field, words):
    path = tmp_path / "HANDBOOK.toml"
    path.write_text(_with((TOY / "HANDBOOK.toml").read_text(), old, new))
    with pytest.raises(HandbookError) as info:
        load_handbook(path)
    assert info.value.path == str(path)
    assert info.value.field == field
    assert words in info.value.message


def test_not_toml_and_missing_file(tmp_path):
    (tmp_path / "HANDBOOK.toml").write_text("[[stages]\n")
    with pytest.raises(HandbookError, match="not valid TOML"):
        load_handbook(tmp_path)
    with pytest.raises(HandbookError, match="no Handbook file"):
        load_handbook(tmp_path / "nowhere")


def test_stored_rendering_of_toy_is_current(tmp_path):
    assert rendering_is_current(TOY)
    copy = tmp_path / "toyharness"
    shutil.copytree(TOY, copy)
    toml = copy / "HANDBOOK.toml"
    toml.write_text(toml.read_text().replace("JSON parsing", "Reply parsing"))
    assert not rendering_is_current(copy)
    write_rendered(copy)
    assert rendering_is_current(copy)
    assert "### Reply parsing (`parse.json`)" in (copy / "HANDBOOK.md").read_text()


def test_markdown_lists_every_behaviour_and_index():
    text = render_markdown(load_handbook(TOY))
    for bid in ("loop.episodes", "loop.dispatch", "parse.json", "model.call", "model.pick"):
        assert f"(`{bid}`)" in text
    assert "| `picker.*` | model.pick |" in text
    assert "| `loop:Agent.step` | loop.episodes |" in text
