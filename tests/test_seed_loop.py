"""The seed agent loop over real HTTP (ScriptedServer) and a real tmux (on the host, private socket)."""

from __future__ import annotations

import json

import pytest

import trials.harness_api as api
from harness_seed import trajectory
from tests.fakes.openai_server import ScriptedError
from tests.test_seed_support import HAVE_TMUX, HostEnv, reply, run_agent

pytestmark = [pytest.mark.tmux, pytest.mark.skipif(not HAVE_TMUX, reason="tmux is not installed")]

DONE = reply(analysis="done", plan="finish", complete=True)


def last_user(body: dict) -> str:
    return body["messages"][-1]["content"]


def read_trajectory(agent) -> dict:
    return json.loads(agent.trajectory.path.read_text())


async def test_handshake_first_claim_asks_second_ends(tmp_path):
    script = [reply(commands=[("echo hi > out.txt\n", 0.1)]), DONE, DONE]
    agent, srv, status = await run_agent(script, tmp_path)
    assert status == "completed" and len(srv.requests) == 3
    assert (tmp_path / "host" / "out.txt").read_text() == "hi\n"
    first = srv.requests[0]["messages"]
    assert len(first) == 1 and "Task Description:\ndo it" in first[0]["content"]
    assert "Current terminal state:\nCurrent Terminal Screen:\n" in first[0]["content"]
    assert last_user(srv.requests[1]).startswith("New Terminal Output:\n")
    confirm = last_user(srv.requests[2])
    assert confirm.startswith("Current terminal state:\n")
    assert "Are you sure you want to mark the task as complete?" in confirm
    assert 'include "task_complete": true in your JSON response again' in confirm
    data = read_trajectory(agent)
    steps = data["steps"]
    assert [s["source"] for s in steps] == ["user", "agent", "agent", "agent"]
    assert steps[1]["tool_calls"][0]["function_name"] == "bash_command"
    assert steps[1]["tool_calls"][0]["arguments"] == {"keystrokes": "echo hi > out.txt\n", "duration": 0.1}
    assert steps[3]["tool_calls"][-1]["function_name"] == "mark_task_complete"
    assert all(s["trial_id"] == "t-1" for s in steps) and [s["episode"] for s in steps[1:]] == [0, 1, 2]
    assert data["agent"]["extra"]["settings"]["tmux"]["width"] == 160
    assert data["final_metrics"]["extra"]["status"] == "completed"
    for step in steps[1:]:  # every prompt can be rebuilt from the deltas
        assert trajectory.messages_sent(data, step["step_id"]) == srv.requests[step["step_id"] - 2]["messages"]
    assert (agent.agent_dir / "pane.log").exists()


async def test_any_other_reply_resets_the_claim(tmp_path):
    script = [DONE, reply(), DONE, DONE]
    _, srv, status = await run_agent(script, tmp_path)
    assert status == "completed" and len(srv.requests) == 4
    assert "Are you sure" in last_user(srv.requests[1])
    assert "Are you sure" not in last_user(srv.requests[2])
    assert "Are you sure" in last_user(srv.requests[3])


async def test_commands_in_a_completing_reply_still_run(tmp_path):
    claim = reply(commands=[("touch made.txt\n", 0.1)], complete=True)
    _, _, status = await run_agent([claim, DONE], tmp_path)
    assert status == "completed" and (tmp_path / "host" / "made.txt").exists()


async def test_parse_error_runs_nothing_and_asks_for_a_fix(tmp_path):
    _, srv, status = await run_agent(["I would run ls.", DONE, DONE], tmp_path)
    assert status == "completed"
    fix = last_user(srv.requests[1])
    assert fix.startswith("Previous response had parsing errors:\nERROR: No valid JSON found in response")
    assert fix.endswith("Please fix these issues and provide a proper JSON response.")
    assert srv.requests[1]["messages"][-2] == {"role": "assistant", "content": "I would run ls."}


