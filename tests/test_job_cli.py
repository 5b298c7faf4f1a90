"""``rise metrics`` and ``rise compare`` over job folders, and ``--setting`` parsing."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from rise.cli import app
from rise.commands.eval import parse_settings
from trials.agents import oracle_agent
from trials.results import JobConfig, TrialResult

runner = CliRunner()


def _job(root, name, outcomes: dict[str, list[str]]):
    """A job folder with result.json files; outcomes: task -> statuses per repetition ('missing' = none)."""
    job = root / name
    r = max(len(v) for v in outcomes.values())
    job.mkdir(parents=True)
    JobConfig(job_id=name, tasks_dir=str(root), task_names=sorted(outcomes), agent=oracle_agent(),
              r=r).write(job / "config.json")
    for task, statuses in outcomes.items():
        for k, status in enumerate(statuses, 1):
            if status == "missing":
                continue
            tdir = job / f"{task}__r{k}"
            tdir.mkdir()
            TrialResult(trial_name=tdir.name, run_id=f"{task}{k}", task_name=task, repetition=k, status=status,
                        failure_class="task_failure" if status == "failed" else None,
                        infra_cause="sandbox" if status == "infra" else None).write(tdir)
    return job


def test_metrics_command(tmp_path):
    job = _job(tmp_path, "a", {"x": ["passed", "failed"], "y": ["passed", "passed"]})
    out = tmp_path / "m.json"
    res = runner.invoke(app, ["metrics", str(job), "--json", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["complete"] and data["metrics"]["pass_at_1"] == 0.75 and data["metrics"]["flip"] == 0.5
    assert "Pass@1" in res.output


def test_metrics_incomplete_exit_2(tmp_path):
    job = _job(tmp_path, "a", {"x": ["passed", "infra"], "y": ["passed", "missing"]})
    out = tmp_path / "m.json"
    res = runner.invoke(app, ["metrics", str(job), "--json", str(out)])
    assert res.exit_code == 2
    data = json.loads(out.read_text())
    assert [t["status"] for t in data["trials"]] == ["passed", "passed", "infra", "missing"]
    assert {(m["task"], m["reason"]) for m in data["metrics"]["missing"]} == {("x", "infra:sandbox"),
                                                                              ("y", "missing")}


def test_compare_command(tmp_path):
    a = _job(tmp_path, "a", {"x": ["failed", "failed"], "y": ["passed", "passed"], "z": ["passed", "failed"]})
    b = _job(tmp_path, "b", {"x": ["passed", "passed"], "y": ["passed", "failed"], "z": ["failed", "failed"]})
    out = tmp_path / "c.json"
    res = runner.invoke(app, ["compare", str(a), str(b), "--json", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert {row["task"]: row["pair"] for row in data["tasks"]} == {"x": "fixed", "y": "regressed", "z": "flipping"}


def test_not_a_job(tmp_path):
    res = runner.invoke(app, ["metrics", str(tmp_path)])
    assert res.exit_code == 1


def test_parse_settings():
    assert parse_settings(["a.b=3", "c=true", "d=hello", "e=[1, 2]", "f="]) == {
        "a.b": 3, "c": True, "d": "hello", "e": [1, 2], "f": ""}
    # against the harness's settings.toml: a text key keeps its text, a value of the wrong type names the key
    assert parse_settings(["tmux.session_name=123", "terminus.max_episodes=4"], "harness_seed") == {
        "tmux.session_name": "123", "terminus.max_episodes": 4}
    with pytest.raises(typer.BadParameter, match="setting terminus.max_episodes wants an integer"):
        parse_settings(["terminus.max_episodes=many"], "harness_seed")
    with pytest.raises(typer.BadParameter, match="--setting wants KEY=VALUE"):
        parse_settings(["novalue"])
