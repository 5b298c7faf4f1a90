"""Checks for fix-python-bug: the shipped tests are unchanged and pass, and hidden cases pass too."""
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
pkg = Path("/app/textstats")
if (pkg / "test_stats.py").read_bytes() != (HERE / "test_stats_original.py").read_bytes():
    sys.exit("FAIL: test_stats.py was modified")
run = subprocess.run([sys.executable, "-m", "unittest", "-q"], cwd=pkg, capture_output=True, text=True, timeout=60,
                     check=False)
if run.returncode != 0:
    sys.exit(f"FAIL: the unit tests fail:\n{run.stderr[-2000:]}")

sys.path.insert(0, str(pkg))
import stats

cases = [
    (stats.word_count, ("a\n\nb  c d",), 4),
    (stats.word_count, ("   ",), 0),
    (stats.median, ([10, 2, 8, 4, 6, 12],), 7.0),
    (stats.median, ([7],), 7),
    (stats.median, ([1, 2],), 1.5),
    (stats.mean, ([2, 4],), 3.0),
    (stats.longest_word, ("",), ""),
]
failures = []
for func, args, want in cases:
    try:
        got = func(*args)
    except Exception as exc:  # noqa: BLE001 -- a crash is a failure like a wrong value
        got = exc
    if got != want:
        failures.append(f"{func.__name__}{args!r} returned {got!r}, expected {want!r}")
if failures:
    sys.exit("\n".join("FAIL: " + f for f in failures))
print("PASS")
