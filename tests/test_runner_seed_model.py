"""The seed harness through ``rise eval`` against the real bundled model (llama.cpp + Qwen2.5-Coder-0.5B).

Marked ``model`` (slow: minutes on CPU); skips when the server binary or the model is not cached (never builds).
Bounded by design: at most 2 episodes, a 256-token cap on every reply (the harness sends it), a fixed sampling
seed and temperature 0. It asserts what the harness must do — complete the grid with the cell classified, book
the model's usage, keep every reply within the cap — never what a 0.5B model happens to say (it may pass or fail).
"""

from __future__ import annotations

import json
import shutil

import pytest

from tests.fakes.bundled import bundled_server

from .test_runner_sandbox import STARTER, _need_parts, rise_eval

MODEL = "qwen2.5-coder-0.5b"
CAP = 256
pytestmark = [pytest.mark.model, pytest.mark.sandbox, pytest.mark.tmux]


def test_seed_on_the_bundled_model_completes_the_grid(tmp_path):
    _need_parts()
    if shutil.which("tmux") is None:
        pytest.skip("tmux is needed by the seed harness")
    with bundled_server("test-runner", ctx=8192, parallel=1, model=MODEL) as (_, spec):
        out = tmp_path / "res.json"
        done = rise_eval("--tasks", str(STARTER), "--task", "hello-file", "--agent", "seed", "--env", "local",
                         "--base-url", spec.base_url, "--model", spec.model, "--setting", "terminus.max_episodes=2",
                         "--setting", f"model.max_tokens={CAP}", "--setting", "model.seed=7",
                         "--setting", "model.temperature=0",
                         "--job-dir", str(tmp_path / "job"), "--json", str(out), timeout=450)
    result = tmp_path / "job" / "hello-file__r1" / "result.json"
    assert done.returncode == 0, done.stdout + done.stderr + (result.read_text() if result.exists() else "")
    data = json.loads(out.read_text())
    assert data["complete"] and data["trials"][0]["status"] in ("passed", "failed")
    res = json.loads((tmp_path / "job" / "hello-file__r1" / "result.json").read_text())
    assert res["model"] == MODEL and res["cost"]["generator"]["calls"] >= 1
    assert res["cost"]["generator"]["output_tokens"] > 0 and res["episodes"] >= 1
    steps = json.loads((tmp_path / "job" / "hello-file__r1" / "agent" / "trajectory.json").read_text())["steps"]
    replies = [st for st in steps if st.get("source") == "agent"]
    assert replies and all(st["metrics"]["completion_tokens"] <= CAP for st in replies)
