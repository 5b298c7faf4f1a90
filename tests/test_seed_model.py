"""One real trial end to end: the bundled llama.cpp model, the local sandbox, tmux, the runner, the verifier.

Marked ``model`` (and ``sandbox``); skips when the server binary or the 0.5B model is not cached (never builds).
The small model rarely solves the task in its one episode (the first call alone can take a minute on a
loaded 2-core machine: the prompt is processed cold); the test checks the trial runs to a real verdict
with a full trajectory of real replies, not that it passes. The trial is tests/conftest.py's
``seed_trial_on_bundled_model`` (through ``rise eval``, which runs it with the runner), run once for the tests
that read it.
"""

from __future__ import annotations

import json
import shutil

import pytest

from trials.environments.local import bwrap_available

pytestmark = [pytest.mark.model, pytest.mark.sandbox, pytest.mark.tmux,
              pytest.mark.skipif(not bwrap_available(), reason="bubblewrap (bwrap) and nsenter are not installed"),
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]


def test_real_model_trial_end_to_end(seed_trial_on_bundled_model):
    done, job, _ = seed_trial_on_bundled_model
    trial = job / "hello-file__r1"
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((trial / "result.json").read_text())
    outcome = json.loads((trial / "agent" / "agent_result.json").read_text())
    log_tail = (trial / "agent" / "stdout.log").read_text()[-3000:]
    assert result["status"] in ("passed", "failed"), (result, log_tail)
    assert outcome["status"] in ("completed", "max_episodes"), (outcome, log_tail)
    data = json.loads((trial / "agent" / "trajectory.json").read_text())
    agent_steps = [s for s in data["steps"] if s["source"] == "agent"]
    assert len(agent_steps) == outcome["episodes"] >= 1
    assert all(s["message"] and s["metrics"]["completion_tokens"] > 0 for s in agent_steps)
    assert outcome["cost"]["generator"]["calls"] >= len(agent_steps)
    assert data["final_metrics"]["total_prompt_tokens"] > 500
    assert (trial / "verifier").is_dir() and result["reward"] in (0.0, 1.0)
