"""Checks for hello-file: /app/hello.txt holds exactly "Hello, world!" (one trailing newline allowed)."""
import sys
from pathlib import Path

path = Path("/app/hello.txt")
if not path.is_file():
    sys.exit(f"FAIL: {path} does not exist")
text = path.read_text()
if text not in ("Hello, world!", "Hello, world!\n"):
    sys.exit(f"FAIL: {path} holds {text!r}, expected 'Hello, world!'")
print("PASS")
