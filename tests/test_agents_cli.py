"""``rise role run | list | show`` against a scripted OpenAI-compatible server, and the [agents] config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evolve.experiment.config import ExperimentConfig
from evolve.roles.runtime import AgentsConfig, get_role
from evolve.roles.runtime.backends.claude import ClaudeBackend
from evolve.roles.runtime.backends.openai import OpenAIBackend
from rise.cli import app
from trials.endpoints.scripted import ScriptedServer

runner = CliRunner()
GOOD = {"answer": "hello", "evidence": [{"path": "a.txt", "detail": "line 1"}]}


def call(name: str, **args) -> dict:
    return {"content": "", "tool_calls": [{"name": name, "arguments": args}]}


def test_run_prints_the_output_and_the_transcript_then_show_reads_it(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    (tmp_path / "in.json").write_text(json.dumps({"question": "what is in a.txt?"}))
    script = [call("list_dir"), call("read_file", path="a.txt"), call("final_answer", **GOOD)]
    with ScriptedServer(script) as srv:
        res = runner.invoke(app, ["role", "run", "explorer", "-w", str(tmp_path), "-i", f"@{tmp_path / 'in.json'}",
                                  "--base-url", srv.base_url, "--model", "scripted",
                                  "--transcripts", str(tmp_path / "tr")])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == GOOD
    transcript = Path(res.stderr.split("transcript: ")[1].split()[0])
    shown = runner.invoke(app, ["role", "show", str(transcript)])
    assert shown.exit_code == 0
    assert "read_file -> ok" in shown.stdout and "1: hello" in shown.stdout and "ok in" in shown.stdout


def test_run_reports_a_role_error_with_its_fields(tmp_path: Path) -> None:
    res = runner.invoke(app, ["role", "run", "explorer", "-w", str(tmp_path), "-i", '{"question": ""}',
                              "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                              "--transcripts", str(tmp_path)])
    assert res.exit_code == 1 and "bad_input" in res.stderr and "fields: question" in res.stderr
    res = runner.invoke(app, ["role", "run", "nope", "-w", str(tmp_path)])
    assert res.exit_code == 2 and "unknown role 'nope'" in res.stderr
    res = runner.invoke(app, ["role", "show", str(tmp_path / "missing.jsonl")])
    assert res.exit_code == 2 and "no such transcript" in res.stderr


def _experiment(tmp_path: Path, agents: str) -> Path:
    path = tmp_path / "experiment.toml"
    path.write_text('name = "d"\n[endpoint]\nbase_url = "http://127.0.0.1:1/v1"\nmodel = "m"\n'
                    '[tasks]\ndir = "data/starter"\n' + agents)
    return path


def test_agents_config_picks_backends_and_limits_per_role(tmp_path: Path) -> None:
    path = _experiment(tmp_path, '[agents]\nbackend = "openai"\nmax_usd = 2.5\n'
                                 '[agents.roles.explorer]\nbackend = "claude"\nlimits = { max_turns = 3 }\n'
                                 '[agents.claude]\nmodel = "claude-x"\n')
    agents = ExperimentConfig.load(path).agents
    assert agents.max_usd == 2.5
    assert isinstance(agents.backend_for("explorer"), ClaudeBackend)
    assert isinstance(agents.backend_for("grouper", ExperimentConfig.load(path).endpoint), OpenAIBackend)
    assert agents.role_limits(get_role("explorer")).limits.max_turns == 3
    listed = runner.invoke(app, ["role", "list", "--config", str(path)])
    assert listed.exit_code == 0 and "explorer         claude  turns=3" in listed.stdout


@pytest.mark.parametrize(("agents", "key"), [
    ('[agents]\nbackend = "gpt"\n', "agents.backend"),
    ('[agents.roles.explorer]\nbakend = "claude"\n', "agents.roles.explorer.bakend"),
    ('[agents]\nmax_usd = -1\n', "agents.max_usd"),
])
def test_config_errors_name_the_file_and_the_key(tmp_path: Path, agents: str, key: str) -> None:
    path = _experiment(tmp_path, agents)
    with pytest.raises(ValueError) as info:
        ExperimentConfig.load(path)
    assert str(path) in str(info.value) and key in str(info.value)
    res = runner.invoke(app, ["role", "list", "--config", str(path)])
    assert res.exit_code == 2 and key in res.stderr


def test_unknown_limit_override_is_named() -> None:
    agents = AgentsConfig.model_validate({"roles": {"explorer": {"limits": {"max_turnz": 3}}}})
    with pytest.raises(ValueError, match=r"\[agents.roles.explorer.limits.max_turnz\]"):
        agents.role_limits(get_role("explorer"))
