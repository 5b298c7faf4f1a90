"""Checks for find-large-files: /app/large_files.txt lists the files > 1024 bytes under /app/data, sorted."""
import sys
from pathlib import Path

out = Path("/app/large_files.txt")
if not out.is_file():
    sys.exit(f"FAIL: {out} does not exist")
lines = [line.rstrip("\r") for line in out.read_text().splitlines() if line.strip()]
lines = [line.removeprefix("./") for line in lines]
expected = sorted(
    [".cache/blob", "big report.csv", "images/photo.dat", "just-over.bin", "logs/app.log", "logs/old/app.2.log"]
)
if lines != expected:
    sys.exit(f"FAIL: {out} holds {lines!r}\nexpected {expected!r}")
print("PASS")
