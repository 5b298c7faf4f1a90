"""Tool calls through one JSON schema (endpoint ``tool_calls = "schema"``): what goes over the wire, and a whole
role call on a scripted server that only ever answers in text (as llama.cpp does once the tools are a schema)."""

from __future__ import annotations

import json
from pathlib import Path

from evolve.roles.runtime import get_role, make_backend, read_transcript, run_role
from evolve.roles.runtime.backends.schema_tools import (
    CUT_OFF_MAX_ITEMS,
    TEXT_REPLY,
    bound_lists,
    call_schema,
    rewrite_request,
    rewrite_response,
)
from trials.endpoints.scripted import ScriptedServer
from trials.endpoints.spec import EndpointSpec

TOOLS = [
    {"type": "function", "function": {"name": "read_file", "description": "read a file",
                                      "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                                                     "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "final_answer", "description": "answer",
        "parameters": {"type": "object", "$defs": {"Ev": {"type": "object", "properties": {"path": {"type": "string"}}}},
                       "properties": {"evidence": {"type": "array", "items": {"$ref": "#/$defs/Ev"}}}}}},
]


def test_the_request_loses_its_tools_and_gains_a_schema_of_one_call():
    body = {"model": "m", "messages": [{"role": "system", "content": "You are X."}, {"role": "user", "content": "q"}],
            "tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False, "max_tokens": 50}
    new = rewrite_request(body)
    assert new is not None and not {"tools", "tool_choice", "parallel_tool_calls"} & set(new)
    assert new["max_tokens"] == 50 and body["messages"][0]["content"] == "You are X."  # the original is untouched
    system = new["messages"][0]["content"]
    assert system.startswith("You are X.") and "- read_file(path: string): read a file" in system
    schema = new["response_format"]["json_schema"]["schema"]
    names = [c["properties"]["name"]["const"] for c in schema["anyOf"]]
    assert names == ["read_file", "final_answer"]  # required: no text reply offered
    evidence = schema["anyOf"][1]["properties"]["arguments"]["properties"]["evidence"]
    assert evidence["items"] == {"type": "object", "properties": {"path": {"type": "string"}}}  # $ref inlined
    assert "$defs" not in json.dumps(schema) and "maxItems" not in json.dumps(schema)  # unbounded as before


def test_after_a_cut_off_call_every_list_is_bounded_and_the_model_told_why():
    """The night of 2026-12-07: the 1.5B analyst repeated two ids in a list until its tokens ran out, twice."""
    loop = '{"name": "final_answer", "arguments": {"evidence": [' + '{"path": "a"}, ' * 300
    body = {"model": "m", "tools": TOOLS, "tool_choice": "required", "messages": [
        {"role": "system", "content": "You are X."}, {"role": "user", "content": "q"},
        {"role": "assistant", "content": loop}, {"role": "user", "content": "Please include your response in a tool call."}]}
    new = rewrite_request(body)
    schema = new["response_format"]["json_schema"]["schema"]
    evidence = schema["anyOf"][1]["properties"]["arguments"]["properties"]["evidence"]
    assert evidence["maxItems"] == CUT_OFF_MAX_ITEMS and evidence["items"]["type"] == "object"
    last = new["messages"][-1]
    assert last["role"] == "user" and last["content"].startswith("Please include your response in a tool call.")
    assert "cut off at the token limit" in last["content"] and f"at most {CUT_OFF_MAX_ITEMS} items" in last["content"]
    assert body["messages"][-1]["content"] == "Please include your response in a tool call."  # the original untouched
    # a list that must hold more keeps its lower bound; a complete call or plain text earlier is no cut-off
    assert bound_lists({"type": "array", "minItems": 7})["maxItems"] == 7
    assert bound_lists({"type": "array", "maxItems": 2}) == {"type": "array", "maxItems": 2}
    fine = {**body, "messages": [*body["messages"][:2], {"role": "assistant", "content": '{"name": "x", "arguments": {}}'},
                                 {"role": "assistant", "content": "plain words"}, {"role": "user", "content": "go on"}]}
    assert "maxItems" not in json.dumps(rewrite_request(fine)) and rewrite_request(fine)["messages"][-1]["content"] == "go on"


def test_auto_offers_a_text_reply_and_requests_without_tools_pass_unchanged():
    auto = rewrite_request({"messages": [{"role": "user", "content": "q"}], "tools": TOOLS[:1]})
    assert auto is not None and auto["messages"][0]["role"] == "system"  # a system message is added
    assert [c["properties"]["name"]["const"] for c in auto["response_format"]["json_schema"]["schema"]["anyOf"]] \
        == ["read_file", TEXT_REPLY]
    assert rewrite_request({"messages": [], "tools": TOOLS, "tool_choice": "none"}) is None
    assert rewrite_request({"messages": []}) is None
    assert rewrite_request({"messages": [], "tools": TOOLS, "response_format": {"type": "json_object"}}) is None
    one = call_schema(TOOLS[:1], allow_text=False)
    assert one["properties"]["name"] == {"const": "read_file"}  # a single tool needs no anyOf


def test_the_reply_becomes_a_tool_call_and_a_cut_off_reply_stays_text():
    sent = {"messages": [{"role": "user", "content": "q"}]}
    call = {"choices": [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": '{"name": "read_file", "arguments": {"path": "a.txt"}}'}}]}
    out = rewrite_response(json.loads(json.dumps(call)), sent)
    message = out["choices"][0]["message"]
    assert message["content"] is None and out["choices"][0]["finish_reason"] == "tool_calls"
    assert message["tool_calls"][0]["function"] == {"name": "read_file", "arguments": '{"path": "a.txt"}'}
    assert message["tool_calls"][0]["id"] == rewrite_response(json.loads(json.dumps(call)), sent)[
        "choices"][0]["message"]["tool_calls"][0]["id"]  # the same on a replay
    cut = {"choices": [{"message": {"role": "assistant", "content": '{"name": "read_fi'}, "finish_reason": "length"}]}
    assert rewrite_response(json.loads(json.dumps(cut)), sent) == cut
    text = {"choices": [{"message": {"content": json.dumps({"name": TEXT_REPLY, "arguments": {"text": "hi"}})}}]}
    assert rewrite_response(text, sent)["choices"][0]["message"] == {"content": "hi"}


def test_a_role_call_on_a_text_only_server_calls_its_tools(tmp_path: Path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("hello world\n")
    good = {"answer": "it says hello", "evidence": [{"path": "a.txt", "detail": "line 1"}]}
    replies = [{"name": "list_dir", "arguments": {"path": "."}}, {"name": "read_file", "arguments": {"path": "a.txt"}},
               {"name": "final_answer", "arguments": good}]
    script = [{"content": json.dumps(r)} for r in replies]  # the server never sends tool_calls itself
    with ScriptedServer(script, flavor="llamacpp") as srv:
        backend = make_backend("openai", EndpointSpec(base_url=srv.base_url, model="scripted", tool_calls="schema"))
        result = run_role(get_role("explorer"), {"question": "what does a.txt say?"}, ws, backend,
                          transcripts=tmp_path / "tr")
        requests = srv.requests
    assert result.output.model_dump() == good and result.usage.tool_calls == 2
    assert all("tools" not in r and r["response_format"]["type"] == "json_schema" for r in requests)
    # the tool's real result went back to the model, after its call, in OpenAI's tool message form
    last = requests[-1]["messages"]
    assert any(m["role"] == "tool" and "1: hello world" in m["content"] for m in last)
    assert any(m["role"] == "assistant" and m.get("tool_calls") for m in last)
    assert [r["tool"] for r in read_transcript(result.transcript) if r["kind"] == "tool_call"] == \
        ["list_dir", "read_file"]


def test_auto_is_schema_on_llama_cpp_only():
    from evolve.roles.runtime.backends.schema_tools import resolve_tool_calls

    with ScriptedServer([], flavor="llamacpp") as cpp, ScriptedServer([], flavor="vllm") as vllm:
        assert resolve_tool_calls("auto", cpp.base_url) == "schema"
        assert resolve_tool_calls("auto", vllm.base_url) == "native"
        assert resolve_tool_calls("native", cpp.base_url) == "native"  # an explicit choice is never probed
        assert [c for c in cpp.calls if c[1] == "/props"] and len(cpp.calls) == 1
    assert resolve_tool_calls("auto", "http://127.0.0.1:9/v1") == "native"  # nothing there: the call reports it


def test_a_role_call_whose_answer_was_cut_off_gets_bounded_lists_and_then_answers(tmp_path: Path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("hello world\n")
    good = {"answer": "it says hello", "evidence": [{"path": "a.txt", "detail": "line 1"}]}
    # spaced as the live 1.5B writes it (its first cut-off of the night began '{\n  "name"' and went unnoticed)
    loop = '{\n  "name": "final_answer",\n  "arguments": {"answer": "x", "evidence": [' + '{"path": "a.txt"}, ' * 200
    read = {"content": json.dumps({"name": "read_file", "arguments": {"path": "a.txt"}})}
    script = [read, {"content": loop, "finish_reason": "length"}, read,
              {"content": json.dumps({"name": "final_answer", "arguments": good})}]
    with ScriptedServer(script, flavor="llamacpp") as srv:
        backend = make_backend("openai", EndpointSpec(base_url=srv.base_url, model="scripted", tool_calls="schema"))
        result = run_role(get_role("explorer"), {"question": "what does a.txt say?"}, ws, backend,
                          transcripts=tmp_path / "tr")
        requests = srv.requests
    assert result.output.model_dump() == good and len(requests) == 4
    assert "maxItems" not in json.dumps(requests[0]) and "maxItems" not in json.dumps(requests[1])
    # from the request after the cut-off on, the grammar ends every list; that request says why
    assert all('"maxItems": 5' in json.dumps(r["response_format"]) for r in requests[2:])
    notes = ["cut off at the token limit" in json.dumps(r["messages"]) for r in requests]
    assert notes == [False, False, True, False]  # said once, in the request right after the cut-off (not history)
    assert "cut off at the token limit" in requests[2]["messages"][-1]["content"]
    # and the request after the cut-off (a corrective turn after a text reply) samples
    assert [(r.get("temperature"), r.get("seed")) for r in requests] == [(0.0, 0), (0.0, 0), (0.7, 1), (0.0, 0)]
    assert [row["kind"] for row in read_transcript(result.transcript)].count("resample") == 1
