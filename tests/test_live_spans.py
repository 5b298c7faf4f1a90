"""Live spans from a confined harness (issue 40 item 4): with the runner's OTEL_EXPORTER_OTLP_ENDPOINT set, a
span the harness ends reaches a real OTLP/HTTP receiver through the trial channel while the trial still runs.

The real runner, real bubblewrap, the local sandbox; the receiver decodes the protobuf requests with the
OpenTelemetry proto package. The harness (tests/data/live_spans/liveharness) ends ``tools:tick``, then waits
until ``/app/seen`` appears in its sandbox, which the receiver writes when that span arrives."""

from __future__ import annotations

import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.fakes.openai_server import ScriptedServer
from tests.test_seed_support import reply
from trials import launch
from trials.endpoints.spec import EndpointSpec
from trials.environments.local import bwrap_available

REPO = Path(__file__).resolve().parent.parent
HELLO = REPO / "data" / "starter" / "hello-file"
HARNESS = Path(__file__).parent / "data" / "live_spans" / "liveharness"

pytestmark = [pytest.mark.sandbox,
              pytest.mark.skipif(not bwrap_available(), reason="bubblewrap (bwrap) and nsenter are not installed")]


class Receiver(ThreadingHTTPServer):
    """OTLP/HTTP on 127.0.0.1: records (arrival time, span names, headers) per request; on ``tools:tick`` it
    writes ``seen`` into the running sandbox's /app (the local sandbox's root is a host folder)."""

    daemon_threads = True

    def __init__(self, mark: Path):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.mark, self.got, self.on_disk = mark, [], False


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        req = ExportTraceServiceRequest()
        req.ParseFromString(self.rfile.read(int(self.headers["content-length"])))
        names = [s.name for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
        self.server.got.append((time.monotonic(), names, dict(self.headers.items())))
        if "tools:tick" in names and self.server.mark.parent.is_dir():
            spans = self.server.mark.parents[3] / "agent" / "spans.jsonl"  # <trial>/agent, written live as well
            self.server.on_disk = spans.is_file() and "tools:tick" in spans.read_text()
            self.server.mark.write_text("seen\n")
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()


async def test_a_confined_harness_streams_spans_while_the_trial_runs(tmp_path, monkeypatch):
    from monitor.agents import harness_agent
    from trials.runner import run_trial
    from trials.tasks.load import load_task

    harness = tmp_path / "liveharness"
    shutil.copytree(HARNESS, harness, ignore=shutil.ignore_patterns("__pycache__"))
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("RISE_CACHE_DIR", "RISE_CACHE", "XDG_CACHE_HOME", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                 "OTEL_TRACES_EXPORTER"):
        monkeypatch.delenv(name, raising=False)
    trial = tmp_path / "job" / "hello__r1"
    rec = Receiver(trial / "sandbox" / "root" / "app" / "seen")
    threading.Thread(target=rec.serve_forever, daemon=True).start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{rec.server_address[1]}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20collector-key")
    try:
        with ScriptedServer([reply(analysis="hi")]) as srv:
            res = await run_trial(load_task(HELLO), harness_agent(harness), EndpointSpec(
                base_url=srv.base_url, model="scripted"), trial, "local", "live-spans", agent_timeout_sec=90)
        ended = time.monotonic()
    finally:
        rec.shutdown()
        rec.server_close()
        launch._SPARES.close_all()
    assert res.agent_status == "completed", res.agent_error
    outcome = (trial / "agent" / "agent_result.json").read_text()
    assert '"live": true' in outcome, outcome  # the harness saw the mark: the span arrived while it ran
    ticks = [t for t, names, _ in rec.got if "tools:tick" in names]
    assert len(ticks) == 1 and ticks[0] < ended and rec.on_disk
    assert all(h.get("authorization") == "Bearer collector-key" for _, _, h in rec.got)  # the runner's header
    assert any("rise.trial" in names for _, names, _ in rec.got)  # the root span follows at the end
    assert "collector-key" not in (trial / "agent" / "trial_spec.json").read_text()
