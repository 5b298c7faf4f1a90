"""``rise evolve --max-hours`` bounds a stretch inside a long unit too (found on the real night of 2026-12-06: the
reference corpus, one unit of about 3 h, ran past a 1.45 h bound): evolve.experiment.budget.arm_deadline."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

from evolve.experiment.budget import arm_deadline
from tests.test_runner_sandbox import REPO


def test_the_watchdog_fires_after_the_deadline_and_its_grace_and_says_why():
    said: list[str] = []
    fired = threading.Event()
    timer = arm_deadline(0.05, said.append, grace=0.05, stop=fired.set)
    assert timer.daemon  # it never keeps a process that ended by itself alive
    assert fired.wait(30), "the watchdog did not fire"
    assert len(said) == 1 and "wall-time budget" in said[0] and "--resume" in said[0]


def test_a_cancelled_watchdog_never_fires():
    fired = threading.Event()
    arm_deadline(0.2, lambda s: None, grace=0.0, stop=fired.set).cancel()
    assert not fired.wait(1.0)


def test_a_process_busy_inside_a_unit_is_stopped_as_a_kill_would():
    """A real process armed at 0.2 h-equivalent seconds and busy far longer ends by SIGTERM, having said why."""
    code = ("import sys, time; from evolve.experiment.budget import arm_deadline; "
            "arm_deadline(0.2, lambda s: print(s, file=sys.stderr, flush=True), grace=0.0); time.sleep(120)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=100,
                          check=False)
    assert proc.returncode == -signal.SIGTERM, (proc.returncode, proc.stderr)
    assert "wall-time budget" in proc.stderr and "--resume" in proc.stderr

