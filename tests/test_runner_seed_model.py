"""The seed harness through ``rise eval`` against the real bundled model (llama.cpp + Qwen2.5-Coder-0.5B).

Marked ``model`` (slow: minutes on CPU); skips when the server binary or the model is not cached (never builds).
Bounded by design: one episode, a 256-token cap on every reply (the harness sends it), a fixed sampling
seed and temperature 0. It asserts what the harness must do — complete the grid with the cell classified, book
the model's usage, keep every reply within the cap — never what a 0.5B model happens to say (it may pass or fail).
The trial is tests/conftest.py's ``seed_trial_on_bundled_model``, run once for the tests that read it.
"""

from __future__ import annotations

import json

import pytest

from tests.fakes.bundled import SEED_TRIAL_CAP as CAP

MODEL = "qwen2.5-coder-0.5b"
pytestmark = [pytest.mark.model, pytest.mark.sandbox, pytest.mark.tmux]


def test_seed_on_the_bundled_model_completes_the_grid(seed_trial_on_bundled_model):
    done, job, out = seed_trial_on_bundled_model
    result = job / "hello-file__r1" / "result.json"
    assert done.returncode == 0, done.stdout + done.stderr + (result.read_text() if result.exists() else "")
    data = json.loads(out.read_text())
    assert data["complete"] and data["trials"][0]["status"] in ("passed", "failed")
    res = json.loads(result.read_text())
    assert res["model"] == MODEL and res["cost"]["generator"]["calls"] >= 1
    assert res["cost"]["generator"]["output_tokens"] > 0 and res["episodes"] >= 1
    steps = json.loads((job / "hello-file__r1" / "agent" / "trajectory.json").read_text())["steps"]
    replies = [st for st in steps if st.get("source") == "agent"]
    assert replies and all(st["metrics"]["completion_tokens"] <= CAP for st in replies)
