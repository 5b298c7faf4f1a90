"""Checks for word-frequency: /app/top3.txt lists the three most frequent words with their counts."""
import sys
from pathlib import Path

out = Path("/app/top3.txt")
if not out.is_file():
    sys.exit(f"FAIL: {out} does not exist")
lines = [line.strip() for line in out.read_text().strip().splitlines()]
expected = ["the 19", "river 9", "stone 8"]
if lines != expected:
    sys.exit(f"FAIL: {out} holds {lines!r}, expected {expected!r}")
print("PASS")
