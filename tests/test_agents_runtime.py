"""The role runtime on the openai backend against a scripted OpenAI-compatible server (real HTTP, no model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evolve.roles.runtime import (
    Budget,
    Limits,
    Role,
    RoleError,
    get_role,
    make_backend,
    read_transcript,
    run_role,
)
from trials.endpoints.scripted import ScriptedServer
from trials.endpoints.spec import EndpointSpec, PriceTable


def call(name: str, **args) -> dict:
    return {"content": "", "tool_calls": [{"name": name, "arguments": args}]}


GOOD = {"answer": "it says hello", "evidence": [{"path": "a.txt", "detail": "line 1"}]}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("hello world\n")
    return ws


def backend(srv: ScriptedServer, price: PriceTable | None = None):
    return make_backend("openai", EndpointSpec(base_url=srv.base_url, model="scripted",
                                               price=price or PriceTable()))


def kinds(path: Path) -> list[str]:
    return [row["kind"] for row in read_transcript(path)]


def test_tool_calls_then_a_corrected_answer(workspace: Path, tmp_path: Path) -> None:
    script = [call("list_dir", path="."), call("read_file", path="a.txt"),
              call("final_answer", answer="", evidence=[]), call("final_answer", **GOOD)]
    with ScriptedServer(script) as srv:
        result = run_role(get_role("explorer"), {"question": "what does a.txt say?"}, workspace, backend(srv),
                          transcripts=tmp_path / "tr")
        requests = srv.requests
    assert result.output.model_dump() == GOOD
    assert result.usage.tool_calls == 2 and result.usage.requests == 4
    # the model saw the tools' real results, and the corrective turn named both failing fields
    tool_msgs = [m for m in requests[2]["messages"] if m["role"] == "tool"]
    assert "1: hello world" in tool_msgs[-1]["content"]
    rows = read_transcript(result.transcript)
    corrective = [r for r in rows if r["kind"] == "corrective_turn"]
    assert corrective and corrective[0]["fields"] == ["answer", "evidence"]
    assert [r["tool"] for r in rows if r["kind"] == "tool_call"] == ["list_dir", "read_file"]
    assert rows[-1]["kind"] == "end" and rows[-1]["status"] == "ok"
    assert {t["function"]["name"] for t in requests[0]["tools"]} >= {"list_dir", "read_file", "final_answer"}


def test_invalid_answers_end_in_a_role_error_naming_the_field(workspace: Path, tmp_path: Path) -> None:
    bad = {"answer": "x", "evidence": [{"path": "a.txt"}]}  # evidence.0.detail missing, every time
    script = [call("list_dir"), call("read_file", path="a.txt")] + [call("final_answer", **bad)] * 3
    with ScriptedServer(script) as srv:
        with pytest.raises(RoleError) as info:
            run_role(get_role("explorer"), {"question": "q"}, workspace, backend(srv), transcripts=tmp_path)
        assert srv.remaining == 0  # exactly 1 + corrective_turns (2) answers were asked for
    err = info.value
    assert err.kind == "invalid_output" and err.fields == ["evidence.0.detail"]
    assert "evidence.0.detail" in str(err)
    end = read_transcript(err.transcript)[-1]
    assert end["kind"] == "end" and end["status"] == "invalid_output" and end["fields"] == ["evidence.0.detail"]


def test_an_answer_before_enough_reading_is_sent_back(workspace: Path, tmp_path: Path) -> None:
    script = [call("final_answer", **GOOD), call("read_file", path="a.txt"), call("list_dir"),
              call("final_answer", **GOOD)]
    with ScriptedServer(script) as srv:
        result = run_role(get_role("explorer"), {"question": "q"}, workspace, backend(srv), transcripts=tmp_path)
        retry = [m for m in srv.requests[1]["messages"] if m["role"] == "tool"][-1]["content"]
    assert "at least 2 tool calls" in retry
    assert result.usage.tool_calls == 2


def test_bad_inputs_name_the_field_and_send_nothing(workspace: Path, tmp_path: Path) -> None:
    with ScriptedServer([]) as srv:
        with pytest.raises(RoleError) as info:
            run_role(get_role("explorer"), {"question": ""}, workspace, backend(srv), transcripts=tmp_path)
        assert srv.requests == []
    assert info.value.kind == "bad_input" and info.value.fields == ["question"]


def test_unknown_tool_is_a_config_error(workspace: Path, tmp_path: Path) -> None:
    role = get_role("explorer").model_copy(update={"tools": ("read_file", "no_such_tool")})
    with ScriptedServer([]) as srv, pytest.raises(RoleError, match="unknown tool 'no_such_tool'"):
        run_role(role, {"question": "q"}, workspace, backend(srv), transcripts=tmp_path)


def test_budget_is_checked_before_the_call_and_charged_after(workspace: Path, tmp_path: Path) -> None:
    price = PriceTable(input_per_mtok=1000.0, output_per_mtok=1000.0)
    script = [call("list_dir"), call("read_file", path="a.txt"), call("final_answer", **GOOD)]
    budget = Budget(max_usd=1.0)
    with ScriptedServer(script) as srv:
        result = run_role(get_role("explorer"), {"question": "q"}, workspace, backend(srv, price),
                          transcripts=tmp_path, budget=budget)
        assert result.cost == pytest.approx((result.usage.input_tokens + result.usage.output_tokens) * 1e-3)
        assert budget.spent_usd == pytest.approx(result.cost) and budget.by_role == {"explorer": result.cost}
        budget.spent.usd = 1.0
        sent = len(srv.requests)
        with pytest.raises(RoleError) as info:
            run_role(get_role("explorer"), {"question": "q"}, workspace, backend(srv, price),
                     transcripts=tmp_path, budget=budget)
        assert len(srv.requests) == sent  # refused before any request
    assert info.value.kind == "budget"
    again = Budget.from_transcripts(tmp_path, max_usd=5.0)
    # the refused call never started: no transcript, so it is not counted as a call
    assert again.spent_usd == pytest.approx(result.cost) and again.calls == 1


def test_deadline_kills_the_call_and_records_a_timeout(workspace: Path, tmp_path: Path) -> None:
    role = get_role("explorer").model_copy(update={"limits": Limits(deadline_s=0.5)})
    with ScriptedServer([call("list_dir")], delay=5.0) as srv, pytest.raises(RoleError) as info:
        run_role(role, {"question": "q"}, workspace, backend(srv), transcripts=tmp_path)
    assert info.value.kind == "timeout"
    end = read_transcript(info.value.transcript)[-1]
    assert end["status"] == "timeout"


def test_long_tool_results_are_truncated_with_a_note(workspace: Path, tmp_path: Path) -> None:
    (workspace / "big.txt").write_text("x" * 5000 + "\n")
    role = get_role("explorer").model_copy(update={"limits": Limits(tool_output_chars=300, min_tool_calls=0)})
    script = [call("read_file", path="big.txt"), call("final_answer", **GOOD)]
    with ScriptedServer(script) as srv:
        result = run_role(role, {"question": "q"}, workspace, backend(srv), transcripts=tmp_path)
        seen = next(m for m in srv.requests[1]["messages"] if m["role"] == "tool")["content"]
    assert "[truncated: 300 of" in seen and len(seen) < 400
    row = next(r for r in read_transcript(result.transcript) if r["kind"] == "tool_result")
    assert row["truncated"] is True and row["chars"] > 5000


def test_prompted_output_mode_validates_json_text(workspace: Path, tmp_path: Path) -> None:
    role: Role = get_role("explorer").model_copy(update={"output_mode": "prompted",
                                                          "limits": Limits(min_tool_calls=0)})
    script = ["not json at all", json.dumps(GOOD)]
    with ScriptedServer(script) as srv:
        result = run_role(role, {"question": "q"}, workspace, backend(srv), transcripts=tmp_path)
    assert result.output.model_dump() == GOOD
    assert "corrective_turn" in kinds(result.transcript)


def test_a_calls_dollar_limit_stops_it_as_a_limit(workspace: Path, tmp_path: Path) -> None:
    price = PriceTable(input_per_mtok=1000.0, output_per_mtok=1000.0)  # $0.001 per token
    role = get_role("explorer").model_copy(update={"limits": Limits(max_usd=0.5, min_tool_calls=0)})
    script = [call("list_dir")] * 5 + [call("final_answer", **GOOD)]
    with ScriptedServer(script) as srv:
        with pytest.raises(RoleError) as info:
            run_role(role, {"question": "q"}, workspace, backend(srv, price), transcripts=tmp_path)
        assert srv.remaining > 0  # stopped before the script ran out
    assert info.value.kind == "limit" and info.value.cost > 0


def test_the_last_turn_offers_only_the_answer(workspace: Path, tmp_path: Path) -> None:
    """Within max_turns, the last request carries only final_answer, so a model that keeps reading must answer."""
    role = get_role("explorer")
    role = role.model_copy(update={"limits": role.limits.model_copy(update={"max_turns": 3})})
    with ScriptedServer([call("list_dir", path="."), call("read_file", path="a.txt"), call("final_answer", **GOOD)]) \
            as srv:
        result = run_role(role, {"question": "q"}, workspace, backend(srv), transcripts=tmp_path / "tr")
        offered = [[t["function"]["name"] for t in r["tools"]] for r in srv.requests]
    assert result.output.model_dump() == GOOD
    assert "read_file" in offered[0] and "read_file" in offered[1] and offered[2] == ["final_answer"]


def test_an_invalid_answer_at_the_last_turn_still_gets_its_corrective_turns(workspace: Path, tmp_path: Path) -> None:
    """The real 1.5B researcher, made to answer at its last turn, gave an invalid answer; the call then died on the
    request limit. The answer-only turn is followed by up to corrective_turns more requests."""
    role = get_role("explorer")
    role = role.model_copy(update={"limits": role.limits.model_copy(update={"max_turns": 3, "corrective_turns": 1})})
    bad = {k: v for k, v in GOOD.items() if k != next(iter(GOOD))}  # a required field left out
    script = [call("list_dir", path="."), call("read_file", path="a.txt"), call("final_answer", **bad),
              call("final_answer", **GOOD)]
    with ScriptedServer(script) as srv:
        result = run_role(role, {"question": "q"}, workspace, backend(srv), transcripts=tmp_path / "tr")
        offered = [[t["function"]["name"] for t in r["tools"]] for r in srv.requests]
    assert result.output.model_dump() == GOOD and len(srv.requests) == 4
    assert offered[2] == offered[3] == ["final_answer"]  # no reading in the corrective turn either
    assert "corrective_turn" in kinds(result.transcript)


def test_a_call_failing_again_and_again_withdraws_the_tools(workspace: Path, tmp_path: Path) -> None:
    """The live 1.5B implementer sent one failing edit 15 times in a call. The second failure of the same call says
    so; at max_repeated_failures (3, the implementer's; other roles default to 0) only the answer is offered.
    Another call in between does not reset the count."""
    role = get_role("explorer")
    role = role.model_copy(update={"limits": role.limits.model_copy(update={"max_repeated_failures": 3})})
    script = [call("read_file", path="nope.txt"), call("read_file", path="nope.txt"), call("list_dir", path="."),
              call("read_file", path="nope.txt"), call("final_answer", **GOOD)]
    with ScriptedServer(script) as srv:
        result = run_role(role, {"question": "q"}, workspace, backend(srv), transcripts=tmp_path / "tr")
        offered = [[t["function"]["name"] for t in r["tools"]] for r in srv.requests]
        last_tool_msg = [m for m in srv.requests[-1]["messages"] if m["role"] == "tool"][-1]["content"]
        second = [m for m in srv.requests[2]["messages"] if m["role"] == "tool"][-1]["content"]
    assert result.output.model_dump() == GOOD
    assert "read_file" in offered[3] and offered[4] == ["final_answer"]
    assert "failed 2 times" in second and "at 3 the tools are withdrawn" in second
    assert "no such file" in last_tool_msg and "failed 3 times, so the tools are withdrawn" in last_tool_msg
    rows = read_transcript(result.transcript)
    assert [(r["tool"], r["failures"]) for r in rows if r["kind"] == "repeat_breaker"] == [("read_file", 3)]


def _tool_ctx(tmp_path: Path, **limits: int):
    """A tool context with ``limits`` (the repeat counters start empty)."""
    from evolve.roles.runtime.tools import ToolContext
    from evolve.roles.runtime.transcript import Transcript

    return ToolContext(workspace=tmp_path, limits=Limits(**limits), transcript=Transcript.create(tmp_path / "tr", "t"))


def test_repeat_counts_clear_on_success_and_can_be_switched_off(tmp_path: Path) -> None:
    from evolve.roles.runtime.tools import _count_repeats, get_tool

    def ctx(limit: int):
        return _tool_ctx(tmp_path, max_repeated_failures=limit)

    read, write = get_tool("read_file"), get_tool("write_file")
    c = ctx(3)
    _count_repeats(c, read, {"path": "x"}, "error", "e")
    _count_repeats(c, read, {"path": "x"}, "ok", "fine")  # the same call succeeding clears its count
    assert "failed 2 times" not in _count_repeats(c, read, {"path": "x"}, "error", "e")
    _count_repeats(c, read, {"path": "x"}, "error", "e")
    _count_repeats(c, write, {"path": "y", "content": ""}, "ok", "written")  # the workspace changed
    assert _count_repeats(c, read, {"path": "x"}, "error", "e") == "e" and "answer_now" not in c.extra
    off = ctx(0)  # the default of every role but the implementer: nothing said, nothing withdrawn
    assert [_count_repeats(off, read, {"path": "x"}, "error", "e") for _ in range(5)] == ["e"] * 5
    assert "answer_now" not in off.extra
    assert get_role("implementer").limits.max_repeated_failures == 3


def test_the_same_read_again_and_again_withdraws_the_tools(workspace: Path, tmp_path: Path) -> None:
    """The live 1.5B analyst (night of 2026-12-07) asked for one digest 8 times in a row. With max_repeated_calls
    (3; the default 0 changes nothing) the second answer of the same read says it is a repeat, and at 3 only the
    answer is offered."""
    role = get_role("explorer")
    role = role.model_copy(update={"limits": role.limits.model_copy(update={"max_repeated_calls": 3})})
    script = [call("list_dir", path="."), call("list_dir", path="."), call("list_dir", path="."),
              call("final_answer", **GOOD)]
    with ScriptedServer(script) as srv:
        result = run_role(role, {"question": "q"}, workspace, backend(srv), transcripts=tmp_path / "tr")
        offered = [[t["function"]["name"] for t in r["tools"]] for r in srv.requests]
        results = [[m for m in r["messages"] if m["role"] == "tool"][-1]["content"] for r in srv.requests[1:]]
    assert result.output.model_dump() == GOOD
    assert "list_dir" in offered[2] and offered[3] == ["final_answer"]
    assert "same result" not in results[0] and "same result as the 1 earlier time" in results[1]
    assert "3 times" in results[2] and "the tools are withdrawn" in results[2]
    rows = read_transcript(result.transcript)
    assert [(r["tool"], r["repeats"]) for r in rows if r["kind"] == "repeat_breaker"] == [("list_dir", 3)]


def test_repeated_reads_count_until_a_write_or_a_failure_and_are_off_by_default(tmp_path: Path) -> None:
    from evolve.roles.runtime.tools import _count_repeats, get_tool

    def ctx(limit: int):
        return _tool_ctx(tmp_path, max_repeated_calls=limit)

    read, write = get_tool("read_file"), get_tool("write_file")
    c = ctx(3)
    _count_repeats(c, read, {"path": "x"}, "ok", "text")
    _count_repeats(c, write, {"path": "x", "content": "new"}, "ok", "written")  # the file may have changed
    assert _count_repeats(c, read, {"path": "x"}, "ok", "text") == "text"  # so reading it again is no repeat
    assert "same result" in _count_repeats(c, read, {"path": "x"}, "ok", "text")
    assert _count_repeats(c, read, {"path": "other"}, "ok", "text") == "text"  # other arguments: another call
    assert "answer_now" not in c.extra
    assert "withdrawn" in _count_repeats(c, read, {"path": "x"}, "ok", "text") and "answer_now" in c.extra
    off = ctx(0)
    assert [_count_repeats(off, read, {"path": "x"}, "ok", "t") for _ in range(9)] == ["t"] * 9
    assert "answer_now" not in off.extra and get_role("analyst").limits.max_repeated_calls == 0


def test_the_main_jobs_read_only_roles_answer_after_three_repeats() -> None:
    import tomllib

    from evolve.experiment.config import ExperimentConfig

    demo = Path(__file__).resolve().parents[1] / "scripts" / "demo-experiment.toml"
    agents = ExperimentConfig.model_validate(tomllib.loads(demo.read_text())).agents
    for name in ("analyst", "researcher", "proposer"):
        role = agents.role_limits(get_role(name))
        assert role.limits.max_repeated_calls == role.limits.max_repeated_failures == 3, name
        assert role.limits.max_turns == get_role(name).limits.max_turns  # the other limits stay the role's own
    assert agents.role_limits(get_role("implementer")).limits.max_repeated_calls == 0


def test_a_corrective_turn_samples_instead_of_repeating_itself(workspace: Path, tmp_path: Path) -> None:
    """At temperature 0 the 1.5B proposer wrote one invalid answer three times, word for word (night of
    2026-12-07). A request that answers a corrective turn samples (temperature 0.7, the seed moved on by the
    turns so far); every other request keeps the role's settings."""
    bad = {"answer": "x", "evidence": [{"path": "a.txt"}]}
    script = [call("list_dir", path="."), call("read_file", path="a.txt"), call("final_answer", **bad),
              call("final_answer", **bad), call("final_answer", **GOOD)]
    with ScriptedServer(script) as srv:
        result = run_role(get_role("explorer"), {"question": "q"}, workspace, backend(srv),
                          transcripts=tmp_path / "tr")
        sent = [(r.get("temperature"), r.get("seed")) for r in srv.requests]
    assert result.output.model_dump() == GOOD
    assert sent == [(0.0, 0), (0.0, 0), (0.0, 0), (0.7, 1), (0.7, 2)]
    rows = read_transcript(result.transcript)
    assert [(r["temperature"], r["seed"], r["corrective_turns"]) for r in rows if r["kind"] == "resample"] == \
        [(0.7, 1, 1), (0.7, 2, 2)]
