"""The alignment check on the toy harness: every kind of problem, each naming the behaviour and the name."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from handbook.check import check_harness, check_source
from handbook.source import HarnessSource

TOY = Path(__file__).parent / "data" / "handbook_toy" / "toyharness"


@pytest.fixture
def toy(tmp_path) -> Path:
    copy = tmp_path / "toyharness"
    shutil.copytree(TOY, copy)
    return copy


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new))


def test_toy_is_aligned():
    report = check_harness(TOY)
    assert report.ok, [str(p) for p in report.problems]
    assert (report.behaviours, report.boundaries, report.settings) == (5, 5, 4)


def test_methods_async_inherited_and_reexported_functions_resolve():
    source = HarnessSource.from_dir(TOY)
    assert source.resolve("loop:Agent.run").definition.kind == "async method"
    assert source.resolve("loop:Agent.log").definition.ref == "loop:BaseAgent.log"  # from the base class
    assert source.resolve("picker:build_picker").definition.ref == "picker.pick:build_picker"
    assert source.resolve("picker:Picker.pick").definition.ref == "picker.pick:Picker.pick"
    assert source.resolve("main:main").definition.kind == "function"
    assert "is a class" in source.resolve("loop:Agent").problem
    assert "module 'nowhere' does not exist" in source.resolve("nowhere:f").problem


def test_renamed_function_fails_naming_behaviour_and_function(toy):
    _edit(toy / "parsing.py", "def parse_response(", "def parse_reply(")
    report = check_harness(toy)
    missing = [p for p in report.problems if p.kind == "missing-function"]
    assert [(p.behaviour, p.name) for p in missing] == [("parse.json", "parsing:parse_response")]
    assert "behaviour 'parse.json' (JSON parsing) names function parsing:parse_response" in missing[0].message
    assert "did you mean parsing:parse_reply" in missing[0].message
    # the span of the same name is no function either
    assert any(p.kind == "unknown-span" and p.name == "parsing:parse_response" for p in report.problems)


def test_renamed_method_fails(toy):
    _edit(toy / "loop.py", "def execute_commands(", "def dispatch(")
    problems = check_harness(toy).problems
    assert [(p.kind, p.behaviour, p.name) for p in problems] == [
        ("missing-function", "loop.dispatch", "loop:Agent.execute_commands")]


def test_ungoverned_setting_fails(toy):
    _edit(toy / "settings.toml", "[parsing]\n", "[parsing]\nstrict = true\n")
    problems = check_harness(toy).problems
    assert [(p.kind, p.name) for p in problems] == [("ungoverned-setting", "parsing.strict")]
    assert "settings.toml defines parsing.strict, which no behaviour" in problems[0].message


def test_wildcard_governs_new_keys_of_its_table(toy):
    _edit(toy / "settings.toml", "[picker]\n", "[picker]\ndedupe = true\n")
    assert check_harness(toy).ok


def test_unknown_setting_fails(toy):
    _edit(toy / "settings.toml", 'format = "json"\n', "")
    problems = check_harness(toy).problems
    kinds = {(p.kind, p.behaviour, p.name) for p in problems}
    assert ("unknown-setting", "parse.json", "parsing.format") in kinds


def test_orphan_boundary_and_unrecorded_span(toy):
    _edit(toy / "recording.toml", '[[boundary]]\ntarget = "picker:Picker.pick"\n',
          '[[boundary]]\ntarget = "loop:Agent.execute_commands"\n')
    problems = {(p.kind, p.behaviour, p.name) for p in check_harness(toy).problems}
    assert problems == {("orphan-boundary", None, "loop:Agent.execute_commands"),
                        ("unrecorded-span", "model.pick", "picker:Picker.pick")}


def test_syntax_error_and_missing_handbook(toy):
    (toy / "broken.py").write_text("def f(:\n")
    assert [p.kind for p in check_harness(toy).problems] == ["unreadable-module"]
    (toy / "HANDBOOK.toml").unlink()
    assert [p.kind for p in check_harness(toy).problems] == ["handbook"]


def test_stale_rendering_is_reported(toy):
    _edit(toy / "HANDBOOK.toml", "Episode loop", "The episode loop")
    assert [p.kind for p in check_harness(toy).problems] == ["stale-rendering"]
    # check_source (e.g. of a git revision) does not look at the Markdown
    assert check_source(HarnessSource.from_dir(toy)).ok


def test_unreadable_settings_is_a_problem_not_a_crash(toy):
    (toy / "settings.toml").write_text("[loop\n")
    kinds = [p.kind for p in check_harness(toy).problems]
    assert kinds == ["unreadable-config"]
