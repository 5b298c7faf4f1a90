"""``rise trace show`` reads like a transcript: analysis, plan, keystrokes, screen; parse errors and
summarizations marked; never a Python repr; the raw form behind ``--json`` (issue 10).

A real seed trial (local sandbox, real tmux, scripted model over HTTP) that meets a parse error, then solves the
task; copies of its folder stand for a summarized step and for a trial whose trajectory was lost.
"""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from monitor.store import TrialTrace
from monitor.view import render_steps
from rise.cli import app
from tests.test_monitor_seed_trial import DONE, SOLVE, Model, _parts_missing, run_seed_trial

pytestmark = [pytest.mark.tmux, pytest.mark.sandbox]
GARBAGE = "I will now solve the task, trust me."


def test_trace_show_reads_like_a_transcript(tmp_path, monkeypatch):
    if (why := _parts_missing()):
        pytest.skip(why)
    res, trial = run_seed_trial(tmp_path, monkeypatch, Model([GARBAGE, SOLVE, DONE, DONE]), {})
    assert res.status == "passed", res.model_dump_json(indent=1)
    trace = TrialTrace.load(trial)
    view = render_steps(trace)
    for repr_start in ("Observation(", "ParseResult(", "Command(", "ModelReply("):
        assert repr_start not in view, view
    assert "analysis       │ Looking at the terminal." in view and "plan           │ Write the file" in view
    assert "✗ parse error" in view and GARBAGE in view
    assert "printf 'Hello, world!\\n' > /app/hello.txt; cat /app/hello.txt⏎" in view
    assert "[screen]" in view and "Hello, world!" in view

    out = CliRunner().invoke(app, ["trace", "show", str(trial), "--json"])
    assert out.exit_code == 0, out.output
    records = [json.loads(line) for line in out.output.splitlines()]
    assert [r["episode"] for r in records] == sorted(r["episode"] for r in records)
    assert any(s["boundary"] == "model_call:ModelCaller.call" for r in records for s in r["spans"])
    assert any(st.get("extra", {}).get("parse_error") for r in records for st in r["steps"])

    # a summarized step is marked in its heading
    marked = tmp_path / "summarized"
    shutil.copytree(trial, marked)
    data = json.loads((marked / "agent" / "trajectory.rich.json").read_text())
    data["steps"][2]["extra"]["summarization"] = "proactive"
    (marked / "agent" / "trajectory.rich.json").write_text(json.dumps(data))
    assert f"step {data['steps'][2]['step_id']} · SUMMARIZED (proactive)" in render_steps(TrialTrace.load(marked))

    # without a trajectory the view falls back to spans, still without reprs
    bare = tmp_path / "bare"
    shutil.copytree(trial, bare)
    (bare / "agent" / "trajectory.rich.json").unlink()
    (bare / "agent" / "trajectory.json").unlink()
    view = render_steps(TrialTrace.load(bare))
    for repr_start in ("Observation(", "ParseResult(", "Command("):
        assert repr_start not in view, view
    assert "(parse error) No valid JSON" in view and "printf 'Hello, world!\\n' > /app/hello.txt" in view
