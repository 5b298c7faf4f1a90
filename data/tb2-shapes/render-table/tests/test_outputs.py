import json
from pathlib import Path

from tabulate import tabulate


def test_table():
    rows = json.loads(Path("/app/rows.json").read_text())
    expected = tabulate(rows, headers="keys", tablefmt="github")
    assert Path("/app/table.txt").read_text().strip() == expected.strip()
