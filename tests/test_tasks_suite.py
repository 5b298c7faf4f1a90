"""Every starter task (and the Terminal-Bench fixtures) fails untouched and passes after its oracle solution.

Runs in the real local sandbox (``trials.environments.local.LocalEnvironment``, bubblewrap): one fresh sandbox
for the untouched run and one for the solved run, so the first cannot leave anything for the second.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from trials.tasks import Task, load_task_set

pytestmark = pytest.mark.sandbox

ROOT = Path(__file__).resolve().parent.parent
STARTER = ROOT / "data" / "starter"
TB_FIXTURES = ROOT / "tests" / "data" / "tasks_tb"


def _local_environment():
    if shutil.which("bwrap") is None or shutil.which("nsenter") is None:
        pytest.skip("the local sandbox needs bubblewrap (bwrap) and nsenter")
    from trials.environments.local import LocalEnvironment

    return LocalEnvironment


def _tasks() -> list[Task]:
    return load_task_set(STARTER) + load_task_set(TB_FIXTURES)


async def _reward(task: Task, trial_dir: Path, solve: bool, command: str | None = None) -> tuple[str, str]:
    """(reward.txt content, verifier output) of one fresh sandbox, solved first when ``solve`` (or after running
    ``command`` in /app)."""
    env = _local_environment()(task, trial_dir)
    await env.start()
    try:
        notes = ""
        if command:
            assert (await env.exec(command, cwd="/app")).returncode == 0
        if solve:
            await env.upload(task.solution_dir, "/solution")
            res = await env.exec("bash /solution/solve.sh", env=dict(task.config.solution.env), timeout=120)
            assert res.returncode == 0, f"solve.sh failed: {res.stdout[-2000:]} {res.stderr[-2000:]}"
        await env.upload(task.tests_dir, "/tests")
        res = await env.exec("bash /tests/test.sh", cwd="/", env=dict(task.config.verifier.env),
                             timeout=task.config.verifier.timeout_sec)
        notes = res.stdout[-2000:] + res.stderr[-2000:]
        reward = await env.exec("cat /logs/verifier/reward.txt")
        return reward.stdout.strip(), notes
    finally:
        await env.stop()


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RISE_CACHE_DIR", str(tmp_path / "cache"))  # Terminal-Bench staging


@pytest.mark.parametrize("name", [t.name for t in _tasks()])
async def test_task_fails_untouched_and_passes_with_its_oracle(name, tmp_path):
    task = next(t for t in _tasks() if t.name == name)
    before, notes = await _reward(task, tmp_path / "untouched", solve=False)
    assert before == "0", f"untouched environment should fail: reward={before!r}\n{notes}"
    after, notes = await _reward(task, tmp_path / "solved", solve=True)
    assert after == "1", f"oracle solution should pass: reward={after!r}\n{notes}"


@pytest.mark.parametrize(("command", "expected"), [
    ("wc -l /app/data.txt > /app/count.txt", "1"),  # what the 1.5B reaches for (retuned 2026-12-05)
    ("wc -l data.txt > count.txt", "1"),
    ("echo 137 > count.txt", "1"),
    ("echo 136 > count.txt", "0"),
    ("echo '137 lines' > count.txt", "0"),
    ("wc -l /app/data.txt > /app/count.txt; echo x >> /app/data.txt", "0"),
])
async def test_count_lines_takes_what_wc_prints_and_nothing_else(command, expected, tmp_path):
    task = next(t for t in load_task_set(STARTER) if t.name == "count-lines")
    reward, notes = await _reward(task, tmp_path / "run", solve=False, command=command)
    assert reward == expected, notes
