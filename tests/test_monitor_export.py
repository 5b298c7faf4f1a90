"""OTLP-JSON lines: faithful to the OTLP JSON encoding (checked against opentelemetry-proto), round trip."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from monitor.export import (
    STATUS_ERROR,
    JsonLinesSink,
    OtlpHttpForwarder,
    SpanData,
    export_file_to_collector,
    make_otlp_exporter,
    read_jsonl,
)

RESOURCE = {"service.name": "riseharness.test", "rise.trial_id": "t1", "process.pid": 42}


def sample_spans() -> list[SpanData]:
    root = SpanData(0x0123456789ABCDEF0123456789ABCDEF, 0x1111, None, "loop:Agent.run", 1_000, 9_000,
                    {"rise.boundary": "loop:Agent.run", "code.line.number": 12})
    child = SpanData(root.trace_id, 0x2222, 0x1111, "tools:explode", 2_000, 3_000,
                     {"rise.episode": 3, "ok": True, "ratio": 0.5, "reasons": ["stop", "length"],
                      "text": 'quote " backslash \\ newline \n unicode ✓'},
                     [(2_500, "exception", {"exception.type": "ValueError", "exception.message": "boom"})],
                     STATUS_ERROR, "ValueError: boom")
    return [root, child]


def _hex_ids_to_base64(obj):
    """OTLP JSON uses hex ids where proto3 JSON would use base64: convert so protobuf can parse it."""
    if isinstance(obj, dict):
        return {k: (base64.b64encode(bytes.fromhex(v)).decode() if k in {"traceId", "spanId", "parentSpanId"}
                    else _hex_ids_to_base64(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_hex_ids_to_base64(x) for x in obj]
    return obj


def test_lines_parse_as_export_trace_service_requests(tmp_path):
    sink = JsonLinesSink(tmp_path / "spans.jsonl", RESOURCE)
    for s in sample_spans():
        sink(s)
    sink.shutdown()
    lines = (tmp_path / "spans.jsonl").read_text().splitlines()
    assert len(lines) == 2
    req = ExportTraceServiceRequest()
    json_format.ParseDict(_hex_ids_to_base64(json.loads(lines[1])), req)  # strict: unknown fields fail
    span = req.resource_spans[0].scope_spans[0].spans[0]
    assert span.trace_id.hex() == "0123456789abcdef0123456789abcdef" and span.parent_span_id.hex() == "0000000000001111"
    assert span.kind == 1 and span.status.code == 2 and span.start_time_unix_nano == 2_000
    attrs = {a.key: a.value for a in span.attributes}
    assert attrs["rise.episode"].int_value == 3 and attrs["ok"].bool_value and attrs["ratio"].double_value == 0.5
    assert [v.string_value for v in attrs["reasons"].array_value.values] == ["stop", "length"]
    assert span.events[0].name == "exception"
    resource = {a.key: a.value for a in req.resource_spans[0].resource.attributes}
    assert resource["service.name"].string_value == "riseharness.test"


def test_round_trip(tmp_path):
    sink = JsonLinesSink(tmp_path / "spans.jsonl", RESOURCE)
    for s in sample_spans():
        sink(s)
    sink.shutdown()
    with open(tmp_path / "spans.jsonl", "a") as fh:
        fh.write('{"resourceSpans": [{"resource"')  # a torn line is skipped, not fatal
    items, bad = read_jsonl(tmp_path / "spans.jsonl")
    assert bad == 1 and [s for _, s in items] == sample_spans()
    assert items[0][0] == RESOURCE


class _Collector(BaseHTTPRequestHandler):
    received: ClassVar[list] = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        type(self).received.append((self.path, self.headers["Content-Type"], req))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args):
        pass


def _collector():
    _Collector.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}"


def test_export_file_to_an_otlp_http_collector(tmp_path):
    sink = JsonLinesSink(tmp_path / "spans.jsonl", RESOURCE)
    for s in sample_spans():
        sink(s)
    sink.shutdown()
    server, url = _collector()
    try:
        sent, bad = export_file_to_collector(tmp_path / "spans.jsonl", url)
    finally:
        server.shutdown()
    assert (sent, bad) == (2, 0)
    path, ctype, req = _Collector.received[0]
    assert path == "/v1/traces" and ctype == "application/x-protobuf"
    spans = [s for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert {s.name for s in spans} == {"loop:Agent.run", "tools:explode"}
    assert spans[1].parent_span_id == spans[0].span_id


def test_live_forwarder_by_otel_env(tmp_path, monkeypatch):
    server, url = _collector()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
    try:
        fwd = OtlpHttpForwarder(RESOURCE, make_otlp_exporter(), interval_sec=0.05)
        for s in sample_spans():
            fwd.add(s)
        fwd.shutdown()
    finally:
        server.shutdown()
    assert fwd.sent == 2 and fwd.failed == 0
    assert sum(len(ss.spans) for _, _, r in _Collector.received for rs in r.resource_spans
               for ss in rs.scope_spans) == 2


def test_thread_sink_redacts_captures_and_flushes(tmp_path):
    from monitor.export import Captured
    from monitor.redact import Redactor

    key = "sk-threadSINKkey0123456789abc"
    sink = JsonLinesSink(tmp_path / "spans.jsonl", RESOURCE, redact=Redactor({"X_KEY": key}).redact)
    span = SpanData(1, 2, None, "f", 1, 2, {"rise.args": {"a": Captured(f"use {key} " + "z" * 50, 20, 80)},
                                           "rise.return": Captured("short", 100, 5)})
    sink.submit(span)
    assert sink.flush()
    (item,) = [s for _, s in read_jsonl(tmp_path / "spans.jsonl")[0]]
    assert json.loads(item.attributes["rise.args"]) == {"a": "use [REDACTED] zzzzz…[80 chars]"}
    assert item.attributes["rise.return"] == "short"
    sink.shutdown()
    assert key not in (tmp_path / "spans.jsonl").read_text()


def test_lingering_writer_keeps_every_span_and_flush_does_not_wait_for_the_linger(tmp_path):
    from monitor.export import Captured
    from monitor.redact import Redactor

    key = "sk-lingerSINKkey0123456789abc"
    # A linger far longer than the flush timeout: flush() and shutdown() must cut it short, or they fail.
    sink = JsonLinesSink(tmp_path / "spans.jsonl", RESOURCE, redact=Redactor({"X_KEY": key}).redact,
                         linger_sec=60.0)
    spans = [SpanData(1, 10 + i, None, f"s{i}", i, i + 1,
                      {"rise.args": {"a": Captured(f"a{i} {key}", 100, None), "b": Captured("b" * 30, 10, 30)},
                       "rise.return": Captured(f"r{i}", 100, 2)}) for i in range(5)]
    for s in spans:
        sink.submit(s)
    assert sink.flush(timeout=5)
    items = [s for _, s in read_jsonl(tmp_path / "spans.jsonl")[0]]
    assert [s.name for s in items] == [f"s{i}" for i in range(5)]
    assert json.loads(items[3].attributes["rise.args"]) == {"a": "a3 [REDACTED]", "b": "bbbbbbbbbb…[30 chars]"}
    assert items[3].attributes["rise.return"] == "r3"
    sink.submit(SpanData(1, 99, None, "last", 1, 2, {}))
    sink.shutdown(timeout=5)
    assert not sink._thread.is_alive() and sink.spans_written == 6
    assert key not in (tmp_path / "spans.jsonl").read_text()


def test_static_attributes_encode_like_the_rest():
    from monitor.export import encode_span

    static = {"code.function.name": "pkg.mod.f", "code.line.number": 7, "rise.boundary": "mod:f"}
    dynamic = {"rise.episode": 2, "rise.return": "ok"}
    plain = SpanData(1, 2, None, "mod:f", 1, 2, {**static, **dynamic})
    for _ in range(2):  # the second time from the per-site cache
        cached = SpanData(1, 2, None, "mod:f", 1, 2, {**static, **dynamic}, static=static)
        assert encode_span(cached) == encode_span(plain)
    only_static = SpanData(1, 2, None, "mod:f", 1, 2, dict(static), static=static)
    assert json.loads(encode_span(only_static))["attributes"] == json.loads(
        encode_span(SpanData(1, 2, None, "mod:f", 1, 2, dict(static))))["attributes"]


def test_a_span_that_cannot_be_encoded_is_lost_alone(tmp_path):
    sink = JsonLinesSink(tmp_path / "spans.jsonl", RESOURCE, mode="sync")
    bad = SpanData(1, 3, None, "bad", 1, 2, {"rise.args": {"x": object()}})  # not JSON: json.dumps raises
    sink._write([sample_spans()[0], bad, sample_spans()[1]])
    sink.shutdown()
    assert [s.name for _, s in read_jsonl(tmp_path / "spans.jsonl")[0]] == ["loop:Agent.run", "tools:explode"]
    assert sink.spans_written == 2 and sink.spans_lost == 1 and sink.write_errors == 1
