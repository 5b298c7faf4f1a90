"""Replay in CI, no model: the stored recording of a real bundled-model call (made by
``RISE_AGENTS_RECORD=1 pytest tests/test_agents_model.py``) replays to the recorded outcome, and a changed prompt
is a clear replay_miss. Re-record after changing the explorer role, its tools or the system prompt."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evolve.roles.runtime import RoleError, get_role, make_backend, read_transcript, run_role

DATA = Path(__file__).parent / "data" / "agents"
RECORDING = DATA / "recordings" / "explorer-greet.yaml"
EXPECTED = DATA / "recordings" / "explorer-greet.json"


def trial_workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(DATA / "trials" / "greet__r1", ws / "greet__r1")
    return ws


def test_the_bundled_model_recording_replays_to_the_recorded_outcome(tmp_path: Path) -> None:
    expected = json.loads(EXPECTED.read_text())
    backend = make_backend("replay", recording=RECORDING)
    try:
        result = run_role(get_role("explorer"), {"question": expected["question"]}, trial_workspace(tmp_path),
                          backend, transcripts=tmp_path / "tr")
        got = {"output": result.output.model_dump()}
        transcript = result.transcript
    except RoleError as exc:
        assert exc.kind != "replay_miss", exc
        got = {"error": exc.kind, "fields": exc.fields}
        transcript = exc.transcript
    tools = [[r["tool"], r["args"]] for r in read_transcript(transcript) if r["kind"] == "tool_call"]
    assert {**got, "tools": tools} == {k: v for k, v in expected.items() if k not in ("model", "question")}


def test_a_changed_prompt_fails_clearly(tmp_path: Path) -> None:
    expected = json.loads(EXPECTED.read_text())
    with pytest.raises(RoleError) as info:
        run_role(get_role("explorer"), {"question": expected["question"] + " Be brief."},
                 trial_workspace(tmp_path), make_backend("replay", recording=RECORDING), transcripts=tmp_path)
    assert info.value.kind == "replay_miss"
    assert "request #1 of this call is not in the recording" in str(info.value)
    assert str(RECORDING) in str(info.value)
