"""Kill ``rise evolve`` with SIGKILL at each of a list of stages, resume it to the end, then audit the experiment.

    python scripts/kill_each_stage.py NAME --stage reference:trial@2 --stage t+90 --stage evolve-research ... \
        [--runs-dir runs] [--rounds 1] [-- extra rise evolve options]

Each ``--stage`` is one invocation of ``rise evolve NAME --rounds R --resume``, killed by SIGKILL:
- ``STAGE[@n]``: at a kill point (the n-th time it is passed), right after that unit is booked in the ledger
  (``RISE_TEST_KILL_AT``; the stage names are the ``kill_point`` calls: reference:trial, analysis-finding,
  evolve-research, evolve-proposal, evolve-implementation, smoke, contracts, screening, evaluation:trial, ...);
- ``t+SECONDS``: that many seconds after the invocation started, whatever it is doing (a trial, a role call).

An invocation that ends by itself (the stage was never reached) ends the kill list. Then one more invocation
runs the round to its decision, and ``rise audit`` counts the role calls and trials and fails if anything
finished was done twice. Every invocation's output is kept in ``runs/NAME/kills/`` (numbered on after the
logs already there, so a second series continues the first); a table at the end says where each one died and how
long it ran.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def _invoke(cmd: list[str], env: dict[str, str], log: Path, after: float | None) -> tuple[int, float]:
    started = time.monotonic()
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT)
        try:
            proc.wait(timeout=after)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)  # the process only: its trials' tmux and sandboxes are left orphaned,
            proc.wait()                        # as after a real kill -9, for the resume to clean up
    return proc.returncode, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name")
    ap.add_argument("--stage", action="append", default=[], help="STAGE[@n] or t+SECONDS; repeat, in order")
    ap.add_argument("--runs-dir", default="runs")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args(argv)

    rise = [sys.executable, "-m", "evolve.cli"]
    cmd = [*rise, "evolve", args.name, "--rounds", str(args.rounds), "--resume", "--runs-dir", args.runs_dir, *extra]
    logs = Path(args.runs_dir) / args.name / "kills"
    logs.mkdir(parents=True, exist_ok=True)
    base_env = {k: v for k, v in os.environ.items() if k != "RISE_TEST_KILL_AT"}
    rows = []
    first = len(list(logs.glob("*.log"))) + 1  # a second series on the same experiment numbers on
    for i, stage in enumerate(args.stage, first):
        env, after = dict(base_env), None
        if stage.startswith("t+"):
            after = float(stage[2:])
        else:
            env["RISE_TEST_KILL_AT"] = stage
        log = logs / f"{i:02d}-{stage.replace(':', '_').replace('+', '')}.log"
        print(f"[{time.strftime('%H:%M:%S')}] invocation {i}: kill at {stage} (output: {log})", flush=True)
        rc, secs = _invoke(cmd, env, log, after)
        rows.append((stage, rc, secs))
        print(f"[{time.strftime('%H:%M:%S')}]   exit {rc} after {secs / 60:.1f} min", flush=True)
        if rc != -signal.SIGKILL:
            print(f"  it ended by itself (exit {rc}) before reaching {stage}: no more kills", flush=True)
            break
    else:
        log = logs / f"{first + len(args.stage):02d}-final.log"
        print(f"[{time.strftime('%H:%M:%S')}] last invocation, to the decision (output: {log})", flush=True)
        rc, secs = _invoke(cmd, base_env, log, None)
        rows.append(("(none: to the end)", rc, secs))
    print("\ninvocation  killed at                 exit  minutes")
    for i, (stage, rc, secs) in enumerate(rows, first):
        print(f"{i:>10}  {stage:<24} {rc:>5}  {secs / 60:7.1f}")
    print("\n" + "\n".join(log.read_text().splitlines()[-15:]))
    audit = subprocess.run([*rise, "audit", args.name, "--runs-dir", args.runs_dir], env=base_env, check=False)
    return rows[-1][1] if rows[-1][1] != 0 else audit.returncode


if __name__ == "__main__":
    sys.exit(main())
