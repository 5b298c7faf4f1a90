"""The checks of sum-column (pytest, as Terminal-Bench 2 verifiers are written)."""

from pathlib import Path


def test_total_exists():
    assert Path("/app/total.txt").is_file()


def test_total_is_the_sum():
    assert Path("/app/total.txt").read_text().strip() == "512"
