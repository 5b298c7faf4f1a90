"""Inspection over a round the real controller ran (local sandbox, tmux, the scripted model that claims
completion too early, over real HTTP; stand-in smoke/contract checks to keep it short): ``rise show`` and
``rise report`` read what the controller wrote, and the adopted v1, frozen, transfers to a task the experiment
never saw — where it passes and the seed, under the same model, fails."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from evolve.experiment.freeze import freeze
from evolve.round.controller import CandidateInput, Proposal, run_round
from evolve.views.report import build_report, write_report
from evolve.views.show import version_view
from rise.cli import app
from tests.fakes.openai_server import ScriptedServer
from tests.test_controller_support import (
    GOOD,
    GOOD_PROPOSAL,
    HARMFUL,
    HARMFUL_PROPOSAL,
    STARTER,
    early_claimer,
    make_experiment,
    parts_missing,
    standin_checks,
)

pytestmark = [pytest.mark.tmux, pytest.mark.sandbox]
runner = CliRunner()


@pytest.fixture(scope="module")
def server():
    if (why := parts_missing()):
        pytest.skip(why)
    with ScriptedServer(early_claimer, model="scripted") as srv:
        yield srv


@pytest.fixture(scope="module")
def exp(server, tmp_path_factory):
    exp = make_experiment(tmp_path_factory.mktemp("real") / "runs", server.base_url, heldout=[])
    report = run_round(exp, 1, [CandidateInput("verify", str(GOOD), Proposal.model_validate(GOOD_PROPOSAL)),
                                CandidateInput("skip", str(HARMFUL), Proposal.model_validate(HARMFUL_PROPOSAL))],
                       checks=standin_checks())
    assert report.adopted == "v1", report
    return exp


def test_show_and_report_read_the_controllers_round(exp):
    view = version_view(exp, "v1")
    assert view.status == "adopted" and view.parent == "v0" and view.slug == "verify"
    assert any(f.path.endswith(".py") for f in view.files) and "diff --git" in view.code_diff
    assert {row.task: row.pair for row in view.comparison.tasks} == {"hello-file": "stable_pass",
                                                                      "write-json": "fixed"}
    skip = version_view(exp, "cand/r01-skip")
    assert skip.status == "rejected" and skip.decision["regressions"] == ["hello-file"]
    assert {row.task: row.pair for row in skip.comparison.tasks}["hello-file"] == "regressed"

    rep = build_report(exp)
    assert [(c.label, c.status) for c in rep.columns] == [("v0", "seed"), ("r01 verify → v1", "adopted"),
                                                          ("r01 skip", "rejected")]
    assert [c.metrics.pass_at_1 for c in rep.columns] == [0.5, 1.0, 0.0]
    # reference v0 (2 tasks × 2), each candidate's screening (1 task) and evaluation (2 × 2)
    assert rep.total_spend.trials == 4 + 2 * (1 + 4) and rep.total_spend.generator.calls > 0
    page = write_report(exp)
    html = page.read_text()
    assert "regressions of stable passes: hello-file" in html and 'data-column="r01 verify → v1"' in html
    # issue 28: every decision records its power at its grid beside its false adoption; show and report say both
    for d in (view.decision, skip.decision):
        assert d["false_adoption"] is not None and 0 <= d["power"] <= 1 and d["power_gain"] == 0.15
    assert "measured false adoption" in view.policy and "power " in view.policy and "at +0.15" in view.policy
    assert "at +0.15 against this baseline" in html
    res = runner.invoke(app, ["show", str(exp.root), "v1"])
    assert res.exit_code == 0 and "against this baseline" in " ".join(res.output.split())
    res = runner.invoke(app, ["status", str(exp.root)])
    assert res.exit_code == 0 and "running: nothing" in res.output and "spend: 14 trials" in res.output


def test_frozen_v1_transfers_to_an_unseen_task(exp, tmp_path):
    assert "count-lines" not in exp.config.tasks.development and not exp.config.tasks.heldout
    frozen = tmp_path / "made" / "exp-v1.rhz"
    freeze(exp, "v1", frozen)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    shutil.copy2(frozen, fresh / frozen.name)
    tasks = tmp_path / "unseen"
    shutil.copytree(STARTER / "count-lines", tasks / "count-lines")
    rise = [shutil.which("rise")] if shutil.which("rise") else [sys.executable, "-m", "rise.cli"]
    outcome = {}
    with ScriptedServer(early_claimer, model="scripted") as srv:
        for agent in (frozen.name, "seed"):
            job = "job-" + agent.split(".")[0]
            proc = subprocess.run([*rise, "eval", "--agent", agent, "--tasks", str(tasks), "--env", "local",
                                   "--base-url", srv.base_url, "--model", "scripted", "--job-dir", job,
                                   "--json", f"{job}.json", "--no-progress"], cwd=fresh, capture_output=True,
                                  text=True, timeout=300, check=False,
                                  env={**os.environ, "RISE_CACHE_DIR": str(fresh / "cache")})
            assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
            data = json.loads((fresh / f"{job}.json").read_text())
            outcome[agent] = data["trials"][0]["status"]
            if agent != "seed":
                res = json.loads((fresh / job / "count-lines__r1" / "result.json").read_text())
                assert res["harness_version"] == f"exp-v1@{exp.commit_of('v1')[:12]}"
    # the early claimer only does the work when asked to verify: the evolved mechanism carries over
    assert outcome == {frozen.name: "passed", "seed": "failed"}
