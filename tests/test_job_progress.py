"""A grid's progress without a terminal: one plain line per finished trial and a heartbeat (issue 10)."""

from __future__ import annotations

import asyncio
import io
import re

from rich.console import Console

from trials.grid import run_job
from trials.progress import GridProgress

from .test_job_resume import Factory, _setup


def _piped() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=False, width=80, highlight=False, soft_wrap=True), buf


def test_a_piped_grid_prints_a_line_per_finished_trial(tmp_path):
    tasks, config, _ = _setup(tmp_path, settings={"modes": {"b": "wrong"}})
    console, buf = _piped()
    res = asyncio.run(run_job(config, tmp_path / "job", tasks=tasks, env_factory=Factory(fail_once={"c__r1"}),
                              console=console))
    lines = buf.getvalue().splitlines()
    assert not res.complete  # c__r1 is ⊥ (its sandbox failed to start)
    done = [ln for ln in lines if re.match(r"\[job1\] \d/6 \w+__r\d: ", ln)]
    assert len(done) == 6, lines
    assert any("b__r1: failed (task_failure)" in ln for ln in done)
    assert any("c__r1: ⊥ (image_build)" in ln for ln in done) and any("a__r2: passed" in ln for ln in done)
    assert "| pass 3 fail 2 ⊥ 1 |" in done[-1]
    assert lines[0] == "[job1] 0/6 trials already done; 6 to run" and lines[-1].startswith("[job1] finished 6/6")
    assert "\x1b[" not in buf.getvalue()  # no terminal control codes in a log


async def test_the_heartbeat_names_the_trials_in_flight():
    console, buf = _piped()
    shown = GridProgress("g", total=2, done=0, console=console, heartbeat_sec=0.01)
    with shown.shown(""):
        shown.started_trial("slow-task__r1")
        for _ in range(1000):  # wait for the first beat, whatever the machine's load
            if "running: slow-task__r1" in buf.getvalue():
                break
            await asyncio.sleep(0.01)
    assert "[g] 0/2 done, elapsed 0m00s; running: slow-task__r1 (0m00s)" in buf.getvalue()
