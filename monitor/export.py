"""Span export: OTLP-JSON lines on disk (``spans.jsonl``) and, optionally, OTLP/HTTP to a collector.

Each line of ``spans.jsonl`` is one ``ExportTraceServiceRequest`` in the OTLP JSON encoding (lowerCamelCase
fields, trace/span ids as lowercase hex, 64-bit integers and nanosecond times as decimal strings, enums as
integers), holding exactly one span. The official ``opentelemetry-exporter-otlp-json-file`` is not on our
index, so this module writes the same shape itself: the resource/scope prefix is encoded once and whole lines
are appended with single unbuffered ``os.write`` calls (never interrupted half-way by a Python signal handler):
with ``write = "sync"`` each span the moment it ends; with the default writer thread a burst of spans at a time,
``write_linger_ms`` after its first span ended (see :class:`JsonLinesSink`).

The collector path reuses the SDK's ``OTLPSpanExporter`` (configured by the standard ``OTEL_EXPORTER_OTLP_*``
variables) from a background thread, so a slow or absent collector never delays the harness.
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SCOPE_NAME = "riseharness.monitor"
SCOPE_VERSION = "1"
STATUS_UNSET, STATUS_OK, STATUS_ERROR = 0, 1, 2
SPAN_KIND_INTERNAL = 1

_esc = json.encoder.encode_basestring  # C-accelerated: returns the quoted JSON string


@dataclass(slots=True)
class SpanData:
    """One finished (or, while recording, open) span, independent of the SDK."""

    trace_id: int
    span_id: int
    parent_id: int | None
    name: str
    start_ns: int
    end_ns: int = 0
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    status_code: int = STATUS_UNSET
    status_message: str = ""
    # The boundary's fixed attributes (code.*, rise.boundary...), shared by all its spans: when set, they are
    # the first ``len(static)`` entries of ``attributes`` and the encoder writes them from a per-site cache.
    static: Mapping[str, Any] | None = None


# ---------------------------------------------------------------------------------------------- encoding
def _value(v: Any) -> str:
    cls = v.__class__
    if cls is str:
        return '{"stringValue":' + _esc(v) + "}"
    if cls is bool:
        return '{"boolValue":true}' if v else '{"boolValue":false}'
    if cls is int:
        return '{"intValue":"' + str(v) + '"}'
    if cls is float:
        return '{"doubleValue":' + (repr(v) if math.isfinite(v) else '"' + repr(v).replace("inf", "Infinity").replace("nan", "NaN") + '"') + "}"
    if isinstance(v, (list, tuple)):
        return '{"arrayValue":{"values":[' + ",".join(_value(x) for x in v) + "]}}"
    if isinstance(v, Mapping):
        return '{"kvlistValue":{"values":[' + _attrs(v) + "]}}"
    return '{"stringValue":' + _esc(str(v)) + "}"


_KEY_CACHE: dict[str, str] = {}


def _attrs(attrs: Mapping[str, Any], skip: int = 0) -> str:
    items = attrs.items()
    if skip:
        items = islice(items, skip, None)
    parts = []
    for k, v in items:
        if v is None:
            continue
        key = _KEY_CACHE.get(k)
        if key is None:
            key = _KEY_CACHE.setdefault(k, '{"key":' + _esc(k) + ',"value":')
        if v.__class__ is str:  # most values: no call to _value
            parts.append(key + '{"stringValue":' + _esc(v) + "}}")
        else:
            parts.append(key + _value(v) + "}")
    return ",".join(parts)


_STATIC_CACHE: dict[int, tuple[Mapping[str, Any], str]] = {}


def _static_attrs(static: Mapping[str, Any]) -> str:
    """The encoded attributes of one boundary's fixed part (cached; the mapping is kept alive with it)."""
    hit = _STATIC_CACHE.get(id(static))
    if hit is None or hit[0] is not static:
        hit = _STATIC_CACHE[id(static)] = (static, _attrs(static))
    return hit[1]


