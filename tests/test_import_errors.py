"""An import error is an error (issue 15 item 9): no part of the platform turns a broken import into quietly
reduced behaviour (a missing CLI command, candidates without their switches, a harness run without recording)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

BLOCK = "import sys\nsys.modules[{blocked!r}] = None  # importing it now fails as a missing module does\n"


def _run_blocked(blocked: str, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK.format(blocked=blocked) + code], capture_output=True,
                          text=True, cwd=os.getcwd(), timeout=120, check=False)


@pytest.mark.parametrize(("blocked", "code"), [
    ("rise.commands.inspect", "from rise.cli import app"),  # the CLI's command registry, every command
    ("rise.commands.inspect", "import sys\nsys.argv = ['rise', 'show']\nfrom rise.cli import main\nmain()"),  # one
    ("validate.contracts", "import evolve.round.controller"),  # the controller's switches and screening spans
    ("monitor.host", ("from pathlib import Path\nfrom monitor.agents import harness_agent\n"
                      "harness_agent(Path('harness_seed'))")),  # the agents module: a run without recording
])
def test_a_missing_module_is_an_error(blocked, code):
    proc = _run_blocked(blocked, code)
    assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr and blocked in proc.stderr, proc.stderr


def test_the_same_code_runs_when_nothing_is_blocked():
    proc = _run_blocked("no.such.module", "from rise.cli import app\nimport evolve.round.controller\nfrom pathlib import Path\n"
                        "from monitor.agents import harness_agent\n"
                        "assert harness_agent(Path('harness_seed')).argv[2] == 'monitor.host'")
    assert proc.returncode == 0, proc.stderr
