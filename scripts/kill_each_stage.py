"""Kill ``rise evolve`` with SIGKILL at each of a list of stages, resume it to the end, then audit the experiment.

    python scripts/kill_each_stage.py NAME --stage reference:trial@2 --stage t+90 --stage evolve-research ... \
        [--runs-dir runs] [--rounds 1] [--command round] [-- extra rise evolve (or rise round) options]

``--command round`` kills ``rise round NAME --resume`` instead (a person's candidate, ``-- --candidate SLUG=PATCH
--proposal SLUG=FILE``: checks, screening, evaluation, decision and publication with the live agent model).

Each ``--stage`` is one invocation of ``rise evolve NAME --rounds R --resume``, killed by SIGKILL:
- ``STAGE[@n]``: at a kill point (the n-th time it is passed), right after that unit is booked in the ledger
  (``RISE_TEST_KILL_AT``; the stage names are the ``kill_point`` calls: reference:trial, analysis-finding,
  evolve-research, evolve-proposal, settings-candidate, settings-commit, evolve-implementation, smoke, contracts,
  screening, evaluation:trial, ...);
- ``t+SECONDS``: that many seconds after the invocation started, whatever it is doing (a trial, a role call).

An invocation that ends by itself (the stage was never reached) ends the kill list. Then one more invocation
runs the round to its decision, and ``rise audit`` counts the role calls and trials and fails if anything
finished was done twice. Every invocation's output is kept in ``runs/NAME/kills/`` (numbered on after the
logs already there, so a second series continues the first); a table at the end says where each one died and how
long it ran. The loop itself is ``tests.kill_series`` (the kill tests use it too).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from tests.kill_series import kill_series, table


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
    ap.add_argument("--command", choices=["evolve", "round"], default="evolve")
    args = ap.parse_args(argv)

    rise = [sys.executable, "-m", "rise.cli"]
    rounds = ["--rounds", str(args.rounds)] if args.command == "evolve" else []
    cmd = [*rise, args.command, args.name, *rounds, "--resume", "--runs-dir", args.runs_dir, *extra]
    logs = Path(args.runs_dir) / args.name / "kills"
    series = kill_series(cmd, args.stage, logs, progress=lambda msg: print(msg, flush=True))
    print("\n" + table(series))
    print("\n" + "\n".join(series[-1].log.read_text().splitlines()[-15:]))
    audit = subprocess.run([*rise, "audit", args.name, "--runs-dir", args.runs_dir], check=False)
    return series[-1].returncode if series[-1].returncode != 0 else audit.returncode


if __name__ == "__main__":
    sys.exit(main())
