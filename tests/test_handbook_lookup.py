"""Span → behaviour and behaviour → spans, over OTLP-JSON lines (the monitor's encoding) and flat span dicts."""

from __future__ import annotations

import json
from pathlib import Path

from handbook.lookup import SpanIndex, map_trial, read_spans, spans_of_behaviour
from handbook.model import load_handbook
from handbook.source import HarnessSource
from monitor.export import REQUEST_SUFFIX, SpanData, encode_span, request_prefix

TOY = Path(__file__).parent / "data" / "handbook_toy" / "toyharness"


def _otlp_line(span_id: int, attributes: dict, name: str = "span", parent: int | None = None) -> str:
    span = SpanData(trace_id=7, span_id=span_id, parent_id=parent, name=name, start_ns=span_id * 10,
                    end_ns=span_id * 10 + 5, attributes=attributes)
    return request_prefix({"rise.trial_id": "t1"}) + encode_span(span) + REQUEST_SUFFIX


def _code(module: str, qualname: str, episode: int, package: str = "toyharness") -> dict:
    path = f"/somewhere/{package}/{module.replace('.', '/')}.py"
    return {"code.function.name": f"{package}.{module}.{qualname}", "code.file.path": path, "rise.episode": episode}


def _trial(tmp_path: Path, lines: list[str]) -> Path:
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "spans.jsonl").write_text("".join(lines))
    return tmp_path


def test_boundary_from_explicit_attribute_name_or_code_location():
    index = SpanIndex(load_handbook(TOY))
    assert index.boundary("loop:Agent.step") == "loop:Agent.step"
    assert index.boundary({"name": "x", "attributes": {"rise.boundary": "picker:Picker.pick"}}) == \
        "picker:Picker.pick"
    assert index.boundary({"name": "parsing:parse_response", "attributes": {}}) == "parsing:parse_response"
    # the copy in an experiment is called `harness`: the package prefix does not matter
    flat = {"name": "Agent.step", "attributes": _code("loop", "Agent.step", 1, package="harness")}
    assert index.boundary(flat) == "loop:Agent.step"
    # a re-exported function is placed by the file it lives in
    where = {"code.function.name": "toyharness.picker.pick.Picker.pick",
             "code.file.path": "/x/toyharness/picker/pick.py"}
    assert [b.id for b in SpanIndex(load_handbook(TOY), HarnessSource.from_dir(TOY)).behaviours(
        {"name": "pick", "attributes": where})] == ["model.pick"]
    assert index.boundary({"name": "x", "attributes": {"code.function.name": "elsewhere.f"}}) is None


def test_map_trial_and_spans_of_behaviour(tmp_path):
    lines = [
        _otlp_line(1, {**_code("loop", "Agent.run", 0), "rise.boundary": "loop:Agent.run"}, "Agent.run"),
        _otlp_line(2, {**_code("loop", "Agent.step", 0), "rise.boundary": "loop:Agent.step"}, "Agent.step", 1),
        _otlp_line(3, {**_code("parsing", "parse_response", 0)}, "parse_response", 2),
        _otlp_line(4, {**_code("loop", "Agent.step", 1), "rise.boundary": "loop:Agent.step"}, "Agent.step", 1),
        json.dumps({"name": "call", "attributes": {"rise.boundary": "model_call:ModelCaller.call",
                                                   "rise.episode": 1}}) + "\n",
        _otlp_line(9, {**_code("unknown", "thing", 1)}, "thing"),
        '{"resourceSpans": [{"resource"',  # torn last line of a killed trial
    ]
    trial = _trial(tmp_path, lines)
    spans = read_spans(trial)
    assert len(spans.spans) == 6 and spans.skipped_lines == 1
    assert spans.spans[0].attributes["rise.trial_id"] == "t1"  # resource attributes reach the span
    hb = load_handbook(TOY)
    mapping = map_trial(hb, trial)
    counts = {bid: len(s) for bid, s in mapping.by_behaviour.items() if s}
    assert counts == {"loop.episodes": 3, "parse.json": 1, "model.call": 1}
    assert [s.name for s in mapping.unmapped] == ["thing"]
    steps = spans_of_behaviour(hb, trial, "loop.episodes", episode=1)
    assert [(s.name, s.episode, s.parent_id) for s in steps] == [("Agent.step", 1, format(1, "016x"))]


def test_behaviour_lookup_falls_back_to_functions():
    index = SpanIndex(load_handbook(TOY))
    # not a recorded span of any behaviour, but a function of loop.dispatch
    assert [b.id for b in index.behaviours("loop:Agent.execute_commands")] == ["loop.dispatch"]
