"""A read-only role on the real bundled model (llama.cpp server, Qwen2.5-Coder 1.5B) about a real trial folder,
recorded at the HTTP level and replayed at once. Asserts what the runtime does — a validated answer after at least
two tool calls, or a RoleError naming the failing fields; every tool call in the transcript; the replay gives
the same outcome — never what the model decides.

``RISE_AGENTS_RECORD=1`` also stores the recording under tests/data/agents/recordings/ (replayed in CI by
tests/test_agents_replay.py, no model needed)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from evolve.roles.explorer import ExplorerAnswer
from evolve.roles.runtime import RoleError, get_role, make_backend, read_transcript, run_role
from tests.fakes.bundled import big_model_skip_reason, bundled_server

pytestmark = pytest.mark.model

DATA = Path(__file__).parent / "data" / "agents"
MODEL = os.environ.get("RISE_AGENTS_MODEL", "qwen2.5-coder-1.5b")  # the 1.5B calls tools best
QUESTION = ("Did the trial in the folder greet__r1 pass (see its result.json)? "
            "Which shell command did the agent run in episode 0?")


def trial_workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(DATA / "trials" / "greet__r1", ws / "greet__r1")
    return ws


def outcome_of(call) -> dict:
    """What a call came to, in a form two runs can be compared by."""
    try:
        result = call()
    except RoleError as exc:
        assert exc.kind in ("invalid_output", "limit"), exc
        assert exc.kind == "limit" or exc.fields, "an invalid answer must name its fields"
        return {"error": exc.kind, "fields": exc.fields, "tools": _tools(exc.transcript)}
    assert isinstance(result.output, ExplorerAnswer)
    assert result.usage.tool_calls >= 2  # the role's min_tool_calls, enforced by the runtime
    return {"output": result.output.model_dump(), "tools": _tools(result.transcript)}


def _tools(transcript: Path) -> list[list]:
    rows = read_transcript(transcript)
    calls = [[r["tool"], r["args"]] for r in rows if r["kind"] == "tool_call"]
    results = [r for r in rows if r["kind"] == "tool_result"]
    assert len(calls) == len(results)  # every call has its result in the transcript
    replies = [p for r in rows if r["kind"] == "model_response" for p in r["parts"] if "tool_call" in p]
    assert len(replies) >= len(calls)  # ...and the model reply that asked for it
    return calls


@pytest.mark.timeout(1800)
def test_explorer_on_the_bundled_model_then_its_recording_replays_identically(tmp_path: Path) -> None:
    reason = big_model_skip_reason(MODEL)
    if reason:
        pytest.skip(f"optional: {reason} (CI replays the stored recording instead)")
    ws = trial_workspace(tmp_path)
    recording = tmp_path / "explorer-greet.yaml"
    # a shared 2-core machine answers slowly; the deadline is generous so the outcome is the model's, not a kill
    role = get_role("explorer").model_copy(update={"limits": get_role("explorer").limits.model_copy(
        update={"deadline_s": 1500})})
    with bundled_server("agents", ctx=16384, parallel=1, model=MODEL) as (_, spec):
        spec = spec.model_copy(update={"timeout_sec": role.limits.deadline_s})  # one slow turn is not a failure
        live = make_backend("replay", spec, recording=recording, record=True)
        first = outcome_of(lambda: run_role(role, {"question": QUESTION}, ws, live, transcripts=tmp_path / "tr"))
    assert len(first["tools"]) >= 1 or "error" in first
    replayed = outcome_of(lambda: run_role(role, {"question": QUESTION}, trial_workspace(tmp_path / "again"),
                                           make_backend("replay", recording=recording), transcripts=tmp_path))
    assert replayed == first
    if os.environ.get("RISE_AGENTS_RECORD"):
        (DATA / "recordings").mkdir(exist_ok=True)
        shutil.copy(recording, DATA / "recordings" / recording.name)
        (DATA / "recordings" / "explorer-greet.json").write_text(
            json.dumps({"model": MODEL, "question": QUESTION, **first}, indent=1) + "\n")
