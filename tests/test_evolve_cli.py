"""``rise evolve`` on the command line: its errors name what is wrong, and a stopped loop says why."""

from __future__ import annotations

from typer.testing import CliRunner

from evolve.experiment.ledger import RoundStart
from rise.cli import app
from tests.test_analysis_support import make_experiment


def test_unknown_experiment_is_named(tmp_path):
    res = CliRunner().invoke(app, ["evolve", "nope", "--runs-dir", str(tmp_path), "--no-progress"])
    assert res.exit_code == 1 and "nope" in res.output


def test_a_started_round_needs_resume(tmp_path):
    exp = make_experiment(tmp_path, {"alpha": "pf"})
    exp.ledger.append(RoundStart(key="r01:start", round=1, incumbent="v0"))
    res = CliRunner().invoke(app, ["evolve", str(exp.root), "--rounds", "2", "--no-progress"])
    assert res.exit_code == 1 and "round 1" in res.output and "--resume" in res.output


def test_rounds_already_done_stop_at_once(tmp_path):
    from evolve.experiment.ledger import RoundEnd

    exp = make_experiment(tmp_path, {"alpha": "pf"})
    exp.ledger.append(RoundStart(key="r01:start", round=1, incumbent="v0"))
    exp.ledger.append(RoundEnd(key="r01:end", round=1, adopted=None, reason="x"))
    res = CliRunner().invoke(app, ["evolve", str(exp.root), "--rounds", "1", "--no-progress"])
    assert res.exit_code == 0 and "stopped: 1 round(s) done" in res.output and "adopted: nothing" in res.output
    (stop,) = exp.ledger.find("evolve_stop")
    assert stop.final and stop.round == 1


def test_a_second_evolve_on_one_experiment_is_refused_with_the_holders_pid(tmp_path):
    """Issue 15 item 8 for ``rise evolve``: while another process holds the experiment, evolve writes nothing."""
    import os
    import subprocess
    import sys

    from tests.test_controller_lock import HOLD

    exp = make_experiment(tmp_path, {"alpha": "pf"})
    before = exp.ledger.events
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(exp.root)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    try:
        assert holder.stdout.readline().strip() == "held"
        res = CliRunner().invoke(app, ["evolve", str(exp.root), "--rounds", "1", "--no-progress"])
        assert res.exit_code == 1 and f"pid {holder.pid}" in res.output and "in use" in res.output
        assert exp.ledger.events == before  # the refused loop appended nothing
    finally:
        holder.communicate("\n", timeout=30)
