"""What starting a process costs in CPU before it does anything: the ``rise`` command and a harness's agent.

Every ``rise`` invocation (each kill of a kill test, each step a script drives) and every trial's agent process
starts a Python interpreter and imports. On a 2-core machine that runs tests or trials side by side, this CPU is
taken from everything else (issue 42). Measured, as CPU seconds (user + system) of the child process, the median
of ``--repeat`` runs:

- ``python -c pass``: the interpreter alone;
- ``rise eval --help`` as the shell runs it (``rise.cli.main``: only the eval commands' module is imported);
- every command loaded (``from rise.cli import app``, what ``rise --help`` and the tests' CliRunner load);
- the seed harness's agent start: what its launcher preloads (``trials.runner.PRELOAD["monitor.host"]``);
  the same with ``openai`` added, which the model client imported until it posted with httpx itself; and
  ``openai`` alone.

Prints each, the ratio of the lazy command's start to the all-commands start, and of the agent's preload now to
the preload with ``openai``.

    python benchmarks/start_cost.py [--repeat 5] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys

from _support import REPO, quick_flag


def cpu_of(argv: list[str]) -> float:
    """CPU seconds (user + system) of one run of ``argv`` in the repository, its output discarded."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                   env={**os.environ, "COLUMNS": "120"})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs of each, the median is printed (default 5)")
    quick_flag(parser)
    args = parser.parse_args()
    repeat = 1 if args.quick else max(args.repeat, 1)
    from trials.runner import PRELOAD

    py = sys.executable
    preload = ", ".join(PRELOAD["monitor.host"])
    cases = {
        "python -c pass": [py, "-c", "pass"],
        "rise eval --help (lazy)": [py, "-m", "rise", "eval", "--help"],
        "every command loaded": [py, "-c", "from rise.cli import app"],
        "seed agent preload": [py, "-c", f"import {preload}"],
        "seed preload with openai": [py, "-c", f"import {preload}, openai"],
        "openai alone": [py, "-c", "import openai"],
    }
    cpu_of(cases["python -c pass"])  # the first run warms the disk cache
    figures = {name: statistics.median(cpu_of(argv) for _ in range(repeat)) for name, argv in cases.items()}
    for name, sec in figures.items():
        print(f"{name:28s} {sec:6.2f} s CPU")
    ratio = figures["rise eval --help (lazy)"] / figures["every command loaded"]
    agent = figures["seed agent preload"] / figures["seed preload with openai"]
    print(f"lazy command start / every command loaded: {ratio:.2f}")
    print(f"seed agent preload / the same with openai: {agent:.2f}")
    print(json.dumps({"cpu_sec": figures, "lazy_over_all": ratio, "agent_over_with_openai": agent,
                      "repeat": repeat}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
