"""The experiment lock (issue 15 item 8): a second process on one experiment is refused, naming the holder."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from evolve.experiment.lock import ExperimentLocked, experiment_lock
from evolve.round.controller import run_round
from rise.cli import app
from tests.test_controller_support import GOOD, make_experiment

HOLD = ("import sys, time\n"
        "from evolve.experiment.lock import experiment_lock\n"
        "with experiment_lock(sys.argv[1]):\n"
        "    print('held', flush=True)\n"
        "    sys.stdin.readline()\n")


def test_second_round_is_refused_with_the_holders_pid(tmp_path):
    exp = make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(exp.root)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ExperimentLocked, match=rf"in use by pid {holder.pid} since \d{{4}}-"):
            run_round(exp, 1, [("x", str(GOOD))])
        res = CliRunner().invoke(app, ["round", "exp", "--runs-dir", str(tmp_path / "runs"),
                                       "--candidate", f"x={GOOD}", "--no-progress"])
        assert res.exit_code == 1 and f"pid {holder.pid}" in res.output
        assert exp.ledger.events == []  # the refused round wrote nothing
    finally:
        holder.communicate("\n", timeout=30)
    # released (also by a holder that dies): the next holder gets it, and nesting in one process re-enters
    with experiment_lock(exp.root), experiment_lock(exp.root):
        pass
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(exp.root)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    assert holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait(timeout=30)
    with experiment_lock(exp.root):
        pass
