#!/bin/bash
python3 - <<'PY'
import collections
import re

text = open("/app/input.txt").read().lower()
counts = collections.Counter(re.findall(r"[a-z]+", text))
with open("/app/top3.txt", "w") as out:
    for word, n in counts.most_common(3):
        out.write(f"{word} {n}\n")
PY
