"""The report's "Time and load" section over the synthetic experiment: a grid whose trials recorded model timings
and machine load shows its split, cache hits, speeds and load; grids from before those were recorded show their
phases only; result.json files without the new fields still read."""

from __future__ import annotations

import re

import pytest

from evolve.views.report import build_report, render_report
from tests.test_report_support import build_experiment
from trials.endpoints.timings import CallTimings, InferenceSummary
from trials.load import MachineLoad
from trials.results import PhaseDurations, TrialResult


def _timed(path, prefill: float, waiting: float, cached: int, load: float) -> None:
    """Give one trial of a crafted grid what the runner now records."""
    res = TrialResult.load(path)
    res.inference = InferenceSummary().add(CallTimings(
        source="llamacpp", wall_ms=1000 * (prefill + waiting + 20), prompt_tokens=1000, prompt_n=1000 - cached,
        cache_n=cached, prompt_ms=1000 * prefill, predicted_n=100, predicted_ms=20_000))
    res.durations = PhaseDurations(env_start=2, agent=prefill + waiting + 20 + 30, verifier=8, env_stop=1,
                                   total=prefill + waiting + 20 + 41)
    res.machine_load = MachineLoad(cpus=2, loadavg_start=[load, 1, 1], loadavg_end=[load, 1, 1], busy=0.9,
                                   steal=0.02)
    res.write(path.parent)


def test_time_and_load_per_grid(tmp_path):
    exp = build_experiment(tmp_path / "runs", tmp_path)
    ref = exp.root / "versions" / "v0" / "reference"
    _timed(ref / "alpha__r1" / "result.json", prefill=100, waiting=40, cached=250, load=4.0)
    _timed(ref / "beta__r1" / "result.json", prefill=60, waiting=0, cached=750, load=2.0)

    rep = build_report(exp)
    rows = {row.label: row for row in rep.time}
    assert set(rows) == {c.label for c in rep.columns}
    v0 = rows["v0"]
    assert v0.split.trials == 16 and v0.split.measured == 2
    assert v0.split.prefill == pytest.approx(160) and v0.split.waiting == pytest.approx(40)
    assert v0.split.decode == pytest.approx(40) and v0.split.sandbox == pytest.approx(6)
    assert v0.split.other == pytest.approx(60)  # agent time outside the model calls
    assert v0.split.inference.cache_hit_ratio == pytest.approx(1000 / 2000)
    assert v0.load.trials == 2 and v0.load.load_per_cpu == pytest.approx(1.5) and v0.load.load_per_cpu_max == 2.0
    old = rows["r01 harmful"]  # trials written before timings were recorded
    assert old.split.measured == 0 and old.split.inference.cache_hit_ratio is None and old.load.trials == 0

    html = render_report(rep)
    table = re.search(r'<table id="time-table">(.*?)</table>', html, re.DOTALL).group(1)
    assert "prefill" in table and "waiting (queue)" in table and "commands + harness" in table
    row = re.search(r"<tr><td>v0</td>(.*?)</tr>", table, re.DOTALL).group(1)
    assert "16 (2)" in row and "160" in row and "50%" in row  # prefill seconds, cache hits
    assert "1.50 (2.00)" in row and "90%" in row and "2.0%" in row  # load per CPU, busy, steal
    assert 'href="#time"' in html


def test_old_result_files_still_read(tmp_path):
    """A result.json from before the fields existed reads with them empty, and splits by phase only."""
    from trials.time_split import trial_split

    path = tmp_path / "result.json"
    path.write_text('{"schema_version": 1, "trial_name": "t__r1", "run_id": "x", "task_name": "t", '
                    '"status": "failed", "durations": {"agent": 30, "verifier": 5, "env_start": 1, '
                    '"env_stop": 1, "total": 37}}')
    res = TrialResult.load(path)
    assert res.inference is None and res.machine_load is None
    split = trial_split(res)
    assert split.measured == 0 and split.other == 30 and split.prefill == 0 and split.share("other") == pytest.approx(
        30 / 37)
