"""The smoke check on the seed (passes) and on broken copies of it (each step fails with the reason)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from validate.smoke import check_handbook, check_import, check_recording, smoke_check, trajectory_problems

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "harness_seed"


def copy_seed(tmp_path: Path) -> Path:
    dest = tmp_path / "harness"
    shutil.copytree(SEED, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def trial_parts_missing() -> str | None:
    if shutil.which("tmux") is None:
        return "tmux is not installed"
    from trials.environments.local import bwrap_available

    if not bwrap_available():
        return "bubblewrap/nsenter are not available for the local sandbox"
    return None


@pytest.mark.tmux
@pytest.mark.sandbox
def test_seed_passes_the_smoke_check(tmp_path):
    if (why := trial_parts_missing()):
        pytest.skip(why)
    result = smoke_check(copy_seed(tmp_path), tmp_path / "out")
    assert result.passed, result.summary()
    trial = result.step("trial")
    assert trial.data["status"] == "passed" and trial.data["spans"] > 10 and trial.data["steps"] >= 2
    saved = json.loads((tmp_path / "out" / "smoke.json").read_text())
    assert saved["passed"] is True and [s["name"] for s in saved["steps"]] == [
        "import", "handbook", "recording", "trial"]
    agent = Path(result.trial_dir) / "agent"
    assert (agent / "trajectory.rich.json").is_file()  # the record the smoke check read
    assert json.loads((agent / "trajectory.json").read_text())["schema_version"] == "ATIF-v1.8"


def test_a_module_that_does_not_import_fails_import_and_handbook(tmp_path):
    harness = copy_seed(tmp_path)
    (harness / "observation.py").write_text((harness / "observation.py").read_text() + "\ndef broken(:\n")
    result = smoke_check(harness, tmp_path / "out")
    assert not result.passed
    imp = result.step("import")
    assert not imp.passed and "SyntaxError" in imp.detail
    assert not result.step("handbook").passed
    assert result.step("trial").detail == "not run: the package does not import"


def test_an_unresolvable_recording_boundary_fails_the_recording_step(tmp_path):
    harness = copy_seed(tmp_path)
    rec = harness / "recording.toml"
    rec.write_text(rec.read_text().replace('target = "loop:Agent.execute_commands"',
                                           'target = "loop:Agent.execute_all_commands"'))
    step = check_recording(harness)
    assert not step.passed and "loop:Agent.execute_all_commands" in step.detail
    assert check_import(harness).passed


def test_handbook_drift_fails_the_handbook_step(tmp_path):
    harness = copy_seed(tmp_path)
    settings = harness / "settings.toml"
    settings.write_text(settings.read_text() + "\n[extra]\nnobody_governs_me = 1\n")
    step = check_handbook(harness)
    assert not step.passed and "extra.nobody_governs_me" in step.detail


def test_a_name_clash_with_an_installed_package_is_caught(tmp_path):
    """A copy named like an installed package would silently import the other one."""
    clash = tmp_path / "harness_seed"
    shutil.copytree(SEED, clash, ignore=shutil.ignore_patterns("__pycache__"))
    (clash / "marker.py").write_text("X = 1\n")
    step = check_import(clash)
    # either our copy is the one imported (fine), or the clash is reported; never a silent pass on the other
    assert step.passed == ("harness_seed.marker" in step.data.get("modules", [])), step.detail


def test_not_a_package(tmp_path):
    result = smoke_check(tmp_path, tmp_path / "out")
    assert not result.passed and "no main.py" in result.steps[0].detail


def test_trajectory_problems():
    good = {
        "trajectory": {"schema_version": "ATIF-v1.4", "trial_id": "t", "steps": [
            {"step_id": 1, "source": "user"}, {"step_id": 2, "source": "agent", "trial_id": "t", "episode": 0}]},
        "spans": [{"name": "rise.trial", "episode": None, "attributes": {"rise.trial_id": "t"}},
                  {"name": "x", "episode": 0, "attributes": {"rise.trial_id": "t"}}],
    }
    assert trajectory_problems(good) == []
    assert "no ATIF schema_version" in trajectory_problems({"trajectory": {}, "spans": []})[0]
    bad = json.loads(json.dumps(good))
    bad["trajectory"]["steps"][1]["episode"] = None
    bad["spans"][1]["episode"] = 7
    bad["spans"][1]["attributes"]["rise.trial_id"] = "other"
    found = " | ".join(trajectory_problems(bad))
    assert "lacks the trial id" in found and "another trial id" in found
    bad["spans"] = [s for s in bad["spans"] if s["name"] != "rise.trial"]
    assert "no rise.trial root span" in " | ".join(trajectory_problems(bad))
