"""A real trial of the seed harness through monitor.host: scripted model over real HTTP, the local bwrap
sandbox with real tmux, the real runner. Spans for every configured boundary, each linked to its step."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from monitor.config import RecordingConfig
from monitor.redact import scan_for_leaks
from monitor.store import TrialTrace
from monitor.view import render_steps
from tests.fakes.openai_server import ScriptedError, ScriptedServer
from trials.endpoints.spec import EndpointSpec

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "harness_seed"
KEY = "sk-h7PLANTEDkeyNEVERinTRACES0123456789"
pytestmark = [pytest.mark.tmux, pytest.mark.sandbox]


def _parts_missing() -> str | None:
    if shutil.which("tmux") is None:
        return "tmux is not installed"
    from trials.environments.local import bwrap_available

    if not bwrap_available():
        return "bubblewrap cannot create a sandbox here"
    if not (SEED / "main.py").is_file():
        return "harness_seed/main.py not there yet"
    return None


def reply(keystrokes: str | None, complete: bool = False, duration: float = 0.3) -> str:
    commands = [{"keystrokes": keystrokes, "duration": duration}] if keystrokes else []
    return json.dumps({"analysis": "Looking at the terminal.", "plan": "Write the file, then check it.",
                       "commands": commands, "task_complete": complete})


SOLVE = reply("printf 'Hello, world!\\n' > /app/hello.txt; cat /app/hello.txt\n")
SOLVE_ECHO = reply("echo 'Hello, world!' > /app/hello.txt\n")
DONE = reply(None, complete=True)


class Model:
    """Generator replies in order; verifier duels (max_tokens=1) answer A; summary sub-calls get prose."""

    def __init__(self, generator: list, candidates: int = 1):
        self.generator, self.candidates = list(generator), candidates

    def __call__(self, body: dict):
        if body.get("max_tokens") == 1:
            return "A"
        if body.get("n", 1) == 1 and self.candidates > 1:
            return "The task is to create /app/hello.txt. It was written with printf; it is done."
        item = self.generator.pop(0) if len(self.generator) > 1 else self.generator[0]
        return item


def run_seed_trial(tmp_path: Path, monkeypatch, model: Model, settings: dict, *, timeout: float | None = None):
    from monitor.agents import resolve_agent
    from trials.runner import run_trial
    from trials.tasks.load import load_task

    monkeypatch.setenv("H7_PLANTED_API_KEY", KEY)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    task = load_task(REPO / "data" / "starter" / "hello-file")
    trial_dir = tmp_path / "job" / "hello-file__r1"
    with ScriptedServer(model, model="scripted-model", api_key=KEY) as srv:
        endpoint = EndpointSpec(base_url=srv.base_url, model="scripted-model", api_key_env="H7_PLANTED_API_KEY")
        res = asyncio.run(run_trial(task, resolve_agent("seed"), endpoint, trial_dir, "local", None,
                                    settings=settings, agent_timeout_sec=timeout))
    return res, trial_dir


def check_linked(trace: TrialTrace) -> None:
    agent_steps = [s for s in trace.steps if s.get("source") == "agent"]
    assert agent_steps, "the trajectory has no agent steps"
    assert trace.unlinked() == [], "spans with an episode that no trajectory step has"
    for step in agent_steps:
        (span,) = [s for s in trace.spans_for_step(step) if s.boundary == "loop:Agent.step"]
        assert span.trial_id == step["trial_id"]


def test_seed_trial_spans_cover_every_boundary(tmp_path, monkeypatch):
    if (why := _parts_missing()):
        pytest.skip(why)
    config = RecordingConfig.load(SEED / "recording.toml")
    seen: set[str] = set()

    # 1. the base agent (n = 1): solve, claim, confirm
    res, trial = run_seed_trial(tmp_path / "a", monkeypatch, Model([SOLVE, DONE, DONE]), {})
    assert res.status == "passed", res.model_dump_json(indent=1)
    trace = TrialTrace.load(trial)
    assert trace.bad_lines == 0
    check_linked(trace)
    seen |= {s.boundary for s in trace.spans}
    call = trace.spans_of("model_call:ModelCaller.call", episode=0)[0]
    assert call.attributes["gen_ai.request.model"] == "scripted-model"
    assert call.attributes["gen_ai.operation.name"] == "chat"
    assert call.attributes["gen_ai.usage.input_tokens"] > 0 and call.attributes["gen_ai.usage.output_tokens"] > 0
    assert call.attributes["code.function.name"] == "harness_seed.model_call.ModelCaller.call"
    stages = [stage for stage, _ in trace.path_from_response(0)]
    for stage in ("model", "parse", "execute", "dispatch", "capture", "observation"):
        assert stage in stages, stages
    (sent,) = trace.spans_of("tmux:TmuxSession.send_keys", episode=0)
    assert "/app/hello.txt" in sent.args["keys"]
    view = render_steps(trace)
    assert "printf 'Hello, world!\\n' > /app/hello.txt" in view and "Hello, world!" in view

    # 2. Mid-Harness (n = 2, pairwise) with a context overflow in episode 1: an exception inside a traced
    #    function (ModelCaller.sample) is an error span, and the trial still passes and writes its result.
    overflow = ScriptedError.context_length_vllm(limit=8192, requested=9000)
    model = Model([[SOLVE, SOLVE_ECHO], overflow, [DONE, DONE]], candidates=2)
    res, trial = run_seed_trial(tmp_path / "b", monkeypatch, model, {"midharness.n": 2})
    assert res.status == "passed", res.model_dump_json(indent=1)
    assert (trial / "result.json").is_file() and (trial / "agent" / "agent_result.json").is_file()
    trace = TrialTrace.load(trial)
    check_linked(trace)
    seen |= {s.boundary for s in trace.spans}
    errors = trace.exceptions()
    assert errors and errors[0].boundary == "model_call:ModelCaller.sample"
    assert "ContextLengthExceeded" in errors[0].exception["exception.type"]
    assert trace.spans_of("context:ContextManager.summarize"), "no summarize span after the overflow"
    sample = trace.spans_of("model_call:ModelCaller.sample", episode=0)[0]
    assert sample.attributes["gen_ai.request.choice.count"] == 2 and sample.attributes["rise.candidates"] == 2

    missing = {b.target for b in config.boundary} - seen
    assert not missing, f"configured boundaries without spans: {sorted(missing)}"

    # the planted key (the endpoint's api_key_env) reached the harness but no file of either trial
    for t in (tmp_path / "a", tmp_path / "b"):
        assert scan_for_leaks(t / "job", [KEY]) == {}


def test_seed_trial_killed_at_timeout_leaves_readable_spans(tmp_path, monkeypatch):
    if (why := _parts_missing()):
        pytest.skip(why)
    hang = reply("sleep 600\n", duration=60)
    res, trial = run_seed_trial(tmp_path, monkeypatch, Model([hang]), {}, timeout=15)
    assert res.status == "failed" and res.failure_class == "agent_timeout"
    trace = TrialTrace.load(trial)
    assert trace.bad_lines == 0
    assert trace.spans_of("model_call:ModelCaller.call", episode=0), "spans ended before the timeout are on disk"
    assert trace.spans_of("parsing:parse_response", episode=0)
    # the send_keys that was sleeping out its 60 s ended when SIGTERM cancelled the harness
    (sent,) = trace.spans_of("tmux:TmuxSession.send_keys", episode=0)
    assert "sleep 600" in sent.args["keys"] and sent.duration_ms < 60_000
    assert sent.attributes.get("rise.cancelled") or sent.is_error
