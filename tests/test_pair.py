"""``rise pair`` (rise/commands/pair.py): two arms in lockstep, coupled seeds, the round's decision and the
agreement table. The unit tests build trials by hand; the last test runs the real command (real tmux, bubblewrap,
HTTP) against a scripted model whose answer depends only on the seed it is sent, so coupled arms must agree on
every pair and a missing seed shows as failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rise.commands.pair import agreement_table, replies, shared_replies, totals
from tests.test_controller_support import MARK, SOLVE, _reply, parts_missing
from trials.endpoints.scripted import ScriptedServer
from trials.grid import cell_seed
from trials.results import TrialResult

REPO = Path(__file__).resolve().parents[1]
STARTER = REPO / "data" / "starter"


def _trial(tmp: Path, arm: str, task: str, k: int, status: str, texts: list[str]) -> tuple[TrialResult, Path]:
    d = tmp / arm / f"{task}__r{k}"
    (d / "agent").mkdir(parents=True)
    steps = [{"step_id": 1, "source": "user", "message": "do it"}]
    steps += [{"step_id": i + 2, "source": "agent", "message": t} for i, t in enumerate(texts)]
    (d / "agent" / "trajectory.json").write_text(json.dumps({"steps": steps}))
    return TrialResult(trial_name=d.name, run_id=f"{arm}{task}{k}", task_name=task, repetition=k,
                       status=status), d


def test_shared_replies_counts_the_identical_leading_replies():
    assert shared_replies(["a", "b", "c"], ["a", "b", "x"]) == 2
    assert shared_replies(["a"], ["b"]) == 0
    assert shared_replies([], ["a"]) == 0
    assert shared_replies(["a", "b"], ["a", "b", "c"]) == 2


def test_replies_reads_the_agent_steps_and_tolerates_a_missing_or_broken_file(tmp_path):
    _, d = _trial(tmp_path, "x", "t", 1, "passed", ["one", "two"])
    assert replies(d) == ["one", "two"]
    assert replies(tmp_path / "nowhere") == []
    (d / "agent" / "trajectory.json").write_text("{not json")
    assert replies(d) == []


def test_agreement_table_counts_pairs_per_task_and_leaves_out_infra(tmp_path):
    cells = {  # (task, k): (incumbent status, its replies, candidate status, its replies)
        ("a", 1): ("passed", ["x", "y"], "passed", ["x", "y"]),
        ("a", 2): ("failed", ["x"], "passed", ["z"]),
        ("a", 3): ("failed", ["p", "q"], "failed", ["p", "r"]),
        ("b", 1): ("passed", ["m"], "failed", ["m", "n"]),
        ("b", 2): ("infra", [], "passed", ["m"]),
    }
    inc, cand, inc_dirs, cand_dirs = {}, {}, {}, {}
    for (t, k), (si, ri, sc, rc) in cells.items():
        inc[(t, k)], inc_dirs[(t, k)] = _trial(tmp_path, "inc", t, k, si, ri)
        cand[(t, k)], cand_dirs[(t, k)] = _trial(tmp_path, "cand", t, k, sc, rc)
    rows = agreement_table(inc, cand, inc_dirs, cand_dirs, ["a", "b"], 3)
    a, b = rows
    assert (a["pairs"], a["agree"], a["both_pass"], a["n10"], a["n01"], a["same_first_reply"]) == (3, 2, 1, 1, 0, 2)
    assert a["shared_replies"] == round((2 + 0 + 1) / 3, 2) and a["replies"] == round((2 + 1 + 2) / 3, 2)
    # b: the ⊥ pair (k = 2) is no evidence; k = 3 was never run
    assert (b["pairs"], b["agree"], b["n10"], b["n01"], b["same_first_reply"]) == (1, 0, 0, 1, 1)
    tot = totals(rows)
    assert tot["pairs"] == 4 and tot["agree"] == 2 and tot["agreement"] == 0.5
    assert totals([dict(a, pairs=0, agree=0)])["agreement"] is None


def _task_of(body: dict) -> str | None:
    first = next((m.get("content") or "" for m in body.get("messages", []) if m.get("role") == "user"), "")
    return next((t for t, mark in MARK.items() if mark in first), None)


def seed_driven(body: dict) -> str:
    """A model whose whole trial is a function of the seed it is sent: it solves when seed % 5 == 4 (hello-file
    repetition 1 and write-json repetition 2 under cell seeds), else claims completion without working; sent no
    seed, it never works."""
    task = _task_of(body)
    if task is None:
        return "Nothing to summarise."
    mine = [m.get("content") or "" for m in body.get("messages", []) if m.get("role") == "assistant"]
    if any(f"SOLVE {task}" in text for text in mine):
        return _reply("Done and checked.", None, True)
    seed = body.get("seed")
    if seed is not None and seed % 5 == 4:
        return _reply(f"SOLVE {task}: doing it.", SOLVE[task], False)
    return _reply("The task is already complete.", None, True)


def _pair(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rise.cli", "pair", "--no-progress", *args], check=False, cwd=REPO,
                          capture_output=True, text=True, timeout=400, env={**os.environ, "COLUMNS": "200"})


def test_the_seed_against_itself_coupled_agrees_on_every_pair_and_is_not_adopted(tmp_path):
    if (why := parts_missing()):
        pytest.skip(why)
    assert [cell_seed("hello-file", k) % 5 == 4 for k in (1, 2)] == [True, False]  # the responder's premise
    assert [cell_seed("write-json", k) % 5 == 4 for k in (1, 2)] == [False, True]
    out, job = tmp_path / "pair.json", tmp_path / "job"
    args = ("--tasks", str(STARTER), "--task", "hello-file", "--task", "write-json", "-r", "2", "--job-dir",
            str(job), "--setting", "terminus.max_episodes=4")
    with ScriptedServer(seed_driven) as srv:
        proc = _pair(*args, "--base-url", srv.base_url, "--model", srv.model, "--json", str(out))
        seeds = {b.get("seed") for b in srv.requests if _task_of(b)}
        calls = len(srv.requests)
        # a second run into the same folder is refused; --resume finds every cell done and decides again
        again = _pair(*args, "--base-url", srv.base_url, "--model", srv.model)
        resumed = _pair(*args, "--base-url", srv.base_url, "--model", srv.model, "--resume")
        assert len(srv.requests) == calls
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert data["complete"] and data["policy"] == "coupled"
    # every trial's calls carried its cell's seed, the same in both arms
    assert seeds == {cell_seed(t, k) for t in ("hello-file", "write-json") for k in (1, 2)}
    rows = {r["task"]: r for r in data["agreement"]["tasks"]}
    assert rows["hello-file"]["pairs"] == 2 and rows["hello-file"]["both_pass"] == 1
    assert rows["write-json"]["pairs"] == 2 and rows["write-json"]["both_pass"] == 1
    assert data["agreement"]["all"]["agreement"] == 1.0 and data["agreement"]["all"]["same_first_reply"] == 4
    assert data["agreement"]["all"]["coupling"] == 1.0 and "coupling ρ̂ 1.000" in proc.stdout
    d = data["decision"]
    assert d["decided"] and not d["adopt"] and d["policy"] == "coupled"
    assert "agreement 4/4 = 1.000" in proc.stdout and "reject" in proc.stdout
    for arm in ("incumbent", "candidate"):
        assert json.loads((job / arm / "config.json").read_text())["cell_seeds"] is True
    assert again.returncode == 1 and "already holds a comparison" in again.stderr
    assert resumed.returncode == 0 and "agreement 4/4 = 1.000" in resumed.stdout, resumed.stdout + resumed.stderr


def test_each_arm_on_its_own_server(tmp_path):
    """``--incumbent-base-url``: the incumbent arm's calls go to its own server, the candidate's to --base-url
    (their requests never share a batch), and the arms still pair up; ``--no-prompt-cache`` reaches every call."""
    if (why := parts_missing()):
        pytest.skip(why)
    out = tmp_path / "pair.json"
    with ScriptedServer(seed_driven) as cand_srv, ScriptedServer(seed_driven) as inc_srv:
        proc = _pair("--tasks", str(STARTER), "--task", "hello-file", "-r", "1", "--job-dir", str(tmp_path / "job"),
                     "--base-url", cand_srv.base_url, "--incumbent-base-url", inc_srv.base_url, "--model", "scripted",
                     "--json", str(out), "--no-prompt-cache")
        caching = {b.get("cache_prompt") for s in (inc_srv, cand_srv) for b in s.requests if _task_of(b)}
        served = [sum(1 for b in s.requests if _task_of(b)) for s in (inc_srv, cand_srv)]
        urls = {"incumbent": inc_srv.base_url, "candidate": cand_srv.base_url}
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert served[0] >= 2 and served[1] >= 2, served  # a solve and its confirmation, in each arm
    assert caching == {False}  # --no-prompt-cache: every call of both arms asks the server not to reuse its cache
    data = json.loads(out.read_text())
    assert data["agreement"]["all"]["pairs"] == 1 and data["agreement"]["all"]["agreement"] == 1.0
    arms = {arm: json.loads((tmp_path / "job" / arm / "config.json").read_text())["endpoint"]["base_url"]
            for arm in ("incumbent", "candidate")}
    assert arms == urls


def test_report_reads_a_comparison_from_disk_and_runs_nothing(tmp_path):
    """``--report``: the table and the decision from the two job folders, without a server; an unfinished
    comparison is undecided (exit 2); a folder that holds none is named."""
    if (why := parts_missing()):
        pytest.skip(why)
    job = tmp_path / "job"
    with ScriptedServer(seed_driven) as srv:
        done = _pair("--tasks", str(STARTER), "--task", "hello-file", "-r", "1", "--job-dir", str(job),
                     "--base-url", srv.base_url, "--model", "scripted")
    assert done.returncode == 0, done.stdout + done.stderr
    shown = _pair("--report", "--job-dir", str(job))
    assert shown.returncode == 0 and "agreement 1/1 = 1.000" in shown.stdout and "reject" in shown.stdout
    (job / "candidate" / "hello-file__r1" / "result.json").unlink()  # as if the candidate's cell had not run
    partial = _pair("--report", "--job-dir", str(job))
    assert partial.returncode == 2 and "undecided" in partial.stdout
    missing = _pair("--report", "--job-dir", str(tmp_path / "nothing"))
    assert missing.returncode == 1 and "no job here" in missing.stderr
