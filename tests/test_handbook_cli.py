"""`rise handbook ...` on the toy harness: exit codes and what each command prints."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evolve.cli import app

TOY = Path(__file__).parent / "data" / "handbook_toy" / "toyharness"
runner = CliRunner()


@pytest.fixture
def toy(tmp_path) -> Path:
    copy = tmp_path / "toyharness"
    shutil.copytree(TOY, copy)
    return copy


def test_check_ok_and_failing(toy):
    result = runner.invoke(app, ["handbook", "check", str(toy)])
    assert result.exit_code == 0, result.output
    assert "is aligned" in result.output
    (toy / "settings.toml").write_text((toy / "settings.toml").read_text() + "\n[extra]\nflag = true\n")
    result = runner.invoke(app, ["handbook", "check", str(toy), "--json"])
    assert result.exit_code == 1
    problems = json.loads(result.output)["problems"]
    assert [(p["kind"], p["name"]) for p in problems] == [("ungoverned-setting", "extra.flag")]


def test_render_and_render_check(toy):
    toml = toy / "HANDBOOK.toml"
    toml.write_text(toml.read_text().replace("Command dispatch", "Dispatch"))
    assert runner.invoke(app, ["handbook", "render", str(toy), "--check"]).exit_code == 1
    assert runner.invoke(app, ["handbook", "render", str(toy)]).exit_code == 0
    assert runner.invoke(app, ["handbook", "render", str(toy), "--check"]).exit_code == 0


def test_diff_markdown_and_html(toy, tmp_path):
    toml = toy / "HANDBOOK.toml"
    toml.write_text(toml.read_text().replace('settings = ["parsing.format"]', "settings = []"))
    html = tmp_path / "diff.html"
    result = runner.invoke(app, ["handbook", "diff", str(TOY), str(toy), "--html", str(html)])
    assert result.exit_code == 0, result.output
    assert "### JSON parsing (`parse.json`, stage `parse`)" in result.output
    assert "  - removed: `parsing.format`" in result.output
    assert "0 behaviour(s) added, 0 removed, 1 changed" in result.output
    assert "<code>parsing.format</code>" in html.read_text()


def test_suggest_and_affected(toy):
    result = runner.invoke(app, ["handbook", "suggest", str(toy)])
    assert result.exit_code == 0
    assert "+ parsing:_find_json" in result.output
    parsing = toy / "parsing.py"
    parsing.write_text(parsing.read_text().replace("json.loads(body)", "json.loads(body.strip())"))
    result = runner.invoke(app, ["handbook", "affected", str(TOY), str(toy), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["functions"] == {"parsing:parse_response": "modified"}
    assert [a["behaviour"] for a in out["affected"]] == ["parse.json"]


def test_errors_are_reported_not_raised(tmp_path):
    result = runner.invoke(app, ["handbook", "check", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "not a harness directory" in result.output
