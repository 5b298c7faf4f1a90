"""Checks for log-report: level counts, sorted ERROR lines, the archive, and the removed originals."""
import collections
import json
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
originals = {p.name: p.read_bytes() for p in sorted((HERE / "original_logs").glob("*.log"))}
lines = [line for data in originals.values() for line in data.decode().splitlines() if line.strip()]
failures = []

levels = Path("/app/report/levels.json")
want_levels = dict(collections.Counter(line.split()[1] for line in lines))
try:
    got_levels = json.loads(levels.read_text())
except (OSError, ValueError) as exc:
    got_levels = f"unreadable: {exc}"
if got_levels != want_levels:
    failures.append(f"{levels} holds {got_levels!r}, expected {want_levels!r}")

errors = Path("/app/report/errors.txt")
want_errors = sorted((line for line in lines if line.split()[1] == "ERROR"), key=lambda line: line.split()[0])
got_errors = [line.rstrip() for line in errors.read_text().splitlines() if line.strip()] if errors.is_file() else None
if got_errors != want_errors:
    failures.append(f"{errors} is missing or not the sorted ERROR lines")

archive = Path("/app/archive/logs.tar.gz")
try:
    with tarfile.open(archive, "r:gz") as tar:
        members = {Path(m.name).name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
except (OSError, tarfile.TarError) as exc:
    members = None
    failures.append(f"{archive} is not a readable .tar.gz: {exc}")
if members is not None and members != originals:
    failures.append(f"{archive} holds {sorted(members)}, expected the original {sorted(originals)}")

logs = Path("/app/logs")
if not logs.is_dir():
    failures.append(f"{logs} must still exist")
elif list(logs.glob("*.log")):
    failures.append(f"the .log files are still in {logs}")
if failures:
    sys.exit("\n".join("FAIL: " + f for f in failures))
print("PASS")
