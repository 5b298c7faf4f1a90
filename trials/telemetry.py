"""The OTLP collector a confined harness's spans reach live, through its trial channel (host ``telemetry.rise``).

A confined harness has no network and does not get the runner's ``OTEL_*`` variables (trials/confine.py), so it
cannot reach a collector itself (issue 40 item 4: spans showed up in Phoenix only after the trial, by ``rise trace
export``). The runner reads the standard variables once (:func:`collector_from_env`) and its channel forwards
``POST http://telemetry.rise/v1/traces`` (an OTLP/HTTP export request, protobuf or JSON) to that collector, with
the collector's headers added by the runner, so a collector's key never enters the sandbox either. The URL and the
headers are fixed by the runner; the harness chooses only the body. ``GET http://telemetry.rise/`` answers 200
when a collector is configured and 404 when not, so the harness's monitor asks once and stays quiet otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import unquote

from pydantic import BaseModel

TELEMETRY_HOST = "telemetry.rise"
TRACES_PATH = "/v1/traces"
CONTENT_TYPES = ("application/x-protobuf", "application/json")


class Collector(BaseModel):
    """Where the runner sends a harness's spans: the full ``…/v1/traces`` URL and the headers to add."""

    url: str
    headers: dict[str, str] = {}


def collector_from_env(env: Mapping[str, str]) -> Collector | None:
    """The collector the standard OpenTelemetry variables name for traces, or None (unset, or
    ``OTEL_TRACES_EXPORTER`` without ``otlp``). Same rules as the SDK's OTLP/HTTP exporter: the traces endpoint
    is used as given, the generic one gets ``/v1/traces`` appended; headers are ``k=v`` pairs, comma-separated,
    values URL-encoded."""
    if "otlp" not in env.get("OTEL_TRACES_EXPORTER", "otlp").lower().split(","):
        return None
    url = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if not url and env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        url = env["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + TRACES_PATH
    if not url:
        return None
    raw = env.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS") or env.get("OTEL_EXPORTER_OTLP_HEADERS") or ""
    headers = {}
    for pair in filter(None, (p.strip() for p in raw.split(","))):
        name, sep, value = pair.partition("=")
        if sep and name.strip():
            headers[name.strip().lower()] = unquote(value.strip())
    return Collector(url=url, headers=headers)
