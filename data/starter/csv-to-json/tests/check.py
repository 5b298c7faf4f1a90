"""Checks for csv-to-json: /app/people.json is the rows of people.csv with integer ages."""
import json
import sys
from pathlib import Path

out = Path("/app/people.json")
if not out.is_file():
    sys.exit(f"FAIL: {out} does not exist")
try:
    data = json.loads(out.read_text())
except ValueError as exc:
    sys.exit(f"FAIL: {out} is not valid JSON: {exc}")
expected = [
    {"name": "Ana Lima", "age": 34, "city": "Lisbon"},
    {"name": "Bo Chen", "age": 28, "city": "Portland, OR"},
    {"name": "Chidi Okafor", "age": 41, "city": "Lagos"},
    {"name": "Dana Weiss", "age": 19, "city": "Berlin"},
    {"name": "Eli Novak", "age": 57, "city": "Brno, CZ"},
]
if data != expected:
    sys.exit(f"FAIL: {out} holds {data!r}\nexpected {expected!r}")
if not all(type(row["age"]) is int for row in data):
    sys.exit("FAIL: every age must be a JSON integer")
print("PASS")
