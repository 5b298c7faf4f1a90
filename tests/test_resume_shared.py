"""Resume helpers shared by a job and a full evaluation: the orphaned agent a killed runner leaves behind."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from trials.job import kill_orphan_agent


def _agent(trial_dir: Path, *, spec_in_argv: bool = True) -> subprocess.Popen:
    """A stand-in agent in its own session, with the pid file the runner writes."""
    (trial_dir / "agent").mkdir(parents=True)
    spec = str(trial_dir / "agent" / "trial_spec.json") if spec_in_argv else "unrelated"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--spec", spec],
                            start_new_session=True)
    (trial_dir / "agent" / "agent.pid").write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + 10  # under load the exec may not have set the command line yet
    while time.monotonic() < deadline and spec not in psutil.Process(proc.pid).cmdline():
        time.sleep(0.02)
    return proc


def test_orphaned_agent_is_killed(tmp_path):
    proc = _agent(tmp_path / "t__r1")
    try:
        assert kill_orphan_agent(tmp_path / "t__r1")
        assert proc.wait(timeout=10) == -9
    finally:
        proc.kill()


def test_a_reused_pid_is_left_alone(tmp_path):
    proc = _agent(tmp_path / "t__r1", spec_in_argv=False)
    try:
        assert not kill_orphan_agent(tmp_path / "t__r1")
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.parametrize("pid_text", [None, "not-a-pid", "999999999"])
def test_no_agent_to_kill(tmp_path, pid_text):
    if pid_text is not None:
        (tmp_path / "agent").mkdir()
        (tmp_path / "agent" / "agent.pid").write_text(pid_text)
    assert not kill_orphan_agent(tmp_path)
