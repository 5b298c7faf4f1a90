"""Checks for config-edit: /app/app.conf has the two new values and the appended line, nothing else changed."""
import sys
from pathlib import Path

path = Path("/app/app.conf")
if not path.is_file():
    sys.exit(f"FAIL: {path} does not exist")
lines = path.read_text().rstrip("\n").split("\n")
expected = [
    "# application settings",
    "host = 127.0.0.1",
    "port = 8080",
    "",
    "# set to false in production",
    "debug = false",
    "workers = 2",
    "log_level = info",
]
if [line.rstrip() for line in lines] != expected:
    sys.exit(f"FAIL: {path} holds {lines!r}\nexpected {expected!r}")
print("PASS")
