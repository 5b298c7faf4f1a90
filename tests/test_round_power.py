"""Issue 43 items 2 and 3: the power each round's decisions really have, and what early stopping really saved.

- ``rise init`` prints the prior's power and says which figure it is (M and rounds a night); the main job's
  figures (scripts/demo-experiment.toml: r = 34, four tasks, stratified, α 0.05, M = 1, one round a night) from
  the power code: 81 % from the prior, 71 % at the seed's measured rates of 2026-12-05 (hello-file 4/4);
- a round recomputes it from the baseline grid it decides against, at its real M and rounds a night, books it
  (``power`` event, readable after a reload) and says it before its first evaluation, beside the prior's;
- the report shows both, and per decision the trials saved by early stopping, measured from the ledger.
"""

from __future__ import annotations

import re
from pathlib import Path

from markupsafe import escape
from typer.testing import CliRunner

from evolve.experiment.config import ExperimentConfig
from evolve.experiment.ledger import Evaluation, Ledger, PowerEvent, TrialDone
from evolve.experiment.store import init_experiment
from evolve.round.controller import Controller
from evolve.round.power import announce_round, measured_power, prior_power
from rise.cli import app
from tests.test_report_support import F, P, _evaluation, build_experiment, write_job
from validate.evaluate import grid_of_job
from validate.multiplicity import Family
from validate.power import Baseline, grid_power

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "scripts" / "demo-experiment.toml"
TASKS = ["count-lines", "hello-file", "project-skeleton", "write-json"]
SEED_R4 = {"hello-file": 1.0, "write-json": 0.25, "count-lines": 0.5, "project-skeleton": 0.25}  # 2026-12-05


def _pct(line: str) -> float:
    return float(re.search(r"power ([\d.]+)% at \+0\.15", line).group(1))


