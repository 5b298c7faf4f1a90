"""Lookups for analysis: which behaviour a recorded span evidences, and which spans of a trial evidence a behaviour.

Spans come from ``<trial>/agent/spans.jsonl``. The reader takes each line as an OTLP-JSON
``ExportTraceServiceRequest`` (``resourceSpans → scopeSpans → spans``, attributes as ``[{key, value:
{stringValue|intValue|...}}]``), a single OTLP span, or a flat span dict (``attributes`` as a mapping); a line
cut short by a killed trial is skipped and counted. A span is placed on a boundary by, in order: an explicit
``rise.boundary`` attribute, a span name the Handbook names (a ``module:qualname`` reference, or a span the
monitor opens itself such as ``rise.trial``), or its
``code.function.name`` (qualname, possibly prefixed by the package's dotted module path) together with
``code.file.path`` (matched against the module's file inside the package).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .model import FUNCTION_REF, MONITOR_SPAN, Behaviour, Handbook
from .source import HarnessSource

SPANS_FILE = "spans.jsonl"


@dataclass
class SpanRecord:
    """One span, flattened from whichever encoding it was stored in."""

    name: str
    attributes: dict[str, Any]
    span_id: str = ""
    parent_id: str = ""
    trace_id: str = ""
    start_ns: int = 0
    end_ns: int = 0
    status: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def function(self) -> str:
        return str(self.attributes.get("code.function.name") or self.attributes.get("code.function") or "")

    @property
    def file(self) -> str:
        return str(self.attributes.get("code.file.path") or self.attributes.get("code.filepath") or "")

    @property
    def episode(self) -> int | None:
        value = self.attributes.get("rise.episode")
        return int(value) if isinstance(value, int | str) and str(value).lstrip("-").isdigit() else None


def _any_value(value: dict[str, Any]) -> Any:
    """Decode an OTLP-JSON AnyValue."""
    if not isinstance(value, dict):
        return value
    for key in ("stringValue", "boolValue", "doubleValue", "bytesValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        return int(value["intValue"])
    if "arrayValue" in value:
        return [_any_value(v) for v in value["arrayValue"].get("values", [])]
    if "kvlistValue" in value:
        return _attributes(value["kvlistValue"].get("values", []))
    return None


def _attributes(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return dict(raw)
    if isinstance(raw, list):
        return {item["key"]: _any_value(item.get("value", {})) for item in raw if isinstance(item, dict)
                and "key" in item}
    return {}


def _status(raw: Any) -> str:
    if isinstance(raw, dict):
        code = raw.get("code", raw.get("status_code", ""))
        return {0: "unset", 1: "ok", 2: "error", "STATUS_CODE_ERROR": "error", "STATUS_CODE_OK": "ok",
                "STATUS_CODE_UNSET": "unset"}.get(code, str(code).lower())
    return str(raw or "").lower()


def _span(raw: dict[str, Any]) -> SpanRecord:
    context = raw.get("context") if isinstance(raw.get("context"), dict) else {}
    return SpanRecord(
        name=str(raw.get("name", "")),
        attributes=_attributes(raw.get("attributes", {})),
        span_id=str(raw.get("spanId") or raw.get("span_id") or context.get("span_id") or ""),
        parent_id=str(raw.get("parentSpanId") or raw.get("parent_span_id") or raw.get("parent_id") or ""),
        trace_id=str(raw.get("traceId") or raw.get("trace_id") or context.get("trace_id") or ""),
        start_ns=int(raw.get("startTimeUnixNano") or raw.get("start_time_unix_nano") or raw.get("start_ns") or 0),
        end_ns=int(raw.get("endTimeUnixNano") or raw.get("end_time_unix_nano") or raw.get("end_ns") or 0),
        status=_status(raw.get("status")),
        events=list(raw.get("events") or []),
    )


def spans_from_obj(obj: Any) -> list[SpanRecord]:
    """The spans in one decoded JSON line, whatever its encoding."""
    if not isinstance(obj, dict):
        return []
    if "resourceSpans" in obj or "resource_spans" in obj:
        out = []
        for rs in obj.get("resourceSpans") or obj.get("resource_spans") or []:
            resource = _attributes((rs.get("resource") or {}).get("attributes", []))
            for ss in rs.get("scopeSpans") or rs.get("scope_spans") or []:
                for raw in ss.get("spans", []):
                    span = _span(raw)
                    for key, value in resource.items():  # resource attributes (trial id) under the span's own
                        span.attributes.setdefault(key, value)
                    out.append(span)
        return out
    if "name" in obj:
        return [_span(obj)]
    return []


@dataclass
class SpanFile:
    spans: list[SpanRecord]
    skipped_lines: int = 0


def read_spans(path: str | os.PathLike) -> SpanFile:
    """All spans of a spans.jsonl file (or a trial directory, or its agent/ directory)."""
    p = Path(path)
    if p.is_dir():
        p = next((c for c in (p / "agent" / SPANS_FILE, p / SPANS_FILE) if c.is_file()), p / "agent" / SPANS_FILE)
    out = SpanFile([])
    if not p.is_file():
        return out
    for line in p.read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            out.spans.extend(spans_from_obj(json.loads(line)))
        except (json.JSONDecodeError, TypeError, ValueError):
            out.skipped_lines += 1
    return out


def _ref_file(ref: str) -> tuple[str, str]:
    """(qualname, file suffixes) a reference expects: ``midharness.actor:f`` → ``midharness/actor.py``."""
    module, qualname = ref.split(":", 1)
    return qualname, module.replace(".", "/")


class SpanIndex:
    """Maps spans (or boundary strings) to the Handbook's behaviours."""

    def __init__(self, handbook: Handbook, source: HarnessSource | None = None):
        self.handbook = handbook
        refs = {r for _, b in handbook.iter_behaviours() for r in b.spans + b.functions}
        # with the source, a re-exported name (picker:build) and its home (picker.impl:build) are one function
        self._canon: dict[str, str] = {}
        if source is not None:
            for ref in list(refs):
                res = source.resolve(ref)
                if res.definition is not None:
                    self._canon[ref] = res.definition.ref
            refs |= set(source.definitions())
        self.refs = refs
        self._by_qualname: dict[str, list[str]] = {}
        for ref in refs:
            if ":" in ref:  # monitor spans (rise.trial) are matched by name only
                self._by_qualname.setdefault(ref.split(":", 1)[1], []).append(ref)

    def boundary(self, span: SpanRecord | dict[str, Any] | str) -> str | None:
        """The ``module:qualname`` a span records, or None when it cannot be told."""
        if isinstance(span, str):
            return span if FUNCTION_REF.match(span) or MONITOR_SPAN.match(span) else None
        if isinstance(span, dict):
            found = spans_from_obj(span)
            if not found:
                return None
            span = found[0]
        explicit = span.attributes.get("rise.boundary")
        if isinstance(explicit, str) and FUNCTION_REF.match(explicit):
            return explicit
        if span.name in self.refs and (FUNCTION_REF.match(span.name) or MONITOR_SPAN.match(span.name)):
            return span.name
        function = span.function.replace(":", ".")
        if not function:
            return None
        path = span.file.replace("\\", "/")
        path_noext = path.removesuffix(".py")
        best: tuple[int, str] | None = None
        parts = function.split(".")
        # the qualname is some tail of the dotted function name; try the longest tails first
        for i in range(len(parts)):
            qualname = ".".join(parts[i:])
            for ref in self._by_qualname.get(qualname, []):
                module_path = _ref_file(ref)[1]
                prefix = ".".join(parts[:i]).replace(".", "/")
                suffixes = ("/" + module_path, "/" + module_path + "/__init__")
                if path_noext and (path_noext.endswith(suffixes) or path_noext == module_path):
                    score = len(module_path) + 1000
                elif prefix and (prefix.endswith("/" + module_path) or prefix == module_path):
                    score = len(module_path)
                else:
                    continue
                if best is None or score > best[0]:
                    best = (score, ref)
            if best:
                return best[1]
        return None

    def behaviours(self, span: SpanRecord | dict[str, Any] | str) -> list[Behaviour]:
        """Behaviours a span evidences: those naming its boundary as a span, else as a function."""
        boundary = self.boundary(span)
        if boundary is None:
            return []
        found = self.handbook.behaviours_for_span(boundary) or self.handbook.behaviours_for_function(boundary)
        if found or not self._canon:
            return found
        canon = self._canon.get(boundary, boundary)
        spans = [b for _, b in self.handbook.iter_behaviours()
                 if any(self._canon.get(r, r) == canon for r in b.spans)]
        return spans or [b for _, b in self.handbook.iter_behaviours()
                         if any(self._canon.get(r, r) == canon for r in b.functions)]


