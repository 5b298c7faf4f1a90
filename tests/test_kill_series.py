"""tests.kill_series (the loop of scripts/kill_each_stage.py and of the kill tests) on a small resumable
program: a counter that books each step in a file and passes a kill point after each one."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.kill_series import kill_series, table

PROGRAM = """
import sys, time
from pathlib import Path
from validate.evaluate import kill_point
book = Path(sys.argv[1])
done = len(book.read_text().splitlines()) if book.exists() else 0
for step in range(done, 5):
    time.sleep(float(sys.argv[2]))
    with book.open("a") as fh:
        fh.write(f"step {step}\\n")
    kill_point("step")
print("finished", done)
"""


def _cmd(tmp_path: Path, pause: float) -> list[str]:
    return [sys.executable, "-c", PROGRAM, str(tmp_path / "book.txt"), str(pause)]


def test_each_kill_lands_and_the_last_run_resumes_to_the_end(tmp_path):
    series = kill_series(_cmd(tmp_path, 0), ["step@2", "step"], tmp_path / "logs", timeout=60)
    assert [(inv.stage, inv.killed) for inv in series] == [("step@2", True), ("step", True), ("", False)]
    assert series[-1].returncode == 0
    # killed right after step 1 was booked, then after step 2; the last run started at step 3
    assert (tmp_path / "book.txt").read_text().splitlines() == [f"step {n}" for n in range(5)]
    assert "finished 3" in series[-1].log.read_text()
    assert [p.name for p in sorted((tmp_path / "logs").glob("*.log"))] == ["01-step@2.log", "02-step.log",
                                                                           "03-final.log"]
    assert "(none: to the end)" in table(series) and "step@2" in table(series)


def test_a_timed_kill_stops_whatever_runs_and_a_second_series_numbers_on(tmp_path):
    kill_series(_cmd(tmp_path, 0), ["step@1"], tmp_path / "logs", timeout=60)
    (tmp_path / "book.txt").unlink()
    series = kill_series(_cmd(tmp_path, 2), ["t+1"], tmp_path / "logs", timeout=120)
    assert series[0].killed and series[0].seconds < 10  # five steps of 2 s: it was still running at t+1
    assert series[1].returncode == 0
    assert (tmp_path / "book.txt").read_text().splitlines() == [f"step {n}" for n in range(5)]
    assert [p.name for p in sorted((tmp_path / "logs").glob("*.log"))][2:] == ["03-t1.log", "04-final.log"]
    assert [inv.number for inv in series] == [3, 4] and [inv.log.name[:2] for inv in series] == ["03", "04"]
    assert [ln.split()[0] for ln in table(series).splitlines()[1:]] == ["3", "4"]  # the table numbers on too


def test_a_stage_never_reached_ends_the_series_with_that_run(tmp_path):
    series = kill_series(_cmd(tmp_path, 0), ["step@2", "no-such-stage"], tmp_path / "logs", timeout=60)
    assert [(inv.stage, inv.killed) for inv in series] == [("step@2", True), ("no-such-stage", False)]
    assert series[-1].returncode == 0 and len((tmp_path / "book.txt").read_text().splitlines()) == 5
