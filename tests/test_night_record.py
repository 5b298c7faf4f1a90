"""``rise record``: the night's compact record (evolve.views.night) over the synthetic experiment of the report
tests (two rounds: an adoption, a rejection, a ⊥-blocked decision) and over a night in progress (no decision yet,
a partial reference grid, an attempt a kill moved aside and a role call it cut off). No model, no sandbox; the
screenshot test runs where Chromium is on PATH."""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evolve.experiment.config import ExperimentConfig
from evolve.experiment.ledger import TrialDone
from evolve.experiment.store import init_experiment
from evolve.views.night import chromium
from evolve.views.night_tables import TRIAL_FIELDS
from rise.cli import app
from tests.test_report_support import DEV, HELDOUT, R, build_experiment, make_seed, write_job
from trials.endpoints.timings import InferenceSummary
from trials.load import MachineLoad
from trials.results import PhaseDurations, TrialResult

runner = CliRunner()
FILES = {"README.md", "config.toml", "ledger.jsonl", "trials.csv", "decisions.md", "decisions.json", "power.md",
         "stages.md", "resumes.md", "status.txt", "audit.txt", "morning.md", "report.html"}


@pytest.fixture(scope="module")
def exp(tmp_path_factory):
    root = tmp_path_factory.mktemp("night")
    return build_experiment(root / "runs", root)


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its size and modification time (symlinks as themselves)."""
    out = {}
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            st = os.lstat(Path(dirpath) / name)
            out[os.path.relpath(Path(dirpath) / name, root)] = (st.st_size, st.st_mtime_ns)
    return out


def _record(exp, out: Path, *extra: str) -> str:
    res = runner.invoke(app, ["record", str(exp.root), "-o", str(out), *extra])
    assert res.exit_code == 0, res.output
    return res.output


def _grid_cells(root: Path) -> int:
    """The trials in the experiment's grid folders, counted apart from the command: a cell folder with its
    result.json beside a config.json (symlinked grids counted once, where they are)."""
    n = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in ("harness", "worktrees")]
        if "config.json" in filenames:
            n += sum(1 for d in Path(dirpath).iterdir()
                     if re.fullmatch(r".+__r\d+", d.name) and (d / "result.json").is_file())
    return n


def _stated_total(readme: str) -> int:
    return int(re.search(r"Size: ([\d,]+) bytes", readme).group(1).replace(",", ""))


def test_record_of_a_night_with_decisions(exp, tmp_path):
    before = _snapshot(exp.root)
    out = tmp_path / "nights" / "2026-12-06"
    said = _record(exp, out, "--no-screenshot")
    assert _snapshot(exp.root) == before, "the record changed the experiment"

    names = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert FILES <= names and "report.png" not in names
    assert {"show/v1.txt", "show/cand-r01-harmful.txt", "show/cand-r02-flaky.txt"} <= names
    assert (out / "config.toml").read_bytes() == exp.config_path.read_bytes()
    assert (out / "ledger.jsonl").read_bytes() == (exp.root / "ledger.jsonl").read_bytes()

    rows = list(csv.DictReader((out / "trials.csv").open()))
    assert len(rows) == _grid_cells(exp.root) == 72  # 16 reference + 8 held-out + 3 evaluations of 16
    assert {r["arm"]: sum(x["arm"] == r["arm"] for x in rows) for r in rows} == {
        "reference": 16, "heldout": 8, "evaluation": 48}
    cell = next(r for r in rows if r["grid"] == "rounds/r02/flaky/evaluation" and r["task"] == "alpha"
                and r["repetition"] == "3")
    assert (cell["status"], cell["infra_cause"], cell["version"]) == ("infra", "model_unreachable", "cand/r02-flaky")
    verify = [r for r in rows if r["grid"] == "rounds/r01/verify/evaluation"]
    assert {r["version"] for r in verify} == {"v1"} and all(r["booked"] == "True" for r in rows)
    assert {r["tokens_in"] for r in verify} == {"1500"}

    decisions = json.loads((out / "decisions.json").read_text())
    assert [(d["candidate"], d["outcome"], d["final"]) for d in decisions] == [
        ("r01:harmful", "rejected", True), ("r01:verify", "adopted as v1", True), ("r02:flaky", "blocked", False)]
    booked = {e.commit: e.decision for e in exp.ledger.events if e.kind in ("adoption", "rejection")}
    md = (out / "decisions.md").read_text()
    for d in decisions:
        assert d["decision"] == booked[d["commit"]]
    verify_dec = decisions[1]["decision"]
    assert f"- candidate_pass1 = {verify_dec['candidate_pass1']}" in md
    assert f"- baseline_pass1 = {verify_dec['baseline_pass1']}" in md and f"- power = {verify_dec['power']}" in md
    assert "- regressions = alpha" in md and "- missing = alpha#3, gamma#2" in md
    assert "measured false adoption" in decisions[1]["policy"] and decisions[2]["policy"] == ""

    stages = (out / "stages.md").read_text()
    row = re.compile(r"^\| [^|]+ \| [^|]+ \| [^|]+ \| [^|]+ \| [^|]+ \| (\d+) \|", re.MULTILINE)
    units = [int(m) for m in row.findall(stages)]
    assert sum(units) == len(exp.ledger.events)  # every event in one stage row
    assert "| r01 | decision |" in stages and "| before r01 | reference |" in stages
    assert "## r01 verify → v1" in stages

    assert "synth: versions" in (out / "status.txt").read_text()
    assert (out / "show" / "v1.txt").read_text().startswith("# v1 (")
    assert "regressions of stable passes: alpha" in (out / "show" / "cand-r01-harmful.txt").read_text()
    morning = (out / "morning.md").read_text()
    assert "## Round 1 from v0: adopted v1" in morning and "| harmful | settings | rejected |" in morning
    assert "| small-model (second model, r = 2) | development | beta | 0/2 | 1/2 |" in morning
    assert "nothing finished was done twice" in (out / "audit.txt").read_text()
    assert "power, measured" in (out / "power.md").read_text()
    assert "round 1 in progress" in (out / "resumes.md").read_text()

    readme = (out / "README.md").read_text()
    sizes = {str(p.relative_to(out)): p.stat().st_size for p in out.rglob("*") if p.is_file()}
    assert _stated_total(readme) == sum(sizes.values())
    for name, size in sizes.items():
        assert f"| [{name}]({name}) | {size:,} |" in readme
    assert "not taken: --no-screenshot" in readme and f"{sum(sizes.values()):,} bytes" in said


def test_rerun_rewrites_the_record(exp, tmp_path):
    out = tmp_path / "record"
    _record(exp, out, "--no-screenshot")
    first = {n: (out / n).read_bytes() for n in ("trials.csv", "decisions.json", "stages.md", "ledger.jsonl")}
    (out / "show" / "cand-r09-gone.txt").write_text("a candidate of an older state\n")
    (out / "report.png").write_bytes(b"stale")
    (out / "notes.txt").write_text("someone's own file\n")
    _record(exp, out, "--no-screenshot")
    assert {n: (out / n).read_bytes() for n in first} == first
    assert not (out / "show" / "cand-r09-gone.txt").exists() and not (out / "report.png").exists()
    assert (out / "notes.txt").is_file() and "notes.txt" not in (out / "README.md").read_text()


def test_record_inside_the_experiment_is_refused(exp):
    res = runner.invoke(app, ["record", str(exp.root), "-o", str(exp.root / "record"), "--no-screenshot"])
    assert res.exit_code == 1 and "inside the experiment" in res.output
    assert not (exp.root / "record").exists()


def test_default_folder_is_the_nights_date(exp, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["record", str(exp.root), "--no-screenshot"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "docs" / "nights" / exp.ledger.events[0].ts[:10] / "README.md").is_file()


def test_record_of_a_night_in_progress(tmp_path):
    cfg = ExperimentConfig.model_validate({
        "name": "fresh", "endpoint": {"base_url": "http://127.0.0.1:9/v1", "model": "scripted-model"},
        "tasks": {"dir": "tasks", "development": DEV, "heldout": HELDOUT}, "r": R})
    exp = init_experiment("fresh", cfg, runs_dir=tmp_path / "runs", seed_dir=make_seed(tmp_path))
    c0 = exp.commit_of("v0")
    job = write_job(exp.root / "versions" / "v0" / "reference", {"alpha": ["passed", "failed"], "beta": ["failed"]})
    for task, k in (("alpha", 1), ("alpha", 2), ("beta", 1)):
        exp.ledger.append(TrialDone(key=f"{c0}:reference:{task}:{k}", commit=c0, purpose="reference", task=task,
                                    rep=k, status="passed" if (task, k) == ("alpha", 1) else "failed",
                                    trial_dir=os.path.relpath(job / f"{task}__r{k}", exp.root)))
    t0 = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(hours=3)  # a stretch before this one
    measured = TrialResult.load(job / "alpha__r1" / "result.json").model_copy(update={
        "reward": 1.0, "episodes": 7, "started_at": t0.isoformat(),
        "finished_at": (t0 + dt.timedelta(minutes=2)).isoformat(), "durations": PhaseDurations(agent=100.0, total=120.0),
        "machine_load": MachineLoad(cpus=2, loadavg_end=[3.0, 2.0, 1.0], busy=0.9),
        "inference": InferenceSummary(calls=5, decode_sec=10.0, split_predicted_n=200, split_calls=5)})
    measured.write(job / "alpha__r1")
    moved = job / "beta__r2.attempt-1"  # what a kill left of the cell in flight, last written a minute in
    (moved / "agent").mkdir(parents=True)
    os.utime(moved, (t0.timestamp() + 60, t0.timestamp() + 60))
    call = f"analyst-{(t0 + dt.timedelta(seconds=123)):%Y%m%dT%H%M%S}-abc123.jsonl"  # started as the trial ended
    cut = exp.root / "rounds" / "r01" / "analysis" / "transcripts" / call
    cut.parent.mkdir(parents=True)
    cut.write_text("".join(json.dumps({"seq": n, "t": t, "kind": k, "role": "analyst"}) + "\n"
                           for n, (t, k) in enumerate([(0, "start"), (30.5, "message")], 1)))
    before = _snapshot(exp.root)

    out = tmp_path / "record"
    _record(exp, out, "--no-screenshot")
    assert _snapshot(exp.root) == before
    rows = list(csv.DictReader((out / "trials.csv").open()))
    assert len(rows) == _grid_cells(exp.root) == 3
    assert {(r["task"], r["repetition"], r["status"], r["version"]) for r in rows} == {
        ("alpha", "1", "passed", "v0"), ("alpha", "2", "failed", "v0"), ("beta", "1", "failed", "v0")}
    alpha1 = next(r for r in rows if (r["task"], r["repetition"]) == ("alpha", "1"))
    assert {k: alpha1[k] for k in ("reward", "episodes", "agent_s", "total_s", "started_at", "load_per_cpu", "busy",
                                   "model_calls", "decode_tok_s", "arm")} == {
        "reward": "1.0", "episodes": "7", "agent_s": "100.0", "total_s": "120.0",
        "started_at": t0.isoformat(), "load_per_cpu": "1.5", "busy": "0.9", "model_calls": "5",
        "decode_tok_s": "20.0", "arm": "reference"}
    assert json.loads((out / "decisions.json").read_text()) == []
    assert "No decision booked yet." in (out / "decisions.md").read_text()
    morning = (out / "morning.md").read_text()  # says where the night stands, not only that nothing is decided
    assert "No round started yet" in morning and "grid versions/v0/reference: 3 of 4 trials done, 1 left" in morning
    assert "3 of 4 trials done" in (out / "report.html").read_text()
    assert "the prior's" in (out / "power.md").read_text()
    resumes = (out / "resumes.md").read_text()
    assert "trial attempt moved aside before its rerun: versions/v0/reference/beta__r2.attempt-1" in resumes
    assert f"role call cut off (no end line): rounds/r01/analysis/transcripts/{call}" in resumes
    first = (f"- stretch 1: {t0:%Y-%m-%dT%H:%M:%S} → {t0 + dt.timedelta(seconds=153.5):%Y-%m-%dT%H:%M:%S} UTC "
             f"(0.04 h): 1 trials finished, 1 role calls, 0 ledger events; cut off at its end: role call {call}, "
             "trial attempt reference/beta__r2.attempt-1")
    assert first in resumes and "- 2 stretch(es), 1 resume(s)" in resumes
    assert re.search(r"- resumed after 2\.9\d h in which nothing ran\n- stretch 2: .*: 0 trials finished, 0 role "
                     r"calls, 3 ledger events\n", resumes)
    assert "grid versions/v0/reference: 3 of 4 trials done, 1 left" in resumes
    assert f"| before r01 | reference | {t0:%Y-%m-%dT%H:%M:%S} |" in (out / "stages.md").read_text()  # alpha#1
    readme = (out / "README.md").read_text()
    assert _stated_total(readme) == sum(p.stat().st_size for p in out.rglob("*") if p.is_file())


@pytest.mark.skipif(chromium() is None, reason="no chromium binary on PATH")
def test_record_screenshots_the_report(exp, tmp_path):
    out = tmp_path / "record"
    _record(exp, out)
    png = (out / "report.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    readme = (out / "README.md").read_text()
    assert f"| [report.png](report.png) | {len(png):,} |" in readme and "the report's first 7200 px" in readme
    assert _stated_total(readme) == sum(p.stat().st_size for p in out.rglob("*") if p.is_file())


def test_record_of_an_experiment_just_made(tmp_path):
    cfg = ExperimentConfig.model_validate({
        "name": "new", "endpoint": {"base_url": "http://127.0.0.1:9/v1", "model": "scripted-model"},
        "tasks": {"dir": "tasks", "development": DEV, "heldout": HELDOUT}, "r": R})
    exp = init_experiment("new", cfg, runs_dir=tmp_path / "runs", seed_dir=make_seed(tmp_path))
    out = tmp_path / "record"
    _record(exp, out, "--no-screenshot")
    assert (out / "trials.csv").read_text().splitlines() == [",".join(TRIAL_FIELDS)]
    assert "No event booked yet." in (out / "stages.md").read_text()
    assert "nothing recorded yet" in (out / "resumes.md").read_text() and "- nothing ran yet" in (
        out / "resumes.md").read_text()
    assert (out / "ledger.jsonl").read_bytes() == b"" and "No round started yet" in (out / "morning.md").read_text()
