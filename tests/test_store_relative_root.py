"""An experiment opened by a relative path (``rise evolve demo`` runs in the project folder, the experiment is
``runs/demo``) keeps its worktrees inside it: git runs in the harness repository, where a relative path would
land elsewhere (found by the first real ``scripts/run.sh``: runs/demo/harness/runs/demo/worktrees/v0)."""

from __future__ import annotations

from pathlib import Path

from evolve.experiment.store import open_experiment
from evolve.round.controller import Controller
from tests.test_controller_support import make_experiment


def test_worktrees_of_a_relatively_opened_experiment_land_in_it(tmp_path: Path, monkeypatch) -> None:
    make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1", name="demo")
    monkeypatch.chdir(tmp_path)
    exp = open_experiment("demo", runs_dir=Path("runs"))
    assert exp.root == tmp_path / "runs" / "demo"
    v0 = Controller(exp).version_dir("v0")
    assert (tmp_path / "runs" / "demo" / "worktrees" / "v0" / "harness" / "main.py").is_file()
    assert v0.is_absolute() and not (tmp_path / "runs" / "demo" / "harness" / "runs").exists()
    _, wt = exp.create_candidate(1, "x")
    assert wt == tmp_path / "runs" / "demo" / "worktrees" / "r01-x" / "harness" and (wt / "main.py").is_file()