def test_init_prints_the_prior_power_once_and_names_it(tmp_path):
    res = CliRunner().invoke(app, ["init", "demo", "--config", str(DEMO), "--runs-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    (line,) = [x for x in res.output.splitlines() if x.startswith("power")]
    assert line.startswith("power, the prior's (M = 1 candidate a round, 1 round a night): stratified at α 0.05")
    assert _pct(line) == 81.0 and "measured power follows" in res.output
    quiet = CliRunner().invoke(app, ["init", "again", "--config", str(DEMO), "--runs-dir", str(tmp_path),
                                     "--no-power"])  # scripts/run.sh: the `rise evolve` after it prints it
    assert quiet.exit_code == 0 and "power" not in quiet.output


def test_the_demo_figures_at_its_real_settings():
    """The figures scripts/demo-experiment.toml, the README and docs/power.md state, from the power code."""
    def power(rates: dict[str, float], m: int, nights: int) -> float:
        level = Family(0.05, nights, 1, m).alpha_candidate
        return grid_power(TASKS, 34, "stratified", level, Baseline(tuple(rates[t] for t in TASKS)), "x", 0.15).power

    prior = {"hello-file": 3 / 8, "write-json": 8 / 12, "project-skeleton": 3 / 10, "count-lines": 2 / 4}
    assert round(power(prior, 1, 1), 2) == 0.81
    assert round(power(SEED_R4, 1, 1), 2) == 0.71 and round(power(SEED_R4, 4, 1), 2) == 0.48
    assert round(power(SEED_R4, 1, 3), 2) == 0.53 and round(power(SEED_R4, 4, 3), 2) == 0.32


def _with_corpus(tmp_path, night_rounds: int = 3):
    cfg = ExperimentConfig.load(DEMO)
    data = cfg.model_dump()
    data["adoption"]["night_rounds"] = night_rounds
    exp = init_experiment("demo", ExperimentConfig.model_validate(data), runs_dir=tmp_path)
    # a reference corpus at the seed's measured rates: hello-file always passes (it cannot gain)
    corpus = {t: [P] * round(34 * SEED_R4[t]) + [F] * (34 - round(34 * SEED_R4[t])) for t in TASKS}
    job = write_job(exp.root / "versions" / "v0" / "reference", corpus)
    commit = exp.commit_of("v0")
    _evaluation(exp.ledger, f"{commit}:reference", commit, job, exp.root, "reference")
    return exp, job


def test_a_round_books_and_says_its_measured_power_beside_the_priors(tmp_path):
    exp, job = _with_corpus(tmp_path)
    said: list[str] = []
    ctl = Controller(exp, say=said.append)
    ctl.family_size, ctl.baseline = 2, grid_of_job(job)[0]
    ev = announce_round(ctl, 1, "v0", "reference corpus of v0")
    assert ev.family_size == 2 and ev.night_rounds == 3 and ev.measured["counts"] == [17, 34, 8, 8]
    assert abs(ev.measured["alpha"] - 0.05 / 6) < 1e-12 and abs(ev.prior["alpha"] - 0.05 / 6) < 1e-12
    fam = Family(0.05, 3, 1, 2)
    assert ev.measured["power"] == measured_power(exp, fam, ctl.baseline, "x").power < 0.5
    assert ev.prior["power"] == prior_power(exp, fam).power > ev.measured["power"]
    assert said[0].startswith("round 1: power, measured (M = 2 candidates a round, 3 rounds a night)")
    assert "reference corpus of v0: count-lines 17/34 hello-file 34/34" in said[0]
    assert said[1].startswith("round 1: beside it, power, the prior's (M = 2 candidates a round, 3 rounds")
    (again,) = Ledger(exp.root / "ledger.jsonl").find("power")  # validated on read
    assert isinstance(again, PowerEvent) and again.measured == ev.measured
    said.clear()
    announce_round(ctl, 1, "v0", "reference corpus of v0")  # a resume: read back and said again, not booked twice
    assert len(exp.ledger.find("power")) == 1 and said[0].startswith("round 1: power, measured")


def test_evolve_preflight_names_the_measured_figure_once_the_corpus_is_booked(tmp_path):
    from evolve.round.power import experiment_power

    exp, _ = _with_corpus(tmp_path, night_rounds=1)
    line = experiment_power(exp).line()
    assert line.startswith("power, measured (M = 1 candidate a round, 1 round a night)")
    assert _pct(line) == 78.1  # against those counts (scripts/demo-experiment.toml, docs/power.md)


def test_the_report_shows_both_powers_and_the_trials_saved(tmp_path):
    from evolve.views.report import build_report, render_report

    exp = build_experiment(tmp_path / "runs", tmp_path)
    led = exp.ledger
    measured = {"power": 0.708, "gain": 0.15, "line": "power, measured (M = 2 candidates a round, 1 round a night): x"}
    prior = {"power": 0.81, "gain": 0.15, "line": "power, the prior's (M = 2 candidates a round, 1 round a night): y"}
    led.append(PowerEvent(key="r01:power", round=1, incumbent="v0", family_size=2, night_rounds=1,
                          measured=measured, prior=prior))
    # a curtailed rejection booked as the controller books one: 5 of 16 cells, then one ⊥ attempt
    led.append(Evaluation(key="cafe:evaluation", commit="cafe", complete=False,
                          metrics={"cells": 16, "observed_cells": 5, "curtailed": True}))
    for k in range(1, 6):
        led.append(TrialDone(key=f"cafe:alpha:{k}", commit="cafe", purpose="evaluation", task="alpha", rep=k,
                             status="failed", trial_dir="x"))
    led.append(TrialDone(key="cafe:beta:1:infra1", commit="cafe", purpose="evaluation", task="beta", rep=1,
                         status="infra", trial_dir="x"))
    from evolve.views.power import trials_saved

    cut = trials_saved(exp, "cafe")
    assert cut.saved == 11 and cut.line() == ("decided early by curtailment after 5 of 16 cells; 5 evaluation "
                                              "trials run in all, 1 ⊥ attempt(s) besides: 11 saved (69%)")
    report = build_report(exp)
    r1, r2 = report.morning
    assert r1.power.measured == measured["line"] and r1.power.prior == prior["line"]
    assert r2.power.measured.startswith("power not recorded")
    full = {c.slug: c.saved for c in r1.candidates}
    assert full["verify"] == "decided on the full grid after 16 of 16 cells; 16 evaluation trials run in all: 0 saved (0%)"
    assert r1.saved == "early stopping saved 0 of 32 evaluation trials over 2 decision(s) (0%; 0.0 per decision)"
    page = render_report(report)
    assert str(escape(measured["line"])) in page and str(escape(prior["line"])) in page and 'class="saved"' in page
