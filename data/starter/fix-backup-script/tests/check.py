"""Checks for fix-backup-script: /app/backup.sh was run, and it works on fresh files with awkward names."""
import subprocess
import sys
import tempfile
from pathlib import Path

failures = []
backup = Path("/app/backup")
for name, content in {"web server.conf": "listen 80\n", "db.conf": "max_connections = 50\n",
                      "logging.conf": "level = warn\n"}.items():
    copy = backup / (name + ".bak")
    if not copy.is_file() or copy.read_text() != content:
        failures.append(f"{copy} is missing or wrong (was the fixed script run?)")
if (backup / "notes.txt.bak").exists():
    failures.append("notes.txt is not a .conf file but was backed up")

# Run the script again on new files it has never seen.
with tempfile.TemporaryDirectory() as tmp:
    src, dst = Path(tmp, "my configs"), Path(tmp, "the backup")
    src.mkdir()
    files = {"a b  c.conf": "one\n", "-dash.conf": "two\n", "plain.conf": "three\n", "skip.cfg": "no\n"}
    for name, content in files.items():
        (src / name).write_text(content)
    run = subprocess.run(["bash", "/app/backup.sh"], env={"PATH": "/usr/local/bin:/usr/bin:/bin",
                         "CONFIG_DIR": str(src), "BACKUP_DIR": str(dst)}, capture_output=True, text=True,
                         timeout=30, check=False)
    if run.stdout.strip().splitlines()[-1:] != ["backed up 3 files"]:
        failures.append(f"expected the last output line 'backed up 3 files', got {run.stdout!r} {run.stderr!r}")
    got = {p.name: p.read_text() for p in dst.iterdir()} if dst.is_dir() else {}
    want = {name + ".bak": content for name, content in files.items() if name.endswith(".conf")}
    if got != want:
        failures.append(f"on fresh files the backup holds {sorted(got)}, expected {sorted(want)}")
if failures:
    sys.exit("\n".join("FAIL: " + f for f in failures))
print("PASS")
