"""monitor.host as the runner uses it: a subprocess per trial, spans.jsonl on disk even when killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from monitor.store import TrialTrace
from trials.endpoints.spec import EndpointSpec
from trials.harness_api import TrialSpec

FIXTURE = Path(__file__).parent / "data" / "monitor_fixture" / "fixpkg"
REPO = Path(__file__).resolve().parents[1]
KEY = "sk-plantedHOSTkey0123456789abcdef"


def write_spec(tmp_path: Path, mode: str) -> Path:
    agent = tmp_path / "agent"
    agent.mkdir(parents=True, exist_ok=True)
    spec = TrialSpec(trial_id=f"fixture__{mode}", task_name="fixture", instruction="do it", env={"kind": "none"},
                     endpoint=EndpointSpec(base_url="http://127.0.0.1:9/v1", model="scripted",
                                           api_key_env="FIXTURE_API_KEY"),
                     agent_dir=str(agent), settings={"mode": mode})
    spec.dump(agent / "trial_spec.json")
    return agent / "trial_spec.json"


def wait_for(spans: Path, name: str, count: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if spans.exists() and spans.read_text().count(f'"name":"{name}"') >= count:
            time.sleep(0.1)
            return
        time.sleep(0.05)
    raise AssertionError(f"{count} {name} spans never appeared in {spans}")


def host(spec: Path, harness: Path = FIXTURE, **kw) -> subprocess.Popen:
    env = {**os.environ, "FIXTURE_API_KEY": KEY, "PYTHONPATH": str(REPO)}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    return subprocess.Popen([sys.executable, "-m", "monitor.host", "--harness", str(harness), "--spec", str(spec)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, **kw)


def test_exception_gives_error_span_and_result_is_written(tmp_path):
    spec = write_spec(tmp_path, "boom")
    proc = host(spec)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    result = json.loads((tmp_path / "agent" / "agent_result.json").read_text())
    assert result["status"] == "error" and "exploded" in result["error"]
    trace = TrialTrace.load(tmp_path)
    (boom,) = trace.spans_of("tools:explode")
    assert boom.is_error and boom.episode == 1 and boom.exception["exception.type"] == "ValueError"
    assert [s.boundary for s in trace.exceptions()][:2] == ["tools:explode", "loop:Agent.step"]
    root = trace.roots[0]
    assert root.name == "rise.trial" and root.attributes["rise.exit_code"] == 0
    assert all(s.trial_id == "fixture__boom" for s in trace.spans)
    assert trace.bad_lines == 0


def test_sigkill_leaves_a_readable_partial_trace(tmp_path):
    spec = write_spec(tmp_path, "hang")
    proc = host(spec)
    spans = tmp_path / "agent" / "spans.jsonl"
    wait_for(spans, "tools:fetch", 4)  # episode 1 is past its fetches, sleeping
    proc.kill()
    proc.wait(timeout=10)
    trace = TrialTrace.load(tmp_path)
    assert trace.bad_lines == 0
    assert len(trace.spans_of("loop:Agent.step", episode=0)) == 1  # ended before the kill
    assert trace.spans_of("loop:Agent.step", episode=1) == []      # still open when killed
    assert len(trace.spans_of("tools:shout", episode=1)) == 3       # ended children of the open step
    # spans whose parent never ended (rise.trial, Agent.run, step 1) are the roots of the partial tree
    assert {s.name for s in trace.roots} >= {"tools:Helper.make", "loop:Agent.step", "tools:shout"}
    assert not (tmp_path / "agent" / "agent_result.json").exists()


def test_sigterm_unwinds_open_spans_and_lets_the_harness_finish(tmp_path):
    spec = write_spec(tmp_path, "hang")
    proc = host(spec)
    spans = tmp_path / "agent" / "spans.jsonl"
    wait_for(spans, "tools:fetch", 4)
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM, err
    trace = TrialTrace.load(tmp_path)
    (step1,) = trace.spans_of("loop:Agent.step", episode=1)
    # asyncio.run cancels the sleeping task: the open spans end as errors marked terminated
    assert step1.is_error and step1.attributes["rise.terminated"] is True
    assert step1.exception["exception.type"] == "asyncio.exceptions.CancelledError"
    root = trace.roots[0]
    assert root.name == "rise.trial" and root.attributes["rise.exit_code"] == 128 + signal.SIGTERM
    assert (tmp_path / "agent" / "agent_result.json").exists()  # the fixture's finally ran


def test_planted_key_never_reaches_the_agent_folder(tmp_path):
    spec = write_spec(tmp_path, "secret")
    proc = host(spec)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    files = {p.name: p.read_text() for p in (tmp_path / "agent").iterdir()}
    assert "spans.jsonl" in files and "[REDACTED]" in files["spans.jsonl"]
    for name, text in files.items():
        assert KEY not in text, name
    assert KEY not in out + err


def test_bad_boundary_stops_the_trial_with_a_clear_error(tmp_path):
    harness = tmp_path / "fixpkg"
    subprocess.run(["cp", "-r", str(FIXTURE), str(harness)], check=True)
    (harness / "recording.toml").write_text('[[boundary]]\ntarget = "loop:Agent.stepp"\n')
    spec = write_spec(tmp_path, "plain")
    proc = host(spec, harness)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3
    assert "recording.toml [boundary[0].target]" in err and "fixpkg.loop.Agent.stepp does not exist" in err
