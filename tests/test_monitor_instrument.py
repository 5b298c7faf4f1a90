"""Instrumentation by recording config, in process, on the fixture package tests/data/monitor_fixture/fixpkg."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from monitor.config import RecordingConfig, RecordingConfigError
from monitor.export import STATUS_ERROR, SpanData
from monitor.instrument import Instrumentation, bounded_repr, capture
from monitor.redact import Redactor
from monitor.tracer import LeanTracer, SdkTracer
from trials.harness_api import TRIAL_ID

FIXTURE_ROOT = Path(__file__).parent / "data" / "monitor_fixture"
FIXTURE = FIXTURE_ROOT / "fixpkg"


@pytest.fixture
def fixpkg(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURE_ROOT))
    yield "fixpkg"
    for name in [n for n in sys.modules if n == "fixpkg" or n.startswith("fixpkg.")]:
        del sys.modules[name]


def instrument(package: str, config: RecordingConfig, backend: str = "lean", env=None):
    spans: list[SpanData] = []
    tracer = LeanTracer(spans.append) if backend == "lean" else SdkTracer(spans.append)
    inst = Instrumentation(package, config, tracer, Redactor(env or {}), default_model="default-model")
    inst.apply()
    return inst, spans


def fixture_config() -> RecordingConfig:
    return RecordingConfig.load(FIXTURE / "recording.toml")


def by_name(spans: list[SpanData]) -> dict[str, list[SpanData]]:
    out: dict[str, list[SpanData]] = {}
    for s in spans:
        out.setdefault(s.name, []).append(s)
    return out


@pytest.mark.parametrize("backend", ["lean", "sdk"])
def test_every_boundary_kind_is_recorded_with_parents(fixpkg, backend):
    inst, spans = instrument(fixpkg, fixture_config(), backend)
    try:
        from fixpkg.loop import Agent

        token = TRIAL_ID.set("trial-x")
        try:
            assert asyncio.run(Agent("plain", episodes=2).run()) == 2
        finally:
            TRIAL_ID.reset(token)
    finally:
        inst.remove()
    names = by_name(spans)
    assert set(names) == {b.target for b in fixture_config().boundary} - {"tools:explode"}
    # shout is reached through `from .tools import shout`, REGISTRY["shout"] and tools.shout: 3 per step
    assert len(names["tools:shout"]) == 6
    assert len(names["tools:fetch"]) == 4 and len(names["tools:Helper.call"]) == 4
    run = names["loop:Agent.run"][0]
    steps = names["loop:Agent.step"]
    assert all(s.parent_id == run.span_id and s.trace_id == run.trace_id for s in steps)
    for child in names["tools:shout"] + names["tools:fetch"] + names["tools:Helper.double"]:
        parent = next(s for s in steps if s.span_id == child.parent_id)  # fetch runs in TaskGroup tasks
        assert parent.attributes["rise.episode"] == child.attributes["rise.episode"]
    a = steps[1].attributes
    assert a["rise.episode"] == 1 and a["rise.trial_id"] == "trial-x"
    assert a["code.function.name"] == "fixpkg.loop.Agent.step"
    assert a["code.file.path"].endswith("fixpkg/loop.py") and a["code.line.number"] > 1
    assert json.loads(a["rise.args"]) == {"episode": "1"}  # self is not captured
    assert a["rise.return"] == "OK"
    describe = names["tools:Helper.describe"][0]  # inherited from Base, shadowed on Helper
    assert describe.attributes["rise.return"] == "<Helper>"
    assert names["tools:Helper.double"][1].attributes["rise.return"] == "2"
    assert json.loads(names["tools:Helper.make"][0].attributes["rise.args"]) == {"model": "fixture-model"}


def test_uninstrumented_after_remove(fixpkg):
    inst, spans = instrument(fixpkg, fixture_config())
    from fixpkg import loop, tools

    assert loop.shout is not tools.__dict__["explode"] and hasattr(loop.shout, "__rise_boundary__")
    inst.remove()
    assert not hasattr(loop.shout, "__rise_boundary__") and not hasattr(tools.REGISTRY["shout"], "__rise_boundary__")
    assert "describe" not in vars(tools.Helper)
    asyncio.run(loop.Agent("plain", episodes=1).run())
    assert spans == []


def test_genai_attributes(fixpkg):
    inst, spans = instrument(fixpkg, fixture_config())
    try:
        from fixpkg.loop import Agent

        asyncio.run(Agent("plain", episodes=1).run())
    finally:
        inst.remove()
    single, multi = by_name(spans)["tools:Helper.call"]
    assert single.attributes["gen_ai.operation.name"] == "chat"
    assert single.attributes["gen_ai.request.model"] == "fixture-model"  # from self.model
    assert single.attributes["gen_ai.usage.input_tokens"] == 10
    assert single.attributes["gen_ai.usage.output_tokens"] == 3
    assert single.attributes["gen_ai.request.choice.count"] == 1 and single.attributes["rise.candidates"] == 1
    assert multi.attributes["gen_ai.request.choice.count"] == 3 and multi.attributes["rise.candidates"] == 3
    assert multi.attributes["gen_ai.request.temperature"] == 0.8
    assert multi.attributes["gen_ai.usage.output_tokens"] == 1 + 2 + 3
    assert multi.attributes["gen_ai.usage.input_tokens"] == 10  # one shared prompt
    assert multi.attributes["gen_ai.response.finish_reasons"] == ["stop"] * 3


@pytest.mark.parametrize("backend", ["lean", "sdk"])
def test_exception_is_recorded_and_reraised_unchanged(fixpkg, backend):
    inst, spans = instrument(fixpkg, fixture_config(), backend)
    try:
        from fixpkg import loop, tools

        with pytest.raises(ValueError, match="exploded: on purpose") as info:
            asyncio.run(loop.Agent("boom", episodes=3).run())
        assert info.type is ValueError
        with pytest.raises(ValueError) as direct:
            tools.explode("x")
        assert str(direct.value) == "exploded: x"
    finally:
        inst.remove()
    names = by_name(spans)
    boom = names["tools:explode"][0]
    assert boom.status_code == STATUS_ERROR and "ValueError" in boom.status_message
    (_t, ev_name, ev) = boom.events[0]
    assert ev_name == "exception" and ev["exception.type"] == "ValueError"
    assert ev["exception.message"] == "exploded: on purpose" and "Traceback" in ev["exception.stacktrace"]
    assert boom.attributes["rise.episode"] == 1
    assert [s.status_code for s in names["loop:Agent.step"]] == [0, STATUS_ERROR]
    assert names["loop:Agent.run"][0].status_code == STATUS_ERROR


def test_cancellation_is_not_an_error(fixpkg):
    inst, spans = instrument(fixpkg, fixture_config())
    try:
        from fixpkg import tools

        async def cancel_fetch():
            task = asyncio.create_task(tools.fetch("k", delay=10))
            await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(cancel_fetch())
    finally:
        inst.remove()
    (span,) = spans
    assert span.attributes["rise.cancelled"] is True and span.status_code == 0


def test_missing_boundaries_are_clear_errors(fixpkg, tmp_path):
    cases = {
        "tools:nope": "fixpkg.tools.nope does not exist",
        "tools:Helper.nope": "fixpkg.tools.Helper.nope does not exist",
        "tools:Nope.call": "has no Nope",
        "missing_mod:f": "no module fixpkg.missing_mod",
        "tools:REGISTRY": "not a function",
    }
    for target, needle in cases.items():
        path = tmp_path / "recording.toml"
        path.write_text(f'[[boundary]]\ntarget = "tools:shout"\n\n[[boundary]]\ntarget = "{target}"\n')
        config = RecordingConfig.load(path)
        inst = Instrumentation(fixpkg, config, LeanTracer(lambda s: None), Redactor({}), config_path=path)
        with pytest.raises(RecordingConfigError) as info:
            inst.apply()
        inst.remove()
        message = str(info.value)
        assert str(path) in message and "boundary[1].target" in message and target in message
        assert needle in message, message


def test_bounded_capture_of_large_values():
    history = [{"role": "user", "content": "x" * 100_000} for _ in range(1000)]
    text = capture(history, 300, lambda s: s)
    assert len(text) <= 300 + 20 and text.endswith("…[cut]")
    assert capture("y" * 5000, 100, lambda s: s) == "y" * 100 + "…[5000 chars]"
    assert bounded_repr({"a": [1, 2, (3, None)]}, 100) == "{'a': [1, 2, (3, None)]}"

    class Boom:
        def __repr__(self):
            raise RuntimeError("no")

    assert "repr failed" in bounded_repr(Boom(), 100)


def test_secrets_in_arguments_are_redacted(fixpkg, monkeypatch):
    key = "sk-planted0123456789abcdefXYZ"
    monkeypatch.setenv("FIXTURE_API_KEY", key)
    inst, spans = instrument(fixpkg, fixture_config(), env={"FIXTURE_API_KEY": key})
    try:
        from fixpkg.loop import Agent

        asyncio.run(Agent("secret", episodes=1).run())
    finally:
        inst.remove()
    dump = json.dumps([s.attributes for s in spans])
    assert key not in dump and "abcdefghijklmnop" not in dump
    assert "[REDACTED]" in dump
