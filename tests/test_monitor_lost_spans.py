"""Lost spans are reported, not only counted (issue 15 item 7): failed writes of spans.jsonl (a real full
device), recording errors and collector failures reach result.json, the trial's root span and a warning."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from monitor.agents import harness_agent
from monitor.store import TrialTrace
from tests.test_monitor_host import FIXTURE, host, write_spec
from tests.test_runner_fake_env import DirEnv, make_task
from trials.results import MONITOR_STATS_FILE, TrialResult
from trials.runner import run_trial

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="optional: needs /dev/full (Linux)")


def test_host_on_a_full_device_reports_lost_writes(tmp_path):
    spec = write_spec(tmp_path, "plain")
    (tmp_path / "agent" / "spans.jsonl").symlink_to("/dev/full")  # every write fails with ENOSPC
    proc = host(spec)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    stats = json.loads((tmp_path / "agent" / MONITOR_STATS_FILE).read_text())
    assert stats["lost_spans"]["write"] > 0 and stats["spans_written"] == 0
    assert "span(s) lost" in err and "write" in err


def test_runner_puts_lost_spans_in_result_json(tmp_path):
    # A long agent timeout: under a loaded CI the monitored harness can take more than the default 30 s to start,
    # and a harness killed on its timeout writes no stats file ({"stats_missing": 1}, not the lost writes). The two
    # CI failures of 2026-12-06 were another cause: the spare launcher race (tests/test_harness_start.py).
    task = make_task(tmp_path / "tasks", agent_timeout=300)
    trial_dir = tmp_path / "job" / "t1__r1"
    (trial_dir / "agent").mkdir(parents=True)
    (trial_dir / "agent" / "spans.jsonl").symlink_to("/dev/full")
    res = asyncio.run(run_trial(task, harness_agent(FIXTURE), None, trial_dir, "fake", "job1",
                                settings={"mode": "plain"},
                                env_factory=lambda kind, task, tdir, job_id: DirEnv(task, tdir, job_id)))
    saved = TrialResult.load(trial_dir / "result.json")
    assert "write" in saved.lost_spans, (saved.lost_spans, saved.notes, saved.agent_status, saved.agent_error,
                                         (trial_dir / "agent" / "stdout.log").read_text()[-2000:])
    assert saved.lost_spans["write"] > 0 and saved.lost_spans == res.lost_spans
    assert any(n.startswith("monitor lost spans") for n in saved.notes)


def test_a_healthy_trial_reports_zero_and_a_missing_stats_file_is_not_zero(tmp_path):
    from trials.results import read_lost_spans

    spec = write_spec(tmp_path, "plain")
    proc = host(spec)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert read_lost_spans(tmp_path / "agent") == {"write": 0, "forward": 0, "instrumentation": 0}
    root = TrialTrace.load(tmp_path).roots[0]
    assert root.attributes["rise.spans_lost.write"] == 0 and root.attributes["rise.spans_lost.instrumentation"] == 0
    assert read_lost_spans(tmp_path / "nothing") == {"stats_missing": 1}
    assert read_lost_spans(tmp_path / "nothing", monitored=False) == {}


def test_recording_errors_are_on_the_root_span(tmp_path, monkeypatch):
    """A recording error inside the instrumentation (here: the tracer refuses one span) is counted on the root."""
    from monitor.host import Monitor
    from trials.endpoints.spec import EndpointSpec
    from trials.harness_api import TrialSpec

    (tmp_path / "agent").mkdir()
    spec = TrialSpec(trial_id="t", task_name="t", instruction="x", env={"kind": "none"},
                     endpoint=EndpointSpec(base_url="http://127.0.0.1:9/v1", model="m"),
                     agent_dir=str(tmp_path / "agent"))
    mon = Monitor(FIXTURE, spec)
    mon.start()
    real_start = mon.tracer.start
    calls = []

    def start(name, *args, **kw):
        calls.append(name)
        if name == "tools:shout" and calls.count(name) == 1:
            raise RuntimeError("the tracer refuses this span")
        return real_start(name, *args, **kw)

    monkeypatch.setattr(mon.tracer, "start", start)
    import fixpkg.tools

    assert fixpkg.tools.shout("hi") and fixpkg.tools.shout("again")  # the harness call is unaffected
    mon.close(exit_code=0)
    root = TrialTrace.load(tmp_path).roots[0]
    assert root.attributes["rise.spans_lost.instrumentation"] == 1
    assert json.loads(Path(spec.agent_dir, MONITOR_STATS_FILE).read_text())["lost_spans"]["instrumentation"] == 1
