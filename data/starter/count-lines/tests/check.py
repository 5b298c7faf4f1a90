"""Checks for count-lines: /app/count.txt holds 137 (alone, or followed by the file name as `wc -l FILE` prints
it) and /app/data.txt is untouched."""
import hashlib
import sys
from pathlib import Path

DATA_SHA256 = "f2b487b410afd96486de3b0788d9fa5b95bbc30299b749e16c0da4b24b829721"
data, out = Path("/app/data.txt"), Path("/app/count.txt")
if not data.is_file() or hashlib.sha256(data.read_bytes()).hexdigest() != DATA_SHA256:
    sys.exit(f"FAIL: {data} is missing or was changed")
if not out.is_file():
    sys.exit(f"FAIL: {out} does not exist")
fields = out.read_text().split()
if not fields or fields[0] != "137" or fields[1:] not in ([], ["/app/data.txt"], ["data.txt"]):
    sys.exit(f"FAIL: {out} holds {out.read_text()!r}, expected 137 (optionally followed by the file name)")
print("PASS")
