"""Detectors, pairs and the evidence check on trial folders the real harness wrote (``rise eval``: runner,
monitor.host, the seed harness, real tmux in the bubblewrap sandbox). The model is a scripted server over real
HTTP replaying the 1.5B model's failure on the starter suite (keystrokes without a newline, then an early
claim)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evolve.experiment.store import init_experiment
from evolve.roles.analysis.digest import digest
from evolve.roles.analysis.evidence import TraceIndex
from evolve.roles.analysis.pairs import make_pairs
from evolve.roles.analysis.pipeline import Analysis
from tests.test_analysis_support import ScriptedBackend, finding_answer
from trials.endpoints.scripted import ScriptedError, ScriptedServer

REPO = Path(__file__).resolve().parents[1]
REAL = REPO / "tests" / "data" / "analysis" / "trials"
pytestmark = [pytest.mark.tmux, pytest.mark.sandbox]


def _parts_missing() -> str | None:
    from trials.environments.local import bwrap_available

    if shutil.which("tmux") is None:
        return "tmux is not installed"
    return None if bwrap_available() else "bubblewrap cannot create a sandbox here"


def reply(keys: str | None, complete: bool = False, duration: float = 0.3) -> str:
    return json.dumps({"analysis": "a", "plan": "p", "commands": [{"keystrokes": keys, "duration": duration}]
                       if keys else [], "task_complete": complete})


# run 1 types the command without Enter and claims twice (fails); run 2 solves it (passes); run 3 walks through
# most detectors' patterns until the episode limit (fails)
REPLIES = [reply("echo 'Hello, world!' > /app/hello.txt"), reply(None, True), reply(None, True),
           reply("printf 'Hello, world!\\n' > /app/hello.txt\n"), reply(None, True), reply(None, True),
           "this is not JSON",                                                             # parse_error
           '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "seq 1 3000\\n", "duration": 0.5}]',
           reply("sleep 2; echo finished\n"),                                            # still running...
           reply("ls /app\n", duration=4.0),                                # keys_while_running; sleep ends
           ScriptedError(500, "overloaded"),                                               # model_errors (retried)
           json.dumps({"analysis": "a", "plan": "p", "commands": [{"keystrokes": "cat /app/missing.txt\n",
                                                                  "duration": 0.3}], "task_complete": True}),
           reply("echo same\n"), reply("echo same\n"), reply("echo same\n"),            # repeated_commands
           {"content": '{"analysis": "a very long', "finish_reason": "length"}]             # output_length
SETTINGS = ["terminus.max_episodes=9", "model.retry_wait_min_sec=0.1", "model.retry_wait_max_sec=0.2"]


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    reason = _parts_missing()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("real") / "job"
    with ScriptedServer(list(REPLIES), model="scripted") as srv:
        out = subprocess.run([sys.executable, "-m", "rise.cli", "eval", "--tasks", str(REPO / "data" / "starter"),
                              "--task", "hello-file", "--agent", "seed", "--env", "local", "-r", "3", "-c", "1",
                              *[a for kv in SETTINGS for a in ("--setting", kv)],
                              "--base-url", srv.base_url, "--model", "scripted", "--job-dir", str(root),
                              "--no-progress"], check=False, capture_output=True, text=True, timeout=300,
                             env={**os.environ})
    assert out.returncode in (0, 1), out.stderr
    return root


def test_detectors_hit_on_a_real_trial_folder(job):
    failed, passed = digest(job / "hello-file__r1"), digest(job / "hello-file__r2")
    assert (failed.status, passed.status) == ("failed", "passed")
    [hit] = [h for h in failed.hits if h.detector == "keys_without_newline"]
    assert hit.episode == 0 and hit.behaviour == "dispatch.commands"
    index = TraceIndex.load(job / "hello-file__r1")
    spans = [r.span for r in hit.evidence if r.span]
    assert spans and all(s in index.spans and index.spans[s] == 0 for s in spans)
    assert all(r.step in index.steps for r in hit.evidence)
    assert [h.detector for h in passed.hits] == []


def test_many_detectors_hit_on_one_real_run(job):
    d = digest(job / "hello-file__r3")
    found = {(h.detector, h.episode) for h in d.hits}
    expected = {("parse_error", 0), ("auto_fix", 1), ("observation_truncated", 1), ("keys_while_running", 3),
                ("claim_after_error", 4), ("repeated_commands", 5), ("output_length", 8), ("max_episodes", 8),
                ("model_errors", None)}
    assert expected <= found, sorted(found)
    [cut] = [h for h in d.hits if h.detector == "observation_truncated"]
    assert any(r.span for r in cut.evidence)  # found through the monitor's note of the capture's full length
    index = TraceIndex.load(job / "hello-file__r3")
    for h in d.hits:
        assert all(r.span is None or r.span in index.spans for r in h.evidence), h
        assert all(r.step is None or r.step in index.steps for r in h.evidence), h


def test_pairs_and_analysis_on_the_real_corpus(job, tmp_path):
    pairs = make_pairs(job)
    assert pairs.flipping == ["hello-file"] and [p.key for p in pairs.pairs] == ["hello-file:2:1", "hello-file:2:3"]
    from evolve.experiment.config import ExperimentConfig, TaskSplit
    from trials.endpoints.spec import EndpointSpec

    exp = init_experiment("real", ExperimentConfig(name="real", endpoint=EndpointSpec(base_url="http://x/v1",
                          model="m"), tasks=TaskSplit(dir="data/starter"), r=2), runs_dir=tmp_path)
    shutil.copytree(job, exp.root / "versions" / "v0" / "reference")
    span = next(r.span for h in digest(job / "hello-file__r1").hits for r in h.evidence if r.span)

    def answer(role, prompt, _job):
        if role == "analyst":
            return finding_answer("hello-file__r2", "hello-file__r1", 0, step=2, span=span,
                                  behaviour="dispatch.commands")
        names = [ln[3:] for ln in prompt.splitlines() if ln.startswith("## ")]
        return {"reviews": [{"group": n, "verdict": "accept", "applies_to_all": True, "distinct": True,
                             "reason": "one member"} for n in names]}

    backend = ScriptedBackend(answer)
    result = Analysis(exp, backend, max_pairs=1).run()
    assert [f.failure for f in result.findings] == ["hello-file__r1"]  # its real span id passed the check
    assert result.groups[0].rank == 1 and result.groups[0].behaviours == ["dispatch.commands"]
    prompt = backend.calls[0][1]
    assert "keys_without_newline [dispatch.commands]" in prompt and "dispatch.commands (Command dispatch)" in prompt
