"""Freeze and transfer after an adoption (evolve.round.transfer).

- Unit (no sandbox): the paired rows on hand-checked counts; an adopted v1 whose experiment has no held-out
  split and no second endpoint (or one that does not answer) is frozen and both parts are booked as *skipped*
  with their reason, once; ``[transfer] enabled = false`` turns it off.
- Real parts (bubblewrap, tmux, real HTTP, real git): ``rise evolve`` (tests/evolve_driver.py, the scripted
  roles of tests/test_evolve_support.py) adopts v1 on a scripted-model grid, then runs the transfer on tiny grids
  (r = 1): the held-out split with the experiment's model, and the development and held-out tasks with a second
  scripted model behind its own server (in CI a scripted model stands in for both: the 0.5B is not needed to
  show the machinery). It is killed by SIGKILL at the freeze and twice inside the second-model grids, then
  resumed: every trial ran once, ``rise audit`` is clean, and the table is in evolve.md and the report.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import pytest

from evolve.experiment.audit import audit
from evolve.experiment.config import ExperimentConfig
from evolve.experiment.ledger import Adoption
from evolve.experiment.store import init_experiment
from evolve.round.controller import Controller
from evolve.round.transfer import Transfer, paired_rows, transfer_pending
from evolve.views.report import write_report
from evolve.views.rounds import write_round_summary

REPO = Path(__file__).resolve().parents[1]
STARTER = REPO / "data" / "starter"


def test_paired_rows_by_hand():
    parent = {"a": (1, 2), "b": (0, 2), "c": (0, 0)}
    new = {"a": (2, 2), "b": (1, 2), "c": (1, 1)}
    rows = paired_rows("m", "development", ["a", "b", "c"], parent, new)
    by = {r["task"]: r for r in rows}
    assert by["a"]["parent_pass1"] == 0.5 and by["a"]["new_pass1"] == 1.0 and by["a"]["difference"] == 0.5
    assert by["c"]["parent_pass1"] is None and by["c"]["difference"] is None  # no finished run: no rate
    # all: passes and runs pooled (1/6 against 4/5); Pass@1 the mean over tasks with runs: (0.5 + 0) / 2 = 0.25
    # and (1 + 0.5 + 1) / 3
    assert by["all"]["parent"] == [1, 4] and by["all"]["new"] == [4, 5]
    assert by["all"]["parent_pass1"] == 0.25 and by["all"]["new_pass1"] == pytest.approx(2.5 / 3)
    assert by["all"]["difference"] == pytest.approx(2.5 / 3 - 0.25)


def _adopted(tmp_path: Path, **transfer) -> tuple:
    cfg = ExperimentConfig.model_validate({
        "name": "xfer", "endpoint": {"base_url": "http://127.0.0.1:9/v1", "model": "evolved-model"},
        "tasks": {"dir": str(STARTER), "development": ["hello-file", "write-json"]}, "r": 1, "env": "local",
        "transfer": transfer})
    exp = init_experiment("xfer", cfg, runs_dir=tmp_path / "runs")
    _, wt = exp.create_candidate(1, "one-claim")
    settings = wt / "settings.toml"
    settings.write_text(settings.read_text().replace("confirmations = 2", "confirmations = 1", 1))
    commit = exp.commit_worktree(wt, "one completion claim is enough")
    assert exp.tag_version(commit, "v1: one-claim") == "v1"
    exp.ledger.append(Adoption(key=f"{commit}:adoption", commit=commit, version="v1", parent="v0"))
    return exp, commit


@pytest.mark.parametrize(("transfer", "why"), [
    ({}, "no endpoint configured for the second model qwen2.5-coder-0.5b ([transfer] base_url in "),
    ({"base_url": "http://127.0.0.1:9/v1", "model": "small"},
     "the second model's endpoint http://127.0.0.1:9/v1 (small) does not answer"),
])
def test_skipped_parts_are_recorded_with_their_reason(tmp_path, transfer, why):
    exp, commit = _adopted(tmp_path, **transfer)
    assert transfer_pending(exp, "v1")
    ev = asyncio.run(Transfer(exp, Controller(exp), say=lambda _m: None).run(1, "v1"))
    assert ev.key == f"{commit}:transfer" and ev.version == "v1" and ev.parent == "v0"
    fixed, second = ev.table["parts"]
    assert fixed["status"] == "skipped" and fixed["reason"] == "no held-out tasks ([tasks] heldout is empty)"
    assert second["status"] == "skipped" and second["reason"].startswith(why)
    (frozen,) = exp.ledger.find("freeze")
    path = exp.root / frozen.path
    assert frozen.key == f"{commit}:freeze" and path.name == "xfer-v1.rhz"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == frozen.sha256
    # done: not pending any more, and a second run books nothing
    assert not transfer_pending(exp, "v1")
    again = asyncio.run(Transfer(exp, Controller(exp), say=lambda _m: None).run(1, "v1"))
    assert again.ts == ev.ts and len(exp.ledger.find("transfer")) == 1 and len(exp.ledger.find("freeze")) == 1
    md = write_round_summary(exp, 1).read_text()
    assert "## Transfer" in md and f"second model {second['model']}: skipped: {why}" in md
    assert "fixed model evolved-model: skipped: no held-out tasks" in md


def test_rise_transfer_command(tmp_path):
    from typer.testing import CliRunner

    from rise.cli import app

    exp, _ = _adopted(tmp_path)
    res = CliRunner().invoke(app, ["transfer", str(exp.root), "v1", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "v1 against v0; frozen as versions/v1/xfer-v1.rhz" in res.output
    assert "second model qwen2.5-coder-0.5b: skipped: no endpoint configured" in res.output
    assert len(exp.ledger.find("transfer")) == 1
    bad = CliRunner().invoke(app, ["transfer", str(exp.root), "v7", "--no-progress"])
    assert bad.exit_code == 1 and "v7 was never adopted" in bad.output


def test_transfer_can_be_turned_off_and_a_misspelt_key_is_named(tmp_path):
    exp, _ = _adopted(tmp_path, enabled=False, base_url="http://127.0.0.1:9/v1")
    assert not transfer_pending(exp, "v1")
    path = tmp_path / "experiment.toml"
    path.write_text(exp.config_path.read_text().replace("enabled = false", "enabeld = false"))
    with pytest.raises(ValueError, match="enabeld") as err:
        ExperimentConfig.load(path)
    assert str(path) in str(err.value)


# ------------------------------------------------------------------------------------------------ real parts
STAGES = ["transfer-freeze", "transfer:trial@2", "transfer:trial@3"]


def _passes(job: Path, task: str) -> list[int]:
    statuses = [json.loads(p.read_text())["status"] for p in sorted(job.glob(f"{task}__r*/result.json"))]
    return [statuses.count("passed"), len(statuses)]


@pytest.mark.tmux
@pytest.mark.sandbox
@pytest.mark.timeout(1200)
def test_adopting_round_then_transfer_killed_and_resumed(tmp_path, flaky_server):
    from tests.fakes.openai_server import ScriptedServer
    from tests.test_evolve_support import (
        FlakyClaimer,
        calls_logged,
        kill_at_each_stage_then_resume,
        make_experiment,
    )

    runs, calls = tmp_path / "runs", tmp_path / "calls.log"
    with ScriptedServer(FlakyClaimer(), model="scripted-small") as small:
        exp = make_experiment(runs, flaky_server.base_url, heldout=("count-lines",),
                              transfer={"base_url": small.base_url, "model": "scripted-small", "r": 1})
        out = kill_at_each_stage_then_resume(runs, calls, "verify-completion", STAGES)
    assert "ADOPTED ['v1']" in out
    assert {b["model"] for b in small.requests} == {"scripted-small"}
    assert not any(b["model"] == "scripted-small" for b in flaky_server.requests)

    led = exp.ledger
    keys = [e.key for e in led.events]
    assert len(keys) == len(set(keys))
    assert audit(exp).problems == []
    assert sorted(c.split()[0] for c in calls_logged(calls)) == ["analyst", "implementer", "proposer"]
    (adoption,) = led.find("adoption")
    c1, c0 = adoption.commit, exp.commit_of("v0")
    # each cell once: v0 reference 2 x 2 + held-out 2, screening 1, evaluation 4, v1 held-out 2, transfer 2 x 3,
    # and the fresh grading runs of v0 on the 2 named tasks x r = 2 (evolve.round.grading_runs)
    done = led.find("trial_done")
    assert all(e.status != "infra" for e in done)
    transfer = sorted((e.commit, e.task) for e in done if e.purpose == "transfer")
    tasks = ["count-lines", "hello-file", "write-json"]
    assert transfer == sorted([(c0, t) for t in tasks] + [(c1, t) for t in tasks]) and len(done) == 23
    assert sum(":grading:" in e.key for e in done) == 4
    assert {e.key.rsplit(":", 2)[0] for e in done if e.purpose == "transfer"} == {
        f"{c0}:transfer:scripted-small", f"{c1}:transfer:scripted-small"}

    (ev,) = led.find("transfer")
    assert ev.key == f"{c1}:transfer" and ev.round == 1 and (ev.version, ev.parent) == ("v1", "v0")
    fixed, second = ev.table["parts"]
    assert fixed["status"] == "done" and fixed["model"] == "scripted" and fixed["r"] == 2
    assert second["status"] == "done" and second["model"] == "scripted-small" and second["r"] == 1
    # every count in the table is what the trial folders hold
    held = {"v0": exp.root / "versions" / "v0" / "heldout", "v1": exp.root / "versions" / "v1" / "heldout"}
    small_jobs = {v: exp.root / "versions" / v / "transfer" / "scripted-small" for v in ("v0", "v1")}
    for part, jobs in ((fixed, held), (second, small_jobs)):
        for row in part["rows"]:
            if row["task"] != "all":
                assert row["parent"] == _passes(jobs["v0"], row["task"]), row
                assert row["new"] == _passes(jobs["v1"], row["task"]), row
    rows = {(r["split"], r["task"]): r for r in second["rows"]}
    assert set(rows) == {("development", "hello-file"), ("development", "write-json"), ("development", "all"),
                         ("held-out", "count-lines"), ("held-out", "all")}
    # the scripted model solves hello-file at once under both harnesses; v1's verification makes write-json pass
    assert rows[("development", "hello-file")]["parent"] == [1, 1] and rows[("development", "hello-file")]["new"] \
        == [1, 1] and rows[("development", "write-json")]["new"] == [1, 1]
    (frozen,) = led.find("freeze")
    assert frozen.version == "v1" and (exp.root / frozen.path).is_file() and ev.table["frozen"] == frozen.path

    md = (exp.root / "rounds" / "r01" / "evolve.md").read_text()
    assert "## Transfer" in md and "| scripted-small (second model, r = 1) | development | hello-file | 1/1 | 1/1 " \
        "| 1.000 | 1.000 | +0.000 |" in md
    assert "| scripted (fixed model, r = 2) | held-out | count-lines |" in md
    html = write_report(exp).read_text()
    assert 'data-model="scripted-small" data-split="held-out" data-task="count-lines"' in html
    assert "verify-completion" in html and "Transfer: v1 against v0" in html
