"""Each detector on a crafted trace: it fires where the pattern is, names its behaviour and evidence that
exists, and stays quiet on the clean counterpart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evolve.roles.analysis.detectors import DETECTORS, named_invocations
from evolve.roles.analysis.digest import compute_digest, digest
from tests.test_analysis_support import PROMPT, CraftedTrial, screen


def hits(folder, name, mode="full"):
    return [h for h in compute_digest(folder, mode).hits if h.detector == name]


def span_ids(folder):
    out = set()
    for line in (folder / "agent" / "spans.jsonl").read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                out |= {s["spanId"] for s in ss["spans"]}
    return out


def test_parse_error_and_auto_fix_and_warning(tmp_path):
    t = CraftedTrial(tmp_path)
    t.episode([], parse_error="Invalid JSON: Expecting ',' delimiter", observation="Previous response had parsing errors")
    t.episode([("ls\n", 0.1)], warnings=["AUTO-CORRECTED: Extracted JSON from mixed content - please fix this"],
              observation=screen(PROMPT + "ls", PROMPT))
    t.episode([("ls\n", 0.1)], warnings=["Extra text detected after JSON object"], observation=screen(PROMPT))
    folder = t.write()
    [pe] = hits(folder, "parse_error")
    assert (pe.episode, pe.behaviour) == (0, "parse.json") and "Invalid JSON" in pe.summary
    assert pe.evidence[0].step == 2 and pe.evidence[1].span in span_ids(folder)
    [af] = hits(folder, "auto_fix")
    assert af.episode == 1 and "AUTO-CORRECTED" in af.summary
    [pw] = hits(folder, "parse_warning")
    assert (pw.episode, pw.behaviour) == (2, "parse.feedback")


def test_keys_without_newline_left_on_the_prompt(tmp_path):
    t = CraftedTrial(tmp_path)
    t.episode([("echo hi > /app/x.txt", 0.5)], observation=screen(PROMPT + "echo hi > /app/x.txt"))
    t.episode([("echo hi > /app/y.txt\n", 0.5)], observation=screen(PROMPT + "echo hi > /app/y.txt", PROMPT))
    t.episode([("C-c", 0.1)], observation=screen(PROMPT))  # a key name sent alone on purpose
    folder = t.write()
    [h] = hits(folder, "keys_without_newline")
    assert h.episode == 0 and h.behaviour == "dispatch.commands" and h.details["keys"] == "echo hi > /app/x.txt"
    assert any(r.span in span_ids(folder) for r in h.evidence)


def test_keys_while_running(tmp_path):
    t = CraftedTrial(tmp_path)
    t.episode([("sleep 30; echo done\n", 0.1)], observation=screen(PROMPT + "sleep 30; echo done", "partial"))
    t.episode([("cat /app/x.txt\n", 0.1)], observation=screen(PROMPT + "cat /app/x.txt", "done", PROMPT))
    t.episode([("C-c", 0.1)], observation=screen(PROMPT))
    folder = t.write()
    [h] = hits(folder, "keys_while_running")
    assert h.episode == 1 and "partial" in h.summary
    assert [r.episode for r in h.evidence][:2] == [0, 1]


def test_keys_while_the_command_line_is_still_the_last_line(tmp_path):
    t = CraftedTrial(tmp_path)
    t.episode([("sleep 3; echo done\n", 0.1)], observation=screen(PROMPT + "sleep 3; echo done"))
    t.episode([("ls\n", 0.1)], observation=screen(PROMPT + "ls", PROMPT))
    [h] = hits(t.write(), "keys_while_running")
    assert h.episode == 1


def test_interrupt_after_a_running_command_is_not_a_hit(tmp_path):
    t = CraftedTrial(tmp_path)
    t.episode([("sleep 30\n", 0.1)], observation=screen(PROMPT + "sleep 30", "still going"))
    t.episode([("C-c", 0.1)], observation=screen(PROMPT))
    assert hits(t.write(), "keys_while_running") == []


def test_observation_truncated_and_command_timeout(tmp_path):
    t = CraftedTrial(tmp_path)
    t.episode([("cat big\n", 1.0)], observation=screen(PROMPT + "cat big", "a" * 50,
                                                        "[... output limited to 10000 bytes; 5 interior bytes omitted ...]",
                                                        PROMPT))
    t.episode([("make\n", 1.0)], timed_out=True, observation="The previous command ... did not finish")
    folder = t.write()
    [tr] = hits(folder, "observation_truncated")
    assert tr.behaviour == "observe.truncate" and any(r.span in span_ids(folder) for r in tr.evidence)
    [to] = hits(folder, "command_timeout")
    assert (to.episode, to.behaviour) == (1, "dispatch.blocking")


def test_claim_after_error(tmp_path):
    t = CraftedTrial(tmp_path)
    t.episode([("python3 /app/run.py\n", 1.0)],
              observation=screen(PROMPT + "python3 /app/run.py", "Traceback (most recent call last):",
                                 "ValueError: bad", PROMPT))
    t.episode([], claim=True, observation="Current terminal state:\n" + screen(PROMPT) +
              "\n\nAre you sure you want to mark the task as complete?")
    t.episode([], claim=True, observation=None)
    [h] = hits(t.write(), "claim_after_error")
    assert h.episode == 1 and "Traceback" in h.summary and h.evidence[0].episode == 0


def test_claim_after_clean_output_is_not_a_hit(tmp_path):
    t = CraftedTrial(tmp_path)
    t.episode([("grep -c error log\n", 1.0)], observation=screen(PROMPT + "grep -c error log", "0", PROMPT))
    t.episode([], claim=True, observation=None)
    assert hits(t.write(), "claim_after_error") == []


def test_claim_without_named_invocation(tmp_path):
    instruction = "Fix the bug so that\n\n```\ncd /app/pkg && python3 -m unittest\n```\n\npasses."
    assert named_invocations(instruction) == ["python3 -m"]
    assert named_invocations("run as `python3 /app/calc.py OP A B`; `wc -l` counts") == ["python3 /app/calc.py"]
    t = CraftedTrial(tmp_path, instruction=instruction)
    t.episode([("cat /app/pkg/stats.py\n", 0.1)], observation=screen(PROMPT))
    t.episode([], claim=True, observation=None)
    [h] = hits(t.write(), "claim_without_invocation")
    assert h.behaviour == "completion.handshake" and "python3 -m" in h.summary
    ok = CraftedTrial(tmp_path / "ok", instruction=instruction)
    ok.episode([("cd /app/pkg && python3 -m unittest\n", 1.0)], claim=True, observation=None)
    assert hits(ok.write(), "claim_without_invocation") == []


def test_repeated_commands_and_max_episodes(tmp_path):
    t = CraftedTrial(tmp_path, outcome="max_episodes")
    t.episode([("ls /app\n", 0.1)], observation=screen(PROMPT))
    for _ in range(3):
        t.episode([("cat  /app/x\n", 0.1)], observation=screen(PROMPT))
    t.episode([("cat /app/x\n", 0.1), ("ls\n", 0.1)], observation=screen(PROMPT))
    folder = t.write()
    [rep] = hits(folder, "repeated_commands")
    assert rep.episode == 1 and rep.details["repeats"] == 3 and len(rep.evidence) == 3
    [mx] = hits(folder, "max_episodes")
    assert (mx.episode, mx.behaviour) == (4, "loop.episodes")


def test_session_lost_and_model_errors(tmp_path):
    t = CraftedTrial(tmp_path, outcome="session_lost")
    t.episode([("exit\n", 0.1)], observation=screen(PROMPT))
    t.requests = [{"kind": "call", "attempt": 1, "error": "APITimeoutError: timed out"},
                  {"kind": "call", "attempt": 2, "error": None}]
    folder = t.write()
    [sl] = hits(folder, "session_lost")
    assert sl.behaviour == "dispatch.session"
    [me] = hits(folder, "model_errors")
    assert me.details["failures"] == 1 and "APITimeoutError" in me.summary
    # the seed's own name for it: the agent's keys (exit) ended the session (this detector never fired on a
    # real seed trial before: it looked for session_lost only)
    t = CraftedTrial(tmp_path / "ended", outcome="session_ended")
    t.episode([("exit\n", 0.1)], observation=screen(PROMPT))
    [own] = hits(t.write(), "session_lost")
    assert "the agent's keys ended the tmux session" in own.summary


def test_summarization_ok_and_failed(tmp_path):
    t = CraftedTrial(tmp_path)
    t.episode([("ls\n", 0.1)], summarization="proactive", summarization_files=["summarization-1-summary.json"],
              observation=screen(PROMPT))
    t.episode([("ls -la\n", 0.1)], summarization="overflow", summarization_files=["summarization-2-summary.json"],
              observation=screen(PROMPT))
    t.files = {"summarization-1-summary.json": {"response": "ok"},
               "summarization-2-summary.json": {"error": "ModelError: server down"}}
    ok, bad = hits(t.write(), "summarization")
    assert (ok.behaviour, ok.details["failed"]) == ("context.proactive", False)
    assert (bad.behaviour, bad.details["failed"]) == ("context.summary", True) and "server down" in bad.summary


def test_output_length(tmp_path):
    t = CraftedTrial(tmp_path)
    t.episode([], finish_reason="length", observation="Your response was cut off")
    [h] = hits(t.write(), "output_length")
    assert (h.episode, h.behaviour) == (0, "context.output_length")


def test_long_idle_wait(tmp_path):
    t = CraftedTrial(tmp_path)
    t.episode([("ls\n", 30.0)], observation=screen(PROMPT + "ls", "a b", PROMPT))
    t.episode([("make\n", 30.0)], observation=screen(PROMPT + "make", "compiling"))  # still busy: not idle
    [h] = hits(t.write(), "long_idle_wait")
    assert h.episode == 0 and h.details["requested_sec"] == 30.0


def test_harness_exception_needs_spans_and_is_reported_once(tmp_path):
    t = CraftedTrial(tmp_path)
    t.episode([("ls\n", 0.1)], observation=screen(PROMPT))
    outer = t.span("loop:Agent.step", 0, error=("TmuxError", "tmux died"))
    t.span("tmux:TmuxSession.capture", 0, parent=outer, error=("TmuxError", "tmux died"))
    folder = t.write()
    [h] = hits(folder, "harness_exception")
    assert h.details["boundary"] == "tmux:TmuxSession.capture" and h.evidence[0].span in span_ids(folder)
    assert hits(folder, "harness_exception", mode="trajectory") == []


def test_trajectory_mode_has_no_span_refs_and_cache_follows_the_files(tmp_path):
    t = CraftedTrial(tmp_path)
    t.episode([("echo hi", 0.5)], observation=screen(PROMPT + "echo hi"))
    folder = t.write()
    traj = compute_digest(folder, "trajectory")
    assert traj.hits and all(r.span is None for h in traj.hits for r in h.evidence)
    first = digest(folder)
    assert (folder / "digest.json").is_file() and digest(folder) == first
    t.episode([("ls\n", 0.1)], parse_error="No valid JSON found in response", observation="x")
    t.write()
    assert any(h.detector == "parse_error" for h in digest(folder).hits)


def _with_model_time(folder: Path, prefill: float, waiting: float, other: float) -> None:
    """result.json as the runner writes it for a trial whose model calls took these seconds."""
    from trials.endpoints.timings import CallTimings, InferenceSummary

    result = json.loads((folder / "result.json").read_text())
    summary = InferenceSummary().add(CallTimings(
        source="llamacpp", wall_ms=1000 * (prefill + waiting + 10), prompt_n=700, cache_n=100,
        prompt_ms=1000 * prefill, predicted_n=50, predicted_ms=10_000))
    result["inference"] = summary.model_dump()
    result["durations"] = {"env_start": 1, "agent": prefill + waiting + 10 + other, "verifier": 5, "env_stop": 1}
    (folder / "result.json").write_text(json.dumps(result))


@pytest.mark.parametrize(("prefill", "waiting", "behaviour"), [(150, 20, "context.proactive"),
                                                                (40, 130, "model.call")])
def test_model_time_flags_a_trial_spent_prefilling_or_waiting(tmp_path, prefill, waiting, behaviour):
    from evolve.roles.analysis.detectors import PREFILL_WAIT_SHARE

    t = CraftedTrial(tmp_path)
    t.episode([("ls\n", 0.1)], observation=screen(PROMPT + "ls", PROMPT))
    folder = t.write()
    _with_model_time(folder, prefill, waiting, other=100)  # (prefill + waiting) / 287 s > PREFILL_WAIT_SHARE
    [h] = hits(folder, "model_time")
    assert h.behaviour == behaviour and h.details["share"] >= PREFILL_WAIT_SHARE
    assert h.details["cache_hit_ratio"] == pytest.approx(0.125) and "prompt cache hits 12%" in h.summary
    assert hits(folder, "model_time", mode="trajectory") == []  # the figures come through the monitor
    _with_model_time(folder, prefill / 4, waiting / 4, other=300)  # the same calls in a trial of commands
    assert hits(folder, "model_time") == []


def test_every_detector_has_a_test_above():
    source = Path(__file__).read_text()
    assert all(f'"{name}"' in source for name in DETECTORS), "a detector without a crafted-trace test"


@pytest.mark.parametrize("name", sorted(DETECTORS))
def test_detectors_are_quiet_on_a_clean_run(tmp_path, name):
    t = CraftedTrial(tmp_path, status="passed")
    t.episode([("printf 'x\\n' > /app/x.txt\n", 0.1)], observation=screen(PROMPT + "printf", PROMPT))
    t.episode([], claim=True, observation="Current terminal state:\n" + screen(PROMPT) +
              "\n\nAre you sure you want to mark the task as complete?")
    t.episode([], claim=True, observation=None)
    assert hits(t.write(), name) == []


def test_rise_trace_digest_prints_and_caches(tmp_path):
    from typer.testing import CliRunner

    from rise.cli import app

    t = CraftedTrial(tmp_path)
    t.episode([("echo hi > /app/x.txt", 0.5)], observation=screen(PROMPT + "echo hi > /app/x.txt"))
    folder = t.write()
    runner = CliRunner()
    out = runner.invoke(app, ["trace", "digest", str(folder)])
    assert out.exit_code == 0, out.output
    assert "demo__r1" in out.output and "keys_without_newline [dispatch.commands]" in out.output
    assert (folder / "digest.json").is_file()
    js = runner.invoke(app, ["trace", "digest", str(folder / "agent"), "--json", "--trajectory-only"])
    assert js.exit_code == 0 and json.loads(js.output)["mode"] == "trajectory"
    assert (folder / "digest-trajectory.json").is_file()
    bad = runner.invoke(app, ["trace", "digest", str(tmp_path / "empty")])
    assert bad.exit_code == 2 and "not a trial folder" in bad.output
