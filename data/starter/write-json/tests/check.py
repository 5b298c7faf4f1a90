"""Checks for write-json: /app/config.json is {"name": "demo", "version": 2, "enabled": true}."""
import json
import sys
from pathlib import Path

path = Path("/app/config.json")
if not path.is_file():
    sys.exit(f"FAIL: {path} does not exist")
try:
    data = json.loads(path.read_text())
except ValueError as exc:
    sys.exit(f"FAIL: {path} is not valid JSON: {exc}")
expected = {"name": "demo", "version": 2, "enabled": True}
# bool is a subclass of int in Python: compare types too, so version=true or enabled=1 fail.
if data != expected or {k: type(v) for k, v in data.items()} != {k: type(v) for k, v in expected.items()}:
    sys.exit(f"FAIL: {path} holds {data!r}, expected {expected!r}")
print("PASS")
