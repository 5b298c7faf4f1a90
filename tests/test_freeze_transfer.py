"""Frozen-harness transfer: freeze v1 of an experiment, copy only that one file to a fresh folder, and run
``rise eval --agent FILE`` there on a task set the experiment never used (real local sandbox, tmux, real HTTP to a
scripted model); then the cross-model swap: the same file against another endpoint serving another model.

v1 differs from the seed in one setting (``terminus.confirmations = 1``: a single completion claim ends the run),
so the number of model requests per trial shows which harness ran: the frozen v1 needs 2, the seed would need 3.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evolve.experiment.config import ExperimentConfig
from evolve.experiment.freeze import freeze
from evolve.experiment.ledger import Adoption
from evolve.experiment.store import init_experiment
from tests.fakes.openai_server import ScriptedServer
from tests.test_seed_support import reply
from trials.environments.local import bwrap_available

pytestmark = [pytest.mark.sandbox, pytest.mark.tmux,
              pytest.mark.skipif(not bwrap_available(), reason="bubblewrap (bwrap) and nsenter are not installed"),
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]

REPO = Path(__file__).resolve().parent.parent
STARTER = REPO / "data" / "starter"
EVOLVED_ON = ["hello-file", "config-edit"]  # the experiment's task set
OTHER = ["count-lines", "write-json"]  # the transfer task set: never part of the experiment
SOLVE = {
    "Count the lines": "wc -l < /app/data.txt | tr -d ' ' > /app/count.txt\n",
    "/app/config.json": "printf '{\"name\": \"demo\", \"version\": 2, \"enabled\": true}\\n' > /app/config.json\n",
}


def scripted_model(body: dict) -> str:
    """Solve on the first turn (found from the instruction), claim completion on every later one."""
    if any(m["role"] == "assistant" for m in body["messages"]):
        return reply(analysis="done", plan="finish", complete=True)
    first = next(m["content"] for m in body["messages"] if m["role"] == "user")
    for marker, command in SOLVE.items():
        if marker in first:
            return reply(analysis="solve", plan="run it", commands=[(command, 0.3)])
    return reply(analysis="unknown task", plan="give up", complete=True)


@pytest.fixture
def frozen_v1(tmp_path) -> tuple[Path, str]:
    cfg = ExperimentConfig.model_validate({
        "name": "xfer", "endpoint": {"base_url": "http://127.0.0.1:9/v1", "model": "evolved-model"},
        "tasks": {"dir": str(STARTER), "development": EVOLVED_ON}, "r": 1, "env": "local"})
    exp = init_experiment("xfer", cfg, runs_dir=tmp_path / "runs")
    _, wt = exp.create_candidate(1, "one-claim")
    settings = wt / "settings.toml"
    text = settings.read_text()
    assert "confirmations = 2" in text
    settings.write_text(text.replace("confirmations = 2", "confirmations = 1", 1))
    commit = exp.commit_worktree(wt, "one completion claim is enough")
    assert exp.tag_version(commit, "v1: one-claim") == "v1"
    exp.ledger.append(Adoption(key=f"{commit}:adoption", commit=commit, version="v1", parent="v0"))
    out = tmp_path / "made" / "xfer-v1.rhz"
    manifest = freeze(exp, "v1", out)
    assert manifest["evolved_for"]["model"] == "evolved-model" and "confirmations = 1" in manifest["settings"]
    return out, commit


def _rise_eval(cwd: Path, agent: str, tasks: Path, base_url: str, model: str, job: str, *extra: str) -> dict:
    env = {**os.environ, "RISE_CACHE_DIR": str(cwd / "cache")}  # unpacked here, not from an earlier run's cache
    rise = [shutil.which("rise")] if shutil.which("rise") else [sys.executable, "-m", "rise.cli"]
    proc = subprocess.run([*rise, "eval", "--agent", agent, "--tasks", str(tasks), *extra,
                           "--env", "local", "--base-url", base_url, "--model", model, "-r", "1",
                           "--job-dir", job, "--json", f"{job}.json", "--no-progress"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    return json.loads((cwd / f"{job}.json").read_text())


def test_frozen_v1_runs_on_another_task_set_in_a_fresh_directory_and_on_another_model(tmp_path, frozen_v1):
    frozen, commit = frozen_v1
    fresh = tmp_path / "elsewhere"
    fresh.mkdir()
    shutil.copy2(frozen, fresh / frozen.name)  # only the file travels
    tasks = tmp_path / "other-tasks"
    for name in OTHER:
        shutil.copytree(STARTER / name, tasks / name)
    assert not set(OTHER) & set(EVOLVED_ON)

    for model, job in (("scripted-a", "job-a"), ("scripted-b", "job-b")):  # the second run is the model swap
        with ScriptedServer(scripted_model, model=model) as srv:
            data = _rise_eval(fresh, frozen.name, tasks, srv.base_url, model, job)
        assert data["complete"] and data["metrics"]["pass_at_1"] == 1.0, data
        assert sorted(t["task_name"] for t in data["trials"]) == OTHER
        assert all(t["status"] == "passed" for t in data["trials"])
        assert {b["model"] for b in srv.requests} == {model}
        assert len(srv.requests) == 2 * len(OTHER)  # solve + one claim per task: v1's setting, not the seed's
        for name in OTHER:
            res = json.loads((fresh / job / f"{name}__r1" / "result.json").read_text())
            assert res["harness_version"] == f"xfer-v1@{commit[:12]}" and res["model"] == model
            assert res["agent_status"] == "completed" and res["episodes"] == 2
    # the same model and task under the seed: its two-claim handshake needs one request more
    with ScriptedServer(scripted_model, model="scripted-a") as srv:
        data = _rise_eval(fresh, "seed", tasks, srv.base_url, "scripted-a", "job-seed", "--task", OTHER[0])
    assert data["complete"] and len(srv.requests) == 3
    # the harness came from the file, unpacked under this folder's cache, with every hash intact
    from evolve.experiment.freeze import verify_frozen

    unpacked = [p for p in (fresh / "cache" / "frozen").iterdir() if (p / "manifest.json").is_file()]
    assert len(unpacked) == 1
    manifest = json.loads((unpacked[0] / "manifest.json").read_text())
    assert manifest["commit"] == commit and verify_frozen(unpacked[0] / "harness", manifest) == []
