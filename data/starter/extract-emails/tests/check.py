"""Checks for extract-emails: the distinct lowercased addresses of /app/server.log, sorted."""
import sys
from pathlib import Path

out = Path("/app/emails.txt")
if not out.is_file():
    sys.exit(f"FAIL: {out} does not exist")
lines = [line.strip() for line in out.read_text().splitlines() if line.strip()]
expected = sorted([
    "alice@example.com", "bob.smith@mail.example.org", "carol+news@example.net", "ops-team@corp.example.com",
    "dave_99@example.io", "mailer-daemon@example.com", "erin@example.co.uk",
])
if lines != expected:
    missing = sorted(set(expected) - set(lines))
    extra = sorted(set(lines) - set(expected))
    sys.exit(f"FAIL: {out} is wrong (missing {missing}, unexpected {extra}, order/duplicates matter)")
print("PASS")
