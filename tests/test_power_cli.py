"""``rise init`` and ``rise evolve`` state a grid's power, and ``rise evolve`` refuses a grid that cannot adopt a
perfect candidate (issue 28 item 1), on issue 28's grid (scripts/demo-experiment.toml as at 4296d82) and on
today's."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from evolve.experiment.config import ExperimentConfig
from evolve.experiment.store import init_experiment
from evolve.round.power import experiment_power, preflight
from rise.cli import app
from tests.test_report_support import F, P, _evaluation, write_job

REPO = Path(__file__).resolve().parents[1]
OLD_DEMO = REPO / "tests" / "data" / "power" / "demo-experiment-4296d82.toml"
NEW_DEMO = REPO / "scripts" / "demo-experiment.toml"
MORNING = ["--prior", "count-lines=1/2", "--prior", "hello-file=1/2", "--prior", "project-skeleton=1/2",
           "--prior", "write-json=2/2"]


def _one_line(output: str) -> str:
    (line,) = [x for x in output.splitlines() if x.startswith("power, ")]  # "power, the prior's (M = ...)"
    return line


def test_init_on_the_old_demo_grid_says_a_perfect_candidate_cannot_be_adopted_and_evolve_refuses(tmp_path):
    runs = tmp_path / "runs"
    res = CliRunner().invoke(app, ["init", "demo", "--config", str(OLD_DEMO), "--runs-dir", str(runs), *MORNING])
    assert res.exit_code == 0, res.output
    line = _one_line(res.output)
    assert "4 tasks × r=2" in line and "write-json=1" in line
    # 22/64 by hand in tests/test_power.py
    assert "a perfect candidate is adopted 34% of the time (CANNOT be adopted reliably" in line
    assert "raise r to 4 or the development tasks to 7" in line
    res = CliRunner().invoke(app, ["evolve", "demo", "--runs-dir", str(runs), "--no-progress"])
    assert res.exit_code == 4, res.output
    assert "refusing to evolve demo" in res.output and "raise r to 4" in res.output and "--force" in res.output
    assert (runs / "demo" / "ledger.jsonl").read_text() == ""  # refused before any round started


def test_without_a_prior_the_old_grid_is_refused_too(tmp_path):
    res = CliRunner().invoke(app, ["init", "demo", "--config", str(OLD_DEMO), "--runs-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    line = _one_line(res.output)
    assert "prior: every task 0.5, no reference corpus yet" in line and "CANNOT" in line


def test_the_booked_reference_corpus_of_that_morning_gives_p_0125(tmp_path):
    """With the morning's corpus booked in the ledger, the decision's own counts are used: p = (1/2)^3."""
    cfg = ExperimentConfig.load(OLD_DEMO)
    cfg.adoption.baseline = "reference"  # that morning's experiment decided against its corpus (before issue 38)
    exp = init_experiment("demo", cfg, runs_dir=tmp_path)
    morning = {"count-lines": [P, F], "hello-file": [F, P], "project-skeleton": [P, F], "write-json": [P, P]}
    job = write_job(exp.root / "versions" / "v0" / "reference", morning)
    commit = exp.commit_of("v0")
    _evaluation(exp.ledger, f"{commit}:reference", commit, job, exp.root, "reference")
    account = experiment_power(exp)
    assert account.counts == [1, 1, 1, 2] and abs(account.perfect_p - 0.125) < 1e-12 and not account.adoptable
    res = CliRunner().invoke(app, ["evolve", str(exp.root), "--no-progress"])
    assert res.exit_code == 4, res.output
    line = _one_line(res.output)
    assert "reference corpus of v0: count-lines 1/2 hello-file 1/2 project-skeleton 1/2 write-json 2/2" in line
    assert "a perfect candidate CANNOT be adopted (p = 0.125)" in line


def test_force_evolves_anyway_and_says_so(tmp_path):
    exp = init_experiment("demo", ExperimentConfig.load(OLD_DEMO), runs_dir=tmp_path)
    said: list[str] = []
    preflight(exp, said.append, force=True)()  # no refusal raised
    assert said[0].startswith("power, the prior's (M = 1 candidate a round, 1 round a night): ")
    assert said[1].startswith("--force: evolving anyway")


def test_the_new_demo_grid_has_power_at_its_stated_gain(tmp_path):
    res = CliRunner().invoke(app, ["init", "demo", "--config", str(NEW_DEMO), "--runs-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    line = _one_line(res.output)
    power = float(re.search(r"power ([\d.]+)% at \+0\.15", line).group(1)) / 100
    false_adoption = float(re.search(r"false adoption ([\d.]+)%", line).group(1)) / 100
    assert power >= 0.8 and false_adoption <= 0.05 and "4 tasks × r=34" in line and "CANNOT" not in line
    exp_power = experiment_power(init_experiment("again", ExperimentConfig.load(NEW_DEMO), runs_dir=tmp_path))
    assert exp_power.adoptable and exp_power.detectable_gain is not None and exp_power.detectable_gain <= 0.15


def test_a_bad_prior_is_named(tmp_path):
    res = CliRunner().invoke(app, ["init", "demo", "--config", str(OLD_DEMO), "--runs-dir", str(tmp_path),
                                   "--prior", "nosuch-task=0.5"])
    assert res.exit_code == 1 and "nosuch-task" in res.output and "tasks.development" in res.output
    res = CliRunner().invoke(app, ["init", "demo", "--config", str(OLD_DEMO), "--runs-dir", str(tmp_path),
                                   "--prior", "hello-file=3/0"])
    assert res.exit_code == 1 and "adoption.prior.hello-file" in res.output
    assert not (tmp_path / "demo").exists()
