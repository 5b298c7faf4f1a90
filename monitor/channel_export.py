"""Live spans from a confined harness: an OTLP exporter that posts through the trial channel.

A confined harness has no network and no ``OTEL_*`` variables; when the runner has a collector, its channel
forwards ``POST http://telemetry.rise/v1/traces`` there (trials/telemetry.py). :func:`channel_collector` asks
the channel once whether it has one; :class:`ChannelSpanExporter` is what :class:`monitor.export.OtlpHttpForwarder`
then exports with: the SDK's protobuf encoding of the spans, one request per batch over the unix socket, from
the forwarder's thread, so the harness never waits on it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import httpx

from trials.environments.channel import channel_transport
from trials.telemetry import TELEMETRY_HOST, TRACES_PATH

log = logging.getLogger(__name__)
PROBE_TIMEOUT_SEC = 2.0
EXPORT_TIMEOUT_SEC = 10.0


def channel_collector(env: Mapping[str, str]) -> str | None:
    """The channel socket when the harness is confined and the runner's channel has a collector, else None."""
    sock = env.get("RISE_CHANNEL")
    if not sock:
        return None
    try:
        with httpx.Client(transport=channel_transport(sock, sync=True), timeout=PROBE_TIMEOUT_SEC) as client:
            ok = client.get(f"http://{TELEMETRY_HOST}/").status_code == 200
    except httpx.HTTPError as exc:
        log.debug("monitor: the trial channel did not answer the collector probe: %s", exc)
        return None
    return sock if ok else None


class ChannelSpanExporter:
    """A SpanExporter (``export(spans) -> SpanExportResult``, ``shutdown()``) that posts OTLP protobuf through
    the trial channel's ``telemetry.rise`` route."""

    def __init__(self, sock: str):
        self._client = httpx.Client(transport=channel_transport(sock, sync=True), timeout=EXPORT_TIMEOUT_SEC)

    def export(self, spans: Sequence) -> object:
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
        from opentelemetry.sdk.trace.export import SpanExportResult

        body = encode_spans(spans).SerializeToString()
        try:
            resp = self._client.post(f"http://{TELEMETRY_HOST}{TRACES_PATH}", content=body,
                                     headers={"content-type": "application/x-protobuf"})
        except httpx.HTTPError as exc:
            log.warning("monitor: live span export through the channel failed: %s", exc)
            return SpanExportResult.FAILURE
        if resp.status_code >= 300:
            log.warning("monitor: the collector answered %s: %s", resp.status_code, resp.text[:200])
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self._client.close()