async def test_warnings_prefix_the_next_observation(tmp_path):
    _, srv, _ = await run_agent(["Sure: " + reply(commands=[("echo x\n", 0.1)]), DONE, DONE], tmp_path)
    nxt = last_user(srv.requests[1])
    assert nxt.startswith("Previous response had warnings:\nWARNINGS:\n- Extra text detected before JSON object")
    assert "\n\nNew Terminal Output:\n" in nxt


async def test_output_length_message_and_nothing_runs(tmp_path):
    cut = reply(commands=[("touch never.txt\n", 0.1)])[:-20]
    script = [{"content": cut, "finish_reason": "length"}, DONE, DONE]
    _agent, srv, status = await run_agent(script, tmp_path, **{"model.max_tokens": 512})
    assert status == "completed"
    assert not (tmp_path / "host" / "never.txt").exists()
    msgs = srv.requests[1]["messages"]
    assert msgs[-2] == {"role": "assistant", "content": cut}
    assert msgs[-1]["content"].startswith("ERROR: NONE of the actions in your previous response were performed")
    assert "output limit of 512 tokens" in msgs[-1]["content"]
    assert srv.requests[0]["max_tokens"] == 512


async def test_xml_truncated_reply_is_salvaged(tmp_path):
    full = ("<response><analysis>a</analysis><plan>p</plan><commands>"
            '<keystrokes duration="0.1">touch salvaged.txt\n</keystrokes></commands>'
            "<task_complete>false</task_complete></response>")
    cut = full[: full.index("<task_complete>") + 6]
    done = "<response><analysis>a</analysis><plan>p</plan><commands></commands><task_complete>true</task_complete></response>"
    agent, srv, status = await run_agent([{"content": cut, "finish_reason": "length"}, done, done], tmp_path,
                                         **{"terminus.format": "xml"})
    assert status == "completed" and (tmp_path / "host" / "salvaged.txt").exists()
    assert "<response>" in srv.requests[0]["messages"][0]["content"]
    assert "<task_complete>true</task_complete> in your response again" in last_user(srv.requests[2])
    assert read_trajectory(agent)["steps"][1]["extra"]["salvaged_from_truncated"] is True


async def test_max_episodes(tmp_path):
    _, srv, status = await run_agent([reply(), reply(), reply()], tmp_path, **{"terminus.max_episodes": 2})
    assert status == "max_episodes" and len(srv.requests) == 2


# -- context management ------------------------------------------------------------------------------


def summarizing_responder(overflow_at: int, log: list):
    """Main calls answer with a big-output command; main call ``overflow_at`` overflows; sub-calls are
    recognised by their prompts."""
    state = {"main": 0}

    def respond(body):
        text = last_user(body)
        if "Write a\ncomplete handover summary" in text:
            log.append(("summary", body))
            return "SUMMARY: made files"
        if "ask the previous agent questions" in text:
            log.append(("questions", body))
            return "1. a?\n2. b?\n3. c?\n4. d?\n5. e?"
        if "has some questions" in text:
            log.append(("answers", body))
            return "ANSWERS: all fine"
        state["main"] += 1
        log.append(("main", body))
        if text.startswith("Here are the answers the previous agent gave"):
            return DONE
        if state["main"] == overflow_at:
            return ScriptedError.context_length_vllm(limit=8192, requested=9000)
        if "Are you sure" in text:
            return DONE
        return reply(commands=[("seq 1 2000\n", 0.3)])

    return respond


