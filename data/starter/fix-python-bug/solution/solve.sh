#!/bin/bash
cd /app/textstats
python3 - <<'PY'
from pathlib import Path

path = Path("stats.py")
src = path.read_text()
src = src.replace('return len(text.split(" "))', "return len(text.split())")
src = src.replace(
    "    if len(ordered) % 2 == 0:\n        return ordered[mid]\n",
    "    if len(ordered) % 2 == 0:\n        return (ordered[mid - 1] + ordered[mid]) / 2\n",
)
path.write_text(src)
PY
python3 -m unittest -q
