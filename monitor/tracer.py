"""Two span backends behind one tiny interface: ``start(name, attrs) -> handle`` and ``finish(handle, ...)``.

- ``LeanTracer`` (default): our own span records and a context variable for the current span. It produces
  the same OpenTelemetry data (W3C 128/64-bit ids, parent links, attributes, events, status) at a fraction of
  the SDK's per-span cost, which matters because boundaries like ``observation:limit_output`` run many times
  per step and the budget is ≤ 30 µs per span.
- ``SdkTracer`` (``backend = "sdk"`` in recording.toml): the OpenTelemetry SDK tracer with a span processor
  that hands finished spans to the same sink. Slower, but spans created by other OTel-instrumented code in
  the harness process (e.g. an HTTP client instrumentation) nest under ours.

Both hand every ended span to ``sink(SpanData)`` synchronously (``monitor.export.JsonLinesSink``).
"""

from __future__ import annotations

import contextvars
import logging
import os
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

from .export import STATUS_ERROR, STATUS_UNSET, SpanData

log = logging.getLogger(__name__)
Sink = Callable[[SpanData], None]
ErrorInfo = tuple[str, str, str]  # (exception.type, exception.message, exception.stacktrace)

_CURRENT: contextvars.ContextVar[SpanData | None] = contextvars.ContextVar("rise_current_span", default=None)
# Own generator: a harness that calls random.seed() must not make span ids repeat across trials.
_rng = random.Random(os.urandom(16))


_bits = _rng.getrandbits
_time_ns = time.time_ns


def _new_id(bits: int) -> int:
    while True:
        value = _bits(bits)
        if value:
            return value


class LeanTracer:
    """Span records with parent/child links through a context variable (correct across asyncio tasks)."""

    backend = "lean"

    def __init__(self, sink: Sink):
        self.sink = sink

    def start(self, name: str, attributes: dict[str, Any],
              static: Mapping[str, Any] | None = None) -> tuple[SpanData, contextvars.Token]:
        """Open a span. ``static``: the boundary's fixed attributes, already the first entries of
        ``attributes`` (the encoder writes them from a cache)."""
        parent = _CURRENT.get()
        span = SpanData(
            parent.trace_id if parent is not None else _new_id(128),
            _bits(64) or _new_id(64),  # inline: one call fewer per span (0 is not a valid id)
            parent.span_id if parent is not None else None,
            name, _time_ns(), 0, attributes, [], STATUS_UNSET, "", static,
        )
        return span, _CURRENT.set(span)

    def finish(self, handle: tuple[SpanData, contextvars.Token], extra: Mapping[str, Any] | None,
               error: ErrorInfo | None = None, *, error_status: bool = True) -> None:
        span, token = handle
        span.end_ns = _time_ns()
        try:
            _CURRENT.reset(token)
        except ValueError:  # finished from another context (should not happen); keep the span anyway
            pass
        if extra:
            span.attributes.update(extra)
        if error is not None:
            etype, message, stack = error
            span.events.append((span.end_ns, "exception", {
                "exception.type": etype, "exception.message": message, "exception.stacktrace": stack,
            }))
            if error_status:
                span.status_code, span.status_message = STATUS_ERROR, f"{etype}: {message}"[:500]
        self.sink(span)

    @staticmethod
    def current() -> SpanData | None:
        return _CURRENT.get()

    def shutdown(self) -> None:
        pass


class SdkTracer:
    """The OpenTelemetry SDK tracer feeding the same sink through a span processor."""

    backend = "sdk"

    def __init__(self, sink: Sink, resource: Mapping[str, Any] | None = None):
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

        from .export import SCOPE_NAME, SCOPE_VERSION

        self.sink = sink
        outer = self

        class _ToSink(SpanProcessor):
            def on_end(self, span) -> None:  # ReadableSpan → SpanData
                status = span.status.status_code.value if span.status is not None else STATUS_UNSET
                outer.sink(SpanData(
                    span.context.trace_id, span.context.span_id,
                    span.parent.span_id if span.parent is not None else None,
                    span.name, span.start_time or 0, span.end_time or 0, dict(span.attributes or {}),
                    [(e.timestamp, e.name, dict(e.attributes or {})) for e in span.events],
                    status, (span.status.description or "") if span.status is not None else "",
                ))

        self.provider = TracerProvider(resource=Resource.create(dict(resource or {})))
        self.provider.add_span_processor(_ToSink())
        self._tracer = self.provider.get_tracer(SCOPE_NAME, SCOPE_VERSION)

    def start(self, name: str, attributes: dict[str, Any], static: Mapping[str, Any] | None = None):
        from opentelemetry import context, trace

        span = self._tracer.start_span(name, attributes=attributes, record_exception=False,
                                       set_status_on_exception=False)
        return span, context.attach(trace.set_span_in_context(span))

    def finish(self, handle, extra: Mapping[str, Any] | None, error: ErrorInfo | None = None, *,
               error_status: bool = True) -> None:
        from opentelemetry import context
        from opentelemetry.trace import Status, StatusCode

        span, token = handle
        if extra:
            span.set_attributes({k: v for k, v in extra.items() if v is not None})
        if error is not None:
            etype, message, stack = error
            span.add_event("exception", {"exception.type": etype, "exception.message": message,
                                         "exception.stacktrace": stack})
            if error_status:
                span.set_status(Status(StatusCode.ERROR, f"{etype}: {message}"[:500]))
        try:
            context.detach(token)
        except ValueError:  # detached from another context; the SDK has logged it
            log.debug("monitor: span context detached out of order")
        span.end()

    @staticmethod
    def current():
        from opentelemetry import trace

        return trace.get_current_span()

    def shutdown(self) -> None:
        self.provider.shutdown()


def make_tracer(backend: str, sink: Sink, resource: Mapping[str, Any] | None = None):
    return SdkTracer(sink, resource) if backend == "sdk" else LeanTracer(sink)