async def test_context_overflow_unwinds_then_summary_questions_answers(tmp_path):
    log: list = []
    # ~6200 tokens of chat when call 4 overflows: 300 free, under the 6500 * 0.125 = 812 target.
    agent, _srv, status = await run_agent(summarizing_responder(4, log), tmp_path,
                                         server_kw={"context_limit": 6500},
                                         **{"context.proactive_free_tokens": 0})
    assert status == "completed"
    kinds = [k for k, _ in log]
    assert kinds == ["main", "main", "main", "main", "summary", "questions", "answers", "main", "main"]
    overflowed = log[3][1]["messages"]
    summary_msgs = log[4][1]["messages"]
    assert len(summary_msgs) == len(overflowed) - 2  # one user/assistant pair was unwound (+ summary prompt)
    assert summary_msgs[0] == overflowed[0]
    assert len(log[5][1]["messages"]) == 1  # the questions are asked with an empty history
    assert "SUMMARY: made files" in log[5][1]["messages"][0]["content"]
    answers_msgs = log[6][1]["messages"]
    assert answers_msgs[-3]["content"] == summary_msgs[-1]["content"]
    assert answers_msgs[-2] == {"role": "assistant", "content": "SUMMARY: made files"}
    after = log[7][1]["messages"]
    assert [m["role"] for m in after] == ["user", "user", "assistant", "user"]
    assert after[0] == overflowed[0] and after[2]["content"].startswith("1. a?")
    assert after[3]["content"].startswith("Here are the answers the previous agent gave:\n\nANSWERS: all fine")
    assert "You cannot ask any more questions" in after[3]["content"]
    for name in ("summary", "questions", "answers"):
        record = json.loads((agent.agent_dir / f"summarization-1-{name}.json").read_text())
        assert record["subcall"] == name and record["response"] and record["reason"] == "overflow"
    step = read_trajectory(agent)["steps"][4]
    assert step["extra"]["summarization"] == "overflow"
    assert step["extra"]["summarization_files"] == ["summarization-1-summary.json",
                                                    "summarization-1-questions.json",
                                                    "summarization-1-answers.json"]
    assert agent.context.summarizations == 1


async def test_summary_fallbacks(tmp_path):
    """Every summarization sub-call fails: the short summary fails too, then the no-model fallback."""
    state = {"n": 0}

    def respond(body):
        text = last_user(body)
        if "handover summary" in text or "In two or three sentences" in text:
            return ScriptedError(400, "bad request")
        state["n"] += 1
        if state["n"] == 2:
            return ScriptedError.context_length_vllm()
        return DONE

    agent, srv, status = await run_agent(respond, tmp_path, **{"context.proactive_free_tokens": 0})
    assert status == "completed"
    fallback = [b for b in srv.requests if last_user(b).startswith("do it\n\nCurrent state of the terminal:")]
    assert len(fallback) == 1
    assert (agent.agent_dir / "summarization-1-short_summary.json").exists()


async def test_proactive_summarization_below_free_threshold(tmp_path):
    log: list = []
    # 7000 * 0.25 = 1750 free tokens needed; three big outputs (~6200 tokens of chat) use that up.
    agent, _srv, status = await run_agent(summarizing_responder(999, log), tmp_path,
                                         server_kw={"context_limit": 7000})
    assert status == "completed"
    kinds = [k for k, _ in log]
    assert kinds.index("summary") < kinds.index("questions") < kinds.index("answers")
    steps = read_trajectory(agent)["steps"]
    assert any(s.get("extra", {}).get("summarization") == "proactive" for s in steps)


async def test_failed_proactive_summarization_keeps_the_pending_observation(tmp_path):
    """The summary sub-call fails: no short summary, no fallback prompt; the next call carries the terminal
    output it was going to carry (the reference's behaviour)."""
    log: list = []
    inner = summarizing_responder(999, log)

    def respond(body):
        if "Write a\ncomplete handover summary" in last_user(body):
            log.append(("summary-failed", body))
            return ScriptedError(400, "bad request")
        if any(k == "summary-failed" for k, _ in log):  # seen what we wanted: finish
            log.append(("main", body))
            return DONE
        return inner(body)

    agent, _srv, status = await run_agent(respond, tmp_path, server_kw={"context_limit": 7000})
    assert status == "completed"
    kinds = [k for k, _ in log]
    first_failure = kinds.index("summary-failed")
    assert kinds[first_failure + 1] == "main"  # straight on, no short summary
    following = log[first_failure + 1][1]["messages"]
    assert last_user(log[first_failure + 1][1]).startswith("New Terminal Output:")
    assert len(following) > 3  # the chat was kept
    assert not (agent.agent_dir / "summarization-1-short_summary.json").exists()


