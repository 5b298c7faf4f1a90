"""Issue 15 item 15: the round controller and the report stay split along their seams (house rule: most files
100-400 lines, one purpose each). A file that grows back past the limit fails here, naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 400

# the file, and the seams that were split out of it (each must still exist, so the split cannot be undone quietly)
SPLIT = {
    "evolve/round/controller.py": ["evolve/round/candidates.py", "evolve/round/checks.py", "evolve/experiment/budget.py", "evolve/round/model.py"],
    "evolve/views/report.py": ["evolve/views/plots.py", "evolve/experiment/trial_scan.py"],
}


@pytest.mark.parametrize("path", sorted(SPLIT))
def test_split_files_stay_within_the_limit(path):
    lines = len((ROOT / path).read_text().splitlines())
    assert lines <= LIMIT, f"{path} has {lines} lines (limit {LIMIT}): split it along a seam"
    missing = [p for p in SPLIT[path] if not (ROOT / p).is_file()]
    assert not missing, f"{path}: the modules split out of it are gone: {missing}"
