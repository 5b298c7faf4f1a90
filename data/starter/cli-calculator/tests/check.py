"""Checks for cli-calculator: /app/calc.py's output, errors and exit statuses."""
import subprocess
import sys
from pathlib import Path

prog = Path("/app/calc.py")
if not prog.is_file():
    sys.exit(f"FAIL: {prog} does not exist")
cases = [  # argv, stdout, stderr, exit status
    (["add", "2", "3"], "5", "", 0),
    (["sub", "2", "10"], "-8", "", 0),
    (["mul", "-6", "7"], "-42", "", 0),
    (["div", "7", "2"], "3.50", "", 0),
    (["div", "1", "3"], "0.33", "", 0),
    (["div", "-9", "4"], "-2.25", "", 0),
    (["div", "5", "0"], "", "error: division by zero", 2),
    (["pow", "2", "3"], "", "error: unknown operation", 2),
]
failures = []
for argv, out, err, status in cases:
    run = subprocess.run([sys.executable, str(prog), *argv], capture_output=True, text=True, timeout=20,
                         check=False)
    got = (run.stdout.strip(), run.stderr.strip(), run.returncode)
    if got != (out, err, status):
        failures.append(f"calc.py {' '.join(argv)}: got (stdout, stderr, status) {got!r}, expected {(out, err, status)!r}")
if failures:
    sys.exit("\n".join("FAIL: " + f for f in failures))
print("PASS")