# -- model call policy -------------------------------------------------------------------------------


async def test_retries_stop_on_auth_errors(tmp_path):
    _, srv, status = await run_agent([ScriptedError.auth(), DONE, DONE], tmp_path)
    assert isinstance(status, api.AuthError) and len(srv.requests) == 1


async def test_server_errors_are_retried_three_times(tmp_path):
    err = ScriptedError(500, "boom")
    _, srv, status = await run_agent([err, err, DONE, DONE], tmp_path)
    assert status == "completed" and len(srv.requests) == 4
    _, srv, status = await run_agent([err, err, err, DONE], tmp_path / "again")
    assert isinstance(status, api.ModelError) and len(srv.requests) == 3


@pytest.mark.parametrize("status", [400, 404, 422])
async def test_client_errors_are_not_retried(tmp_path, status):
    """A 4xx says the request itself is wrong: sending it again cannot help (ModelError.retryable is False)."""
    _, srv, status_ = await run_agent([ScriptedError(status, "bad request: unknown field"), DONE, DONE], tmp_path)
    assert isinstance(status_, api.ModelError) and len(srv.requests) == 1
    assert status_.status_code == status


async def test_rate_limits_and_unavailable_servers_are_retried(tmp_path):
    script = [ScriptedError(429, "slow down"), ScriptedError(503, "loading"), DONE, DONE]
    _, srv, status = await run_agent(script, tmp_path)
    assert status == "completed" and len(srv.requests) == 4


async def test_context_errors_are_not_retried_when_summarizing_is_off(tmp_path):
    _, srv, status = await run_agent([ScriptedError.context_length_vllm(), DONE], tmp_path,
                                     **{"context.summarize": False})
    assert isinstance(status, api.ContextLengthExceeded) and len(srv.requests) == 1


async def test_unreachable_server_gives_model_unreachable_outcome(tmp_path, monkeypatch):
    from harness_seed import main as seed_main

    env = HostEnv(tmp_path / "host")
    monkeypatch.setattr(api, "attach_environment", lambda handle: env)
    spec = api.TrialSpec(
        trial_id="t-unreach", task_name="x", instruction="do it", env={"kind": "host-test"},
        endpoint=api.EndpointSpec(base_url="http://127.0.0.1:9/v1", model="m", timeout_sec=2),
        agent_dir=str(tmp_path / "agent"),
        settings={"model.retry_wait_min_sec": 0.01, "model.retry_wait_max_sec": 0.01,
                  "tmux.pane_log": str(tmp_path / "pane.log")})
    (tmp_path / "agent").mkdir()
    outcome = await seed_main.run_trial(spec)
    await env.stop()
    assert outcome.status == "error" and outcome.error_kind == "model_unreachable"
    written = api.AgentOutcome.model_validate_json((tmp_path / "agent" / "agent_result.json").read_text())
    assert written.error_kind == "model_unreachable" and written.metadata["model_requests"] == 3
    data = json.loads((tmp_path / "agent" / "trajectory.json").read_text())
    assert data["final_metrics"]["extra"]["status"] == "model_unreachable"


# -- tmux --------------------------------------------------------------------------------------------


async def test_40kb_command_is_chunked_and_typed_whole(tmp_path):
    payload = ("abc;def\"ghi$HOME`x`" * 2200)[:40_000]
    keys = "cat > big.txt <<'EOF'\n" + payload + "\nEOF\n"
    env = HostEnv(tmp_path / "host")
    _agent, _srv, status = await run_agent([reply(commands=[(keys, 3.0)]), DONE, DONE], tmp_path, env=env,
                                         server_kw={"context_limit": 100_000})
    await env.stop()
    assert status == "completed"
    assert (tmp_path / "host" / "big.txt").read_text() == payload + "\n"
    sends = [c for c in env.calls if c.startswith("tmux send-keys") and "abc;def" in c]
    assert len(sends) >= 3 and all(len(c.encode()) < 16000 for c in sends)