@dataclass
class TrialMapping:
    by_behaviour: dict[str, list[SpanRecord]]
    unmapped: list[SpanRecord]
    total: int
    skipped_lines: int = 0


def map_spans(handbook: Handbook, spans: Iterable[SpanRecord], source: HarnessSource | None = None,
              skipped_lines: int = 0) -> TrialMapping:
    """Group spans by the behaviours they evidence; spans that map to none are kept apart."""
    index = SpanIndex(handbook, source)
    out = TrialMapping({b.id: [] for _, b in handbook.iter_behaviours()}, [], 0, skipped_lines)
    for span in spans:
        out.total += 1
        found = index.behaviours(span)
        if not found:
            out.unmapped.append(span)
        for behaviour in found:
            out.by_behaviour[behaviour.id].append(span)
    return out


def map_trial(handbook: Handbook, trial_dir: str | os.PathLike,
              source: HarnessSource | None = None) -> TrialMapping:
    """Read a trial's spans and group them by behaviour."""
    spans = read_spans(trial_dir)
    return map_spans(handbook, spans.spans, source, spans.skipped_lines)


def spans_of_behaviour(handbook: Handbook, trial_dir: str | os.PathLike, behaviour_id: str,
                       episode: int | None = None) -> list[SpanRecord]:
    """The spans of a trial that evidence ``behaviour_id`` (optionally in one episode), in start order."""
    handbook.behaviour(behaviour_id)  # KeyError naming the known ids
    spans = map_trial(handbook, trial_dir).by_behaviour[behaviour_id]
    if episode is not None:
        spans = [s for s in spans if s.episode == episode]
    return sorted(spans, key=lambda s: s.start_ns)
