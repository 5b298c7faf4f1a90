"""Checks for todo-cli: scripted sessions against /app/todo.py, each with a fresh TODO_FILE."""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

PROG = Path("/app/todo.py")
USAGE = "usage: todo.py COMMAND [ARGS...]"
# Each session: a list of (argv, stdout lines, stderr, exit status), run in order against one TODO_FILE.
SESSIONS = {
    "basics": [
        (["list"], ["no tasks"], "", 0),
        (["add", "buy", "milk"], ["added 1: buy milk"], "", 0),
        (["add", "write", "report"], ["added 2: write report"], "", 0),
        (["add", "call  mom"], ["added 3: call  mom"], "", 0),
        (["list"], ["[ ] 1 buy milk", "[ ] 2 write report", "[ ] 3 call  mom"], "", 0),
        (["done", "2"], ["completed 2"], "", 0),
        (["list"], ["[ ] 1 buy milk", "[x] 2 write report", "[ ] 3 call  mom"], "", 0),
        (["list", "--pending"], ["[ ] 1 buy milk", "[ ] 3 call  mom"], "", 0),
        (["count"], ["3 total, 1 done, 2 pending"], "", 0),
    ],
    "ids-never-reused": [
        (["add", "a"], ["added 1: a"], "", 0),
        (["add", "b"], ["added 2: b"], "", 0),
        (["remove", "2"], ["removed 2"], "", 0),
        (["add", "c"], ["added 3: c"], "", 0),
        (["remove", "1"], ["removed 1"], "", 0),
        (["remove", "3"], ["removed 3"], "", 0),
        (["list"], ["no tasks"], "", 0),
        (["add", "d"], ["added 4: d"], "", 0),
        (["list"], ["[ ] 4 d"], "", 0),
    ],
    "clear-done": [
        (["add", "x"], ["added 1: x"], "", 0),
        (["add", "y"], ["added 2: y"], "", 0),
        (["add", "z"], ["added 3: z"], "", 0),
        (["done", "1"], ["completed 1"], "", 0),
        (["done", "3"], ["completed 3"], "", 0),
        (["clear-done"], ["cleared 2"], "", 0),
        (["list"], ["[ ] 2 y"], "", 0),
        (["clear-done"], ["cleared 0"], "", 0),
        (["done", "2"], ["completed 2"], "", 0),
        (["list", "--pending"], ["no tasks"], "", 0),
        (["count"], ["1 total, 1 done, 0 pending"], "", 0),
    ],
    "errors": [
        (["add", "only"], ["added 1: only"], "", 0),
        (["done", "9"], [], "error: no task 9", 1),
        (["remove", "5"], [], "error: no task 5", 1),
        (["done", "one"], [], USAGE, 2),
        (["done"], [], USAGE, 2),
        (["add"], [], USAGE, 2),
        (["frobnicate"], [], USAGE, 2),
        ([], [], USAGE, 2),
        (["list"], ["[ ] 1 only"], "", 0),
        (["count"], ["1 total, 0 done, 1 pending"], "", 0),
    ],
}


def run_session(name, steps, failures):
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, TODO_FILE=str(Path(tmp, "sub dir", "todo.json")))
        Path(tmp, "sub dir").mkdir()
        for argv, out, err, status in steps:
            run = subprocess.run([sys.executable, str(PROG), *argv], env=env, capture_output=True, text=True,
                                 timeout=20, check=False)
            got = (run.stdout.rstrip("\n").split("\n") if run.stdout.strip() else [], run.stderr.strip(),
                   run.returncode)
            if got != (out, err, status):
                failures.append(f"session {name}: todo.py {' '.join(argv)} gave (stdout, stderr, status) "
                                f"{got!r}, expected {(out, err, status)!r}")
                return


failures = []
if not PROG.is_file():
    sys.exit(f"FAIL: {PROG} does not exist")
for name, steps in SESSIONS.items():
    run_session(name, steps, failures)
if failures:
    sys.exit("\n".join("FAIL: " + f for f in failures))
print("PASS")