def encode_span(s: SpanData) -> str:
    """The OTLP-JSON ``Span`` object for one span."""
    out = [
        '{"traceId":"', format(s.trace_id, "032x"), '","spanId":"', format(s.span_id, "016x"), '"',
    ]
    if s.parent_id:
        out += [',"parentSpanId":"', format(s.parent_id, "016x"), '"']
    out += [
        ',"name":', _esc(s.name), ',"kind":1,"startTimeUnixNano":"', str(s.start_ns),
        '","endTimeUnixNano":"', str(s.end_ns), '","attributes":[',
    ]
    if s.static:
        fixed, rest = _static_attrs(s.static), _attrs(s.attributes, len(s.static))
        out.append(fixed + "," + rest if rest else fixed)
    else:
        out.append(_attrs(s.attributes))
    out.append("]")
    if s.events:
        out.append(',"events":[')
        out.append(",".join(
            '{"timeUnixNano":"' + str(t) + '","name":' + _esc(n) + ',"attributes":[' + _attrs(a) + "]}"
            for t, n, a in s.events
        ))
        out.append("]")
    if s.status_code:
        out += [',"status":{"code":', str(s.status_code)]
        if s.status_message:
            out += [',"message":', _esc(s.status_message)]
        out.append("}")
    else:
        out.append(',"status":{}')
    out.append("}")
    return "".join(out)


def request_prefix(resource: Mapping[str, Any]) -> str:
    """Everything of an ExportTraceServiceRequest line before its spans."""
    return (
        '{"resourceSpans":[{"resource":{"attributes":[' + _attrs(resource) + ']},"scopeSpans":[{"scope":'
        '{"name":' + _esc(SCOPE_NAME) + ',"version":' + _esc(SCOPE_VERSION) + '},"spans":['
    )


REQUEST_SUFFIX = "]}]}]}\n"


# ---------------------------------------------------------------------------------------------- decoding
def _decode_value(v: Mapping[str, Any]) -> Any:
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        return int(v["intValue"])
    if "boolValue" in v:
        return bool(v["boolValue"])
    if "doubleValue" in v:
        return float(v["doubleValue"])
    if "arrayValue" in v:
        return [_decode_value(x) for x in v["arrayValue"].get("values", [])]
    if "kvlistValue" in v:
        return decode_attributes(v["kvlistValue"].get("values", []))
    if "bytesValue" in v:
        return v["bytesValue"]
    return None


