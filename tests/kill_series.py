"""Kill a resumable command with SIGKILL at each of a list of stages, then run it once more to its end: the
loop behind ``scripts/kill_each_stage.py`` (``rise evolve`` on a real experiment) and the kill tests (the test
driver of tests/evolve_driver.py).

A stage is either a kill point, ``STAGE[@n]`` (``RISE_TEST_KILL_AT``: the n-th time the process passes
``validate.evaluate.kill_point(STAGE)``, right after that unit is booked), or ``t+SECONDS``: a kill that many
seconds after the invocation started, whatever it is doing. Only the process itself is killed: its children
(trials' tmux servers and sandboxes) are left orphaned, as after a real ``kill -9``, for the resume to clean up."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from validate.evaluate import KILL_ENV


@dataclass
class Invocation:
    stage: str  # the stage it was to die at; "" for the last invocation, run to its end
    returncode: int
    seconds: float
    log: Path
    number: int = 0  # its place in the numbered logs of its series (kill_series sets it)

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL


def invoke(cmd: list[str], env: dict[str, str], log: Path, after: float | None = None,
           cwd: Path | None = None, timeout: float | None = None) -> Invocation:
    """Run ``cmd`` with its output in ``log``; SIGKILL it after ``after`` seconds (None: let it end, failing past
    ``timeout``)."""
    started = time.monotonic()
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT)
        try:
            proc.wait(timeout=after if after is not None else timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            if after is None:
                raise TimeoutError(f"{' '.join(cmd)} still ran after {timeout:g} s (output: {log})") from None
    return Invocation("", proc.returncode, time.monotonic() - started, log)


def kill_series(cmd: list[str], stages: list[str], logs: Path, env: dict[str, str] | None = None,
                cwd: Path | None = None, progress=None, timeout: float | None = None) -> list[Invocation]:
    """One invocation of ``cmd`` per stage, each killed there, then one run to the end. An invocation that ends
    by itself (its stage was never reached) ends the series early: its run was the last one. Logs are numbered
    on after those already in ``logs``, so a second series on the same experiment continues the first."""
    logs.mkdir(parents=True, exist_ok=True)
    base = {k: v for k, v in (os.environ if env is None else env).items() if k != KILL_ENV}
    say = progress or (lambda _msg: None)
    first = len(list(logs.glob("*.log"))) + 1
    done: list[Invocation] = []
    for i, stage in enumerate(stages, first):
        run_env, after = dict(base), None
        if stage.startswith("t+"):
            after = float(stage[2:])
        else:
            run_env[KILL_ENV] = stage
        log = logs / f"{i:02d}-{stage.replace(':', '_').replace('+', '')}.log"
        say(f"[{time.strftime('%H:%M:%S')}] invocation {i}: kill at {stage} (output: {log})")
        inv = invoke(cmd, run_env, log, after, cwd, timeout)
        inv.stage, inv.number = stage, i
        done.append(inv)
        say(f"[{time.strftime('%H:%M:%S')}]   exit {inv.returncode} after {inv.seconds / 60:.1f} min")
        if not inv.killed:
            say(f"  it ended by itself (exit {inv.returncode}) before reaching {stage}: no more kills")
            return done
    log = logs / f"{first + len(stages):02d}-final.log"
    say(f"[{time.strftime('%H:%M:%S')}] last invocation, to the end (output: {log})")
    done.append(invoke(cmd, base, log, None, cwd, timeout))
    done[-1].number = first + len(stages)
    return done


def table(series: list[Invocation]) -> str:
    """Where each invocation died and how long it ran, by its number in the series' logs."""
    rows = ["invocation  killed at                 exit  minutes"]
    for inv in series:
        stage = inv.stage or "(none: to the end)"
        rows.append(f"{inv.number:>10}  {stage:<24} {inv.returncode:>5}  {inv.seconds / 60:7.1f}")
    return "\n".join(rows)
