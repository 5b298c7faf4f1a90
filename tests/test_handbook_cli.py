"""`rise handbook ...` on the toy harness: exit codes and what each command prints."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rise.cli import app

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
    # A narrow terminal (or none: Rich assumes 80 columns) must not wrap the message inside its path or words.
    result = runner.invoke(app, ["handbook", "check", str(tmp_path / "missing")], env={"COLUMNS": "40"})
    assert result.exit_code == 2 and "not a harness directory" in result.output
    assert str(tmp_path / "missing") in result.output


def test_diff_and_affected_between_git_revisions(tmp_path):
    import git

    repo_dir = tmp_path / "repo"
    shutil.copytree(TOY, repo_dir / "harness")
    repo = git.Repo.init(repo_dir)
    repo.git.add(A=True)
    repo.index.commit("v1")
    toml = repo_dir / "harness" / "HANDBOOK.toml"
    toml.write_text(toml.read_text().replace('name = "Model call"', 'name = "Model call with retries"'))
    model_call = repo_dir / "harness" / "model_call.py"
    model_call.write_text(model_call.read_text().replace("range(n)", "range(max(n, 1))"))
    repo.git.add(A=True)
    repo.index.commit("v2")
    args = ["HEAD~1", "HEAD", "--repo", str(repo_dir), "--path", "harness"]
    result = runner.invoke(app, ["handbook", "diff", *args])
    assert result.exit_code == 0, result.output
    assert "- **name**\n  - was: Model call\n  - now: Model call with retries" in result.output
    result = runner.invoke(app, ["handbook", "affected", *args, "--json"])
    assert result.exit_code == 0, result.output
    assert [a["behaviour"] for a in json.loads(result.output)["affected"]] == ["model.call"]


def test_spans_maps_a_trial(tmp_path):
    agent = tmp_path / "trial" / "agent"
    agent.mkdir(parents=True)
    lines = [{"name": "Agent.step", "attributes": {"rise.boundary": "loop:Agent.step", "rise.episode": 0}},
             {"name": "mystery", "attributes": {"code.function.name": "toyharness.nowhere.f"}}]
    (agent / "spans.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    result = runner.invoke(app, ["handbook", "spans", str(tmp_path / "trial"), "--harness", str(TOY)])
    assert result.exit_code == 1
    assert "loop.episodes" in result.output and "unmapped mystery" in result.output
    result = runner.invoke(app, ["handbook", "spans", str(tmp_path / "trial"), "--harness", str(TOY),
                                 "-b", "loop.episodes"])
    assert result.exit_code == 0 and "episode 0  Agent.step" in result.output
