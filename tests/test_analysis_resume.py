"""``rise analyze`` as a process against a scripted OpenAI-compatible server (real HTTP, the openai backend on
pydantic-ai; the server stands in for the model): kill -9 after each kind of ledger event, then ``--resume``
makes no role call twice (the server counts the requests), and ends with the same ranked groups."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from evolve.experiment.ledger import Ledger
from tests.test_analysis_support import finding_answer, make_experiment
from trials.endpoints.scripted import ScriptedServer

GRID = {"alpha": "pf", "beta": "fp", "gamma": "pff"}


def responder(body):
    """final_answer for whichever role the system prompt names; analyst cites the failed run's step 2."""
    system = body["messages"][0]["content"]
    prompt = body["messages"][-1]["content"] if isinstance(body["messages"][-1]["content"], str) else ""
    if "You are the analyst" in system:
        success = prompt.split("Run **", 1)[1].split("**", 1)[0]
        failure = prompt.split("run\n**", 1)[1].split("**", 1)[0]
        answer = finding_answer(success, failure, 0, step=2)
    elif "You are the grouper" in system:
        ids = [ln.split()[1] for ln in prompt.splitlines() if ln.startswith("- f")]
        answer = {"groups": [{"name": "claims", "wish": "verify before a claim", "members": ids[:2]},
                             {"name": "rest", "wish": "other", "members": ids[2:] or ids[:1]}]}
    else:
        names = [ln[3:] for ln in prompt.splitlines() if ln.startswith("## ")]
        answer = {"reviews": [{"group": n, "verdict": "accept", "applies_to_all": True, "distinct": True,
                               "reason": "members share the wish"} for n in names]}
    return {"content": "", "tool_calls": [{"name": "final_answer", "arguments": answer}]}


def rise(exp, *args, kill_at=None):
    env = {**os.environ, "RISE_TEST_KILL_AT": kill_at or ""}
    return subprocess.run([sys.executable, "-m", "rise.cli", "analyze", str(exp.root), *args],
                          check=False, capture_output=True, text=True, env=env, timeout=240)


def chat_requests(srv):
    return len(srv.requests)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    with ScriptedServer(responder) as srv:
        exp = make_experiment(tmp_path_factory.mktemp("whole"), GRID, base_url=srv.base_url)
        out = rise(exp)
        assert out.returncode == 0, out.stderr
        return chat_requests(srv), out.stdout, exp


def test_uninterrupted_run_prints_ranked_groups_and_refuses_a_second_start(uninterrupted):
    n, stdout, exp = uninterrupted
    assert n == 6  # four pairs (gamma has two failing runs), one grouper, one reviewer
    assert "#1 claims: verify before a claim" in stdout and "cost analyst: 4 call(s)" in stdout
    again = rise(exp)
    assert again.returncode == 1 and "--resume" in again.stderr


@pytest.mark.parametrize("kill_at", ["analysis-finding@2", "analysis-group@1"])
def test_kill_then_resume_pays_for_no_call_twice(tmp_path, uninterrupted, kill_at):
    n_whole, stdout_whole, _ = uninterrupted
    with ScriptedServer(responder) as srv:
        exp = make_experiment(tmp_path, GRID, base_url=srv.base_url)
        killed = rise(exp, kill_at=kill_at)
        assert killed.returncode == -9, killed.stderr
        before = chat_requests(srv)
        resumed = rise(exp, "--resume")
        assert resumed.returncode == 0, resumed.stderr
        assert chat_requests(srv) == n_whole, f"{before} calls before the kill"
    keys = [e.key for e in Ledger(exp.root / "ledger.jsonl").events]
    assert len(keys) == len(set(keys)) == 6
    strip = [ln for ln in resumed.stdout.splitlines() if not ln.startswith(("records:", "  cost", "v0"))]
    assert strip == [ln for ln in stdout_whole.splitlines() if not ln.startswith(("records:", "  cost", "v0"))]
    data = json.loads((exp.root / "rounds" / "r01" / "analysis" / "analysis.json").read_text())
    assert data["costs"]["analyst"]["calls"] == 4


def test_record_then_replay_without_a_server(tmp_path):
    """--backend replay --record writes one recording per role call; replaying them needs no endpoint and
    gives the same groups (the CI path for a real model's analysis)."""
    recordings = tmp_path / "recordings"
    with ScriptedServer(responder) as srv:
        exp = make_experiment(tmp_path, {"alpha": "pf", "beta": "fp"}, base_url=srv.base_url)
        recorded = rise(exp, "--backend", "replay", "--recording", str(recordings), "--record")
        assert recorded.returncode == 0, recorded.stderr
        n = chat_requests(srv)
    assert sorted(p.name for p in recordings.iterdir()) == ["analyst-alpha-1-2.yaml", "analyst-beta-2-1.yaml",
                                                            "grouper.yaml", "reviewer.yaml"] and n == 4
    (exp.root / "ledger.jsonl").write_text("")
    shutil.rmtree(exp.root / "rounds")
    replayed = rise(exp, "--backend", "replay", "--recording", str(recordings))
    assert replayed.returncode == 0, replayed.stderr
    assert "#1 claims" in replayed.stdout and "cost analyst: 2 call(s)" in replayed.stdout
    (recordings / "reviewer.yaml").rename(tmp_path / "reviewer.yaml")
    (exp.root / "ledger.jsonl").write_text("")
    shutil.rmtree(exp.root / "rounds")
    missing = rise(exp, "--backend", "replay", "--recording", str(recordings))
    assert missing.returncode == 1 and "reviewer.yaml: no such recording" in missing.stderr.replace("\n", "")
    kinds = [json.loads(ln)["kind"] for ln in (exp.root / "ledger.jsonl").read_text().splitlines()]
    assert kinds == ["finding", "finding", "group"]  # what was done stays done
    (tmp_path / "reviewer.yaml").rename(recordings / "reviewer.yaml")
    resumed = rise(exp, "--backend", "replay", "--recording", str(recordings), "--resume")
    assert resumed.returncode == 0 and "#1 claims" in resumed.stdout, resumed.stderr
