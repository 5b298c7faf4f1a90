#!/bin/bash
# Only bash, coreutils, grep and python3 are assumed in the sandbox (no awk, tar or gzip needed).
set -e
mkdir -p /app/report /app/archive
python3 - <<'PY'
import collections
import json
import tarfile
from pathlib import Path

logs = sorted(Path("/app/logs").glob("*.log"))
lines = [line for p in logs for line in p.read_text().splitlines() if line.strip()]
counts = collections.Counter(line.split()[1] for line in lines)
Path("/app/report/levels.json").write_text(json.dumps(dict(sorted(counts.items()))) + "\n")
errors = sorted((line for line in lines if line.split()[1] == "ERROR"), key=lambda line: line.split()[0])
Path("/app/report/errors.txt").write_text("".join(line + "\n" for line in errors))
with tarfile.open("/app/archive/logs.tar.gz", "w:gz") as tar:
    for p in logs:
        tar.add(p, arcname=p.name)
PY
rm /app/logs/*.log