# -- every parser error / warning / auto-fix, end to end over HTTP -----------------------------------

_G = {"analysis": "a", "plan": "p", "commands": [{"keystrokes": "echo ok\n", "duration": 0.1}]}
_XML_DONE = ("<response><analysis>a</analysis><plan>p</plan><commands></commands>"
             "<task_complete>true</task_complete></response>")
JSON_CASES = [
    # (reply, "error" | "warning", text the next prompt must contain)
    ("no json at all", "error", "ERROR: No valid JSON found in response"),
    ('{"analysis": "a", "plan": "p", "commands": [}', "error", "ERROR: Invalid JSON: "),
    (json.dumps({"analysis": "a"}), "error", "ERROR: Missing required fields: plan, commands"),
    (json.dumps({**_G, "commands": "ls"}), "error", "ERROR: Field 'commands' must be an array"),
    (json.dumps({**_G, "commands": [{"duration": 1}]}), "error",
     "ERROR: Command 1 missing required 'keystrokes' field"),
    ("Sure. " + json.dumps(_G), "warning", "- Extra text detected before JSON object"),
    (json.dumps(_G) + " Done.", "warning", "- Extra text detected after JSON object"),
    (json.dumps({**_G, "commands": [{"keystrokes": "echo ok\n"}]}), "warning",
     "- Command 1: Missing duration field, using default 1.0"),
    (json.dumps({**_G, "commands": [{"keystrokes": "echo ok\n", "duration": "x"}]}), "warning",
     "- Command 1: Invalid duration value 'x'"),
    (json.dumps({**_G, "commands": [{"keystrokes": "echo ok\n", "duration": 1, "cwd": "/"}]}), "warning",
     "- Command 1: Unknown fields: cwd"),
    (json.dumps({"plan": "p", "analysis": "a", "commands": []}), "warning", "- Fields appear in the wrong order"),
    (json.dumps({**_G, "commands": [{"keystrokes": "echo a", "duration": 0.1}, {"keystrokes": "\n", "duration": 0.1}]}),
     "warning", "- Command 1 should end with a newline"),
    (json.dumps(_G)[:-1], "warning", "- AUTO-CORRECTED: Fixed incomplete JSON by adding missing closing brace"),
    ("Plan {short}: " + json.dumps(_G), "warning", "- AUTO-CORRECTED: Extracted JSON from mixed content"),
]


@pytest.mark.parametrize(("text", "kind", "expected"), JSON_CASES, ids=[c[2][:40] for c in JSON_CASES])
async def test_each_json_parser_message_reaches_the_model(tmp_path, text, kind, expected):
    _, srv, status = await run_agent([text, DONE, DONE], tmp_path)
    assert status == "completed"
    nxt = last_user(srv.requests[1])
    head = "Previous response had parsing errors:\n" if kind == "error" else "Previous response had warnings:\n"
    assert nxt.startswith(head) and expected in nxt, nxt


XML_CASES = [
    ("plain text", "error", "ERROR: No <response> tag found"),
    ("<response><analysis>a</analysis><plan>p</plan></response>", "error", "ERROR: Missing <commands> section"),
    ('<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1">ls\n</commands></response>',
     "warning", "- A <keystrokes> element without </keystrokes> was not run"),
    ("x <response><analysis>a</analysis><plan>p</plan><commands></commands></response>", "warning",
     "- Extra text detected before <response> tag"),
    (("<response><analysis>a</analysis><plan>p</plan><commands><keystrokes>echo ok\n</keystrokes></commands>"
     "</response>"), "warning", "- Command 1: Missing duration attribute"),
    ("<response><analysis>a</analysis><plan>p</plan><commands>", "error", "ERROR: Missing <commands> section"),
    ("<response><analysis>a</analysis><plan>p</plan><commands></commands>", "warning",
     "- AUTO-CORRECTED: Missing </response> tag was automatically inserted"),
]