def decode_attributes(items: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    return {a["key"]: _decode_value(a.get("value", {})) for a in items}


def decode_request(obj: Mapping[str, Any]) -> list[tuple[dict[str, Any], SpanData]]:
    """(resource attributes, span) for each span of one OTLP-JSON ExportTraceServiceRequest."""
    out = []
    for rs in obj.get("resourceSpans", []):
        resource = decode_attributes(rs.get("resource", {}).get("attributes", []))
        for ss in rs.get("scopeSpans", []):
            for sp in ss.get("spans", []):
                status = sp.get("status") or {}
                out.append((resource, SpanData(
                    trace_id=int(sp["traceId"], 16),
                    span_id=int(sp["spanId"], 16),
                    parent_id=int(sp["parentSpanId"], 16) if sp.get("parentSpanId") else None,
                    name=sp.get("name", ""),
                    start_ns=int(sp.get("startTimeUnixNano", 0)),
                    end_ns=int(sp.get("endTimeUnixNano", 0)),
                    attributes=decode_attributes(sp.get("attributes", [])),
                    events=[(int(e.get("timeUnixNano", 0)), e.get("name", ""),
                             decode_attributes(e.get("attributes", []))) for e in sp.get("events", [])],
                    status_code=int(status.get("code", 0)),
                    status_message=status.get("message", ""),
                )))
    return out


def read_jsonl(path: str | Path) -> tuple[list[tuple[dict[str, Any], SpanData]], int]:
    """All spans of a ``spans.jsonl`` and the number of unreadable lines (a torn last line is tolerated)."""
    spans, bad = [], 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                spans.extend(decode_request(json.loads(line)))
            except (ValueError, KeyError, TypeError):
                bad += 1
    return spans, bad


# ---------------------------------------------------------------------------------------------- sinks
SLACK = 64  # redact a little past the limit so a secret cut by the limit is still recognised whole


class Captured:
    """A captured value not yet redacted nor cut (the writer thread does both, off the harness's path).

    ``text`` is the value itself when it is a string (strings are immutable: nothing to copy at call time;
    ``total`` is then its length) or a bounded repr made at call time (``total`` None).
    """

    __slots__ = ("limit", "text", "total")

    def __init__(self, text: str, limit: int, total: int | None):
        self.text, self.limit, self.total = text, limit, total

    def raw(self) -> str:
        """The text to redact: the capture up to a little past its limit."""
        text = self.text
        return text if len(text) <= self.limit + SLACK else text[: self.limit + SLACK]

    def cut(self, redacted: str) -> str:
        """Redacted first, then cut: a secret straddling the limit is still recognised whole."""
        if len(redacted) > self.limit:
            return redacted[: self.limit] + (f"…[{self.total} chars]" if self.total is not None else "…[cut]")
        return redacted

    def final(self, redact: Callable[[str], str] | None) -> str:
        """The redacted, cut text."""
        raw = self.raw()
        return self.cut(redact(raw) if redact is not None else raw)

    def __repr__(self) -> str:
        return f"Captured({self.text[:40]!r}…, limit={self.limit})"


def _json_value(v: Any) -> str:
    return _esc(v) if v.__class__ is str else json.dumps(v, ensure_ascii=False)


def finalize(span: SpanData, redact: Callable[[str], str] | None,
             redact_many: Callable[[list[str]], list[str]] | None = None) -> SpanData:
    """Turn a span's pending captures into their final, redacted strings (in place). With ``redact_many``
    every capture of the span is redacted in one call. ``rise.args`` becomes a JSON object (as
    ``json.dumps(..., ensure_ascii=False)`` would write it, without the encoder's per-call overhead)."""
    attrs = span.attributes
    args = attrs.get("rise.args")
    ret = attrs.get("rise.return")
    names: list[str] = []
    pending: list[Captured] = []
    if isinstance(args, dict):
        for k, v in args.items():
            if v.__class__ is Captured:
                names.append(k)
                pending.append(v)
    has_ret = ret.__class__ is Captured
    if has_ret:
        pending.append(ret)
    if pending:
        raws = [c.raw() for c in pending]
        if redact_many is not None:
            clean = redact_many(raws)
        elif redact is not None:
            clean = [redact(r) for r in raws]
        else:
            clean = raws
        if has_ret:
            attrs["rise.return"] = ret.cut(clean[-1])
        done = {k: c.cut(t) for k, c, t in zip(names, pending, clean)}
    else:
        done = {}
    if isinstance(args, dict):
        attrs["rise.args"] = "{" + ",".join(
            _esc(k) + ":" + (_esc(done[k]) if k in done else _json_value(v)) for k, v in args.items()) + "}"
    return span


class _Flush:
    __slots__ = ("event",)

    def __init__(self) -> None:
        self.event = threading.Event()


class JsonLinesSink:
    """Append ended spans to ``spans.jsonl`` as OTLP-JSON lines.

    ``mode="thread"`` (default): the harness's thread only enqueues the span; a writer thread redacts,
    encodes and appends it. The writer wakes on the first span, gathers what else ends in the next
    ``linger_sec`` (a step's spans come in bursts) and writes them with one ``os.write``: one wake-up and one
    system call per burst instead of per span. What a SIGKILL can lose is what ended in that last window.
    ``mode="sync"``: all of it on the caller's thread, one ``os.write`` per span before the wrapped call
    returns.

    ``redact`` is a ``str -> str`` function; when it is a bound method of an object that also has
    ``redact_many`` (``monitor.redact.Redactor``), a span's captures are redacted in one call.
    """

    def __init__(self, path: str | Path, resource: Mapping[str, Any], *,
                 redact: Callable[[str], str] | None = None, mode: str = "thread", linger_sec: float = 0.0):
        if mode not in ("thread", "sync"):
            raise ValueError(f"mode must be 'thread' or 'sync', not {mode!r}")
        if linger_sec < 0:
            raise ValueError(f"linger_sec must be >= 0, not {linger_sec!r}")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._prefix = request_prefix(resource)
        self.redact = redact
        self._redact_many = getattr(getattr(redact, "__self__", None), "redact_many", None)
        self.mode = mode
        self.linger_sec = linger_sec
        self.forwarders: list[OtlpHttpForwarder] = []
        self.spans_written = 0
        self.write_errors = 0
        self.spans_lost = 0  # spans a failed write (or a writer that did not finish in time) never put on disk
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._urgent = threading.Event()  # set by flush/shutdown: stop lingering, write now
        self._thread: threading.Thread | None = None
        if mode == "thread":
            self._thread = threading.Thread(target=self._run, name="rise-spans-writer", daemon=True)
            self._thread.start()
        # What a tracer calls for each ended span: in thread mode a bare queue put (one C call).
        self.submit: Callable[[SpanData], None] = self._queue.put if mode == "thread" else self._write_one

    def __call__(self, span: SpanData) -> None:
        self.submit(span)

    def _write_one(self, span: SpanData) -> None:
        self._write([span])

    def _line(self, span: SpanData) -> str:
        return self._prefix + encode_span(finalize(span, self.redact, self._redact_many)) + REQUEST_SUFFIX

    def _write(self, spans: list[SpanData]) -> None:
        if self._fd < 0:
            return
        lines, good = [], []
        for s in spans:  # a span that cannot be encoded is lost alone, not with the rest of its burst
            try:
                lines.append(self._line(s))
                good.append(s)
            except Exception as exc:  # noqa: BLE001 - the monitor must not crash the harness
                self.write_errors += 1
                self.spans_lost += 1
                if self.write_errors <= 3:
                    log.warning("monitor: could not encode span %s for %s: %r", s.name, self.path, exc)
        spans = good
        if not spans:
            return
        try:
            os.write(self._fd, "".join(lines).encode("utf-8", "replace"))
            self.spans_written += len(spans)
        except Exception as exc:  # noqa: BLE001 - a full disk must not crash the harness
            self.write_errors += 1
            self.spans_lost += len(spans)
            if self.write_errors <= 3:
                log.warning("monitor: could not write spans to %s: %s", self.path, exc)
            return
        for f in self.forwarders:
            for s in spans:
                f.add(s)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if self.linger_sec and isinstance(item, SpanData) and self._queue.empty():
                self._urgent.wait(self.linger_sec)  # let the rest of the burst end; the harness runs meanwhile
                self._urgent.clear()  # a flush that set it put its marker first: drained below
            batch: list[SpanData] = []
            stop = False
            flushes: list[_Flush] = []
            while True:  # drain what is already there into one write
                if item is None:
                    stop = True
                elif isinstance(item, _Flush):
                    flushes.append(item)
                else:
                    batch.append(item)
                if len(batch) >= 256:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if batch:
                self._write(batch)
            for f in flushes:
                f.event.set()
            if stop:
                return

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every span handed in so far is on disk."""
        if self._thread is None or not self._thread.is_alive():
            return True
        marker = _Flush()
        self._queue.put(marker)
        self._urgent.set()
        return marker.event.wait(timeout)

    def shutdown(self, timeout: float = 10.0) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(None)
            self._urgent.set()
            self._thread.join(timeout)
            if self._thread.is_alive():  # what is still queued will not reach the file
                self.spans_lost += self._queue.qsize()
        for f in self.forwarders:
            f.shutdown()
        if self._fd >= 0:
            try:
                os.fsync(self._fd)
            except OSError:
                pass
            os.close(self._fd)
            self._fd = -1


# ---------------------------------------------------------------------------------------------- OTLP/HTTP
def to_readable_spans(items: Sequence[tuple[Mapping[str, Any], SpanData]]) -> list:
    """SDK ``ReadableSpan`` objects for our spans (what ``OTLPSpanExporter.export`` takes)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

    scope = InstrumentationScope(SCOPE_NAME, SCOPE_VERSION)
    codes = {STATUS_UNSET: StatusCode.UNSET, STATUS_OK: StatusCode.OK, STATUS_ERROR: StatusCode.ERROR}
    resources: dict[int, Any] = {}
    out = []
    for resource_attrs, s in items:
        res = resources.get(id(resource_attrs))
        if res is None:
            res = resources[id(resource_attrs)] = Resource.create(dict(resource_attrs))
        flags = TraceFlags(TraceFlags.SAMPLED)
        ctx = SpanContext(s.trace_id, s.span_id, is_remote=False, trace_flags=flags)
        parent = SpanContext(s.trace_id, s.parent_id, is_remote=False, trace_flags=flags) if s.parent_id else None
        out.append(ReadableSpan(
            name=s.name, context=ctx, parent=parent, resource=res,
            attributes={k: v for k, v in s.attributes.items() if v is not None},
            events=[Event(n, a, t) for t, n, a in s.events],
            kind=SpanKind.INTERNAL, status=Status(codes.get(s.status_code, StatusCode.UNSET),
                                                  s.status_message or None),
            start_time=s.start_ns, end_time=s.end_ns or s.start_ns, instrumentation_scope=scope,
        ))
    return out


def otlp_http_configured(env: Mapping[str, str] | None = None) -> bool:
    """Whether the standard OTEL_* variables ask for OTLP export of traces."""
    from trials.telemetry import collector_from_env

    return collector_from_env(os.environ if env is None else env) is not None


def make_otlp_exporter(endpoint: str | None = None):
    """The SDK's OTLP/HTTP protobuf exporter; ``endpoint`` is a base URL or a full ``…/v1/traces`` URL."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    if endpoint and not endpoint.rstrip("/").endswith("/v1/traces"):
        endpoint = endpoint.rstrip("/") + "/v1/traces"
    return OTLPSpanExporter(endpoint=endpoint) if endpoint else OTLPSpanExporter()


class OtlpHttpForwarder:
    """Ship spans to a collector in batches from a daemon thread; never blocks or fails the harness."""

    def __init__(self, resource: Mapping[str, Any], exporter=None, *, interval_sec: float = 1.0,
                 max_batch: int = 256):
        self.resource = dict(resource)
        self.exporter = exporter or make_otlp_exporter()
        self.interval_sec, self.max_batch = interval_sec, max_batch
        self._queue: queue.SimpleQueue[SpanData | None] = queue.SimpleQueue()
        self.sent = self.failed = 0
        self._thread = threading.Thread(target=self._run, name="rise-otlp-forwarder", daemon=True)
        self._thread.start()

    def add(self, span: SpanData) -> None:
        self._queue.put(span)

    def _run(self) -> None:
        done = False
        while not done:
            batch: list[SpanData] = []
            try:
                item = self._queue.get(timeout=self.interval_sec)
                while True:
                    if item is None:
                        done = True
                        break
                    batch.append(item)
                    if len(batch) >= self.max_batch:
                        break
                    item = self._queue.get_nowait()
            except queue.Empty:
                pass
            if batch:
                self._export(batch)

    def _export(self, batch: list[SpanData]) -> None:
        from opentelemetry.sdk.trace.export import SpanExportResult

        try:
            result = self.exporter.export(to_readable_spans([(self.resource, s) for s in batch]))
        except Exception as exc:  # noqa: BLE001 - a collector problem is logged, never raised into the harness
            log.warning("OTLP export failed: %s", exc)
            result = None
        if result == SpanExportResult.SUCCESS:
            self.sent += len(batch)
        else:
            self.failed += len(batch)

    def shutdown(self, timeout: float = 10.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)
        try:
            self.exporter.shutdown()
        except Exception as exc:  # noqa: BLE001 - shutting down a failed exporter must not raise
            log.debug("OTLP exporter shutdown: %s", exc)


def export_file_to_collector(path: str | Path, endpoint: str, *, batch: int = 512) -> tuple[int, int]:
    """Send every span of a ``spans.jsonl`` to an OTLP/HTTP collector. Returns (sent, unreadable lines)."""
    from opentelemetry.sdk.trace.export import SpanExportResult

    items, bad = read_jsonl(path)
    exporter = make_otlp_exporter(endpoint)
    sent = 0
    try:
        for i in range(0, len(items), batch):
            chunk = items[i:i + batch]
            if exporter.export(to_readable_spans(chunk)) != SpanExportResult.SUCCESS:
                raise ConnectionError(f"the collector at {endpoint} refused or did not answer "
                                      f"(spans {i}..{i + len(chunk) - 1})")
            sent += len(chunk)
    finally:
        exporter.shutdown()
    return sent, bad
