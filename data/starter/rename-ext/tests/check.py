"""Checks for rename-ext: every *.txt in /app/notes became *.md with its content; nothing else changed."""
import sys
from pathlib import Path

notes = Path("/app/notes")
expected = {
    "shopping.md": "buy milk\nbuy bread\n",
    "ideas.md": "ideas for the talk\n",
    "meeting notes.md": "attendees: ana, bo\nagenda: budget\n",
    "archive.txt.bak": "old backup\n",
    "keep.log": "2024-01-01 started\n",
}
if not notes.is_dir():
    sys.exit(f"FAIL: {notes} is not a directory")
found = {p.name: p.read_text() for p in notes.iterdir() if p.is_file()}
failures = []
for name in sorted(set(found) | set(expected)):
    if name not in found:
        failures.append(f"missing {notes / name}")
    elif name not in expected:
        failures.append(f"unexpected file {notes / name}")
    elif found[name] != expected[name]:
        failures.append(f"{notes / name} has changed content")
if failures:
    sys.exit("\n".join("FAIL: " + f for f in failures))
print("PASS")