@pytest.mark.parametrize(("text", "kind", "expected"), XML_CASES, ids=[c[2][:40] for c in XML_CASES])
async def test_each_xml_parser_message_reaches_the_model(tmp_path, text, kind, expected):
    _, srv, status = await run_agent([text, _XML_DONE, _XML_DONE], tmp_path, **{"terminus.format": "xml"})
    assert status == "completed"
    nxt = last_user(srv.requests[1])
    head = "Previous response had parsing errors:\n" if kind == "error" else "Previous response had warnings:\n"
    assert nxt.startswith(head) and expected in nxt, nxt
    if kind == "error":
        assert nxt.endswith("provide a proper XML response.")


async def test_json_schema_setting_constrains_replies_but_not_summaries(tmp_path):
    _, srv, status = await run_agent([DONE, DONE], tmp_path, **{"model.json_schema": True})
    assert status == "completed"
    fmt = srv.requests[0]["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"]["required"][0] == "analysis"
    _, srv, _ = await run_agent([DONE, DONE], tmp_path / "plain")
    assert "response_format" not in srv.requests[0]  # the reference sends no constraint
    log: list = []
    await run_agent(summarizing_responder(4, log), tmp_path / "sum", server_kw={"context_limit": 6500},
                    **{"context.proactive_free_tokens": 0, "model.json_schema": True})
    assert all("response_format" not in body for kind, body in log if kind != "main")
    assert all("response_format" in body for kind, body in log if kind == "main")


# -- generation cap and seed -------------------------------------------------------------------------


async def test_every_call_carries_a_generation_cap_and_the_seed_when_set(tmp_path):
    """A reply can never run until the trial timeout: max_tokens goes out by default (issue 10)."""
    _, srv, status = await run_agent([DONE, DONE], tmp_path)
    assert status == "completed" and all(r["max_tokens"] == 4096 for r in srv.requests)
    assert all("seed" not in r for r in srv.requests)
    _, srv, _ = await run_agent([DONE, DONE], tmp_path / "s", **{"model.seed": 7, "model.max_tokens": 300})
    assert all(r["max_tokens"] == 300 and r["seed"] == 7 for r in srv.requests)


async def test_an_endpoint_ceiling_lowers_the_cap(tmp_path):
    _, srv, _ = await run_agent([DONE, DONE], tmp_path, spec_kw={"max_output_tokens": 256})
    assert [r["max_tokens"] for r in srv.requests] == [256, 256]


async def test_a_reasoning_models_thinking_is_kept_in_the_trajectory(tmp_path):
    """The server's split-out reasoning (vLLM / llama.cpp reasoning parsers) reaches the ATIF step."""
    thinking = {"content": DONE, "reasoning_content": "The file exists already, so I can finish."}
    agent, _, status = await run_agent([thinking, DONE], tmp_path)
    steps = read_trajectory(agent)["steps"]
    assert status == "completed" and steps[1]["reasoning_content"] == thinking["reasoning_content"]
    assert "reasoning_content" not in steps[2]


@pytest.mark.parametrize("interleaved", [False, True])
async def test_interleaved_thinking_sends_the_reasoning_back_only_when_on(tmp_path, interleaved):
    """Issue 16 item 8: the reference's interleaved thinking, for reasoning models on vLLM. Off (the default),
    the next request's history carries the reply alone; on, its assistant turn carries the reasoning too."""
    thought = "The file exists already, so I can finish."
    script = [{"content": reply(commands=[("echo hi\n", 0.1)]), "reasoning_content": thought}, DONE, DONE]
    _, srv, status = await run_agent(script, tmp_path, **{"model.interleaved_thinking": interleaved})
    assert status == "completed" and len(srv.requests) >= 2
    turns = [m for m in srv.requests[1]["messages"] if m["role"] == "assistant"]
    assert len(turns) == 1 and turns[0]["content"] == script[0]["content"]
    if interleaved:
        assert turns[0]["reasoning_content"] == thought
    else:
        assert "reasoning_content" not in turns[0]
