"""Tool calls through one JSON schema, for servers whose own tool grammar lets a small model talk past its tools.

llama.cpp's tool grammar (Qwen 2.5's Hermes format) allows free text before the first ``<tool_call>`` even when
``tool_choice`` is ``required``; the bundled 1.5B model then imitates the ``<tools>`` listing of its prompt and never
calls anything (the stored explorer recording of issue 11). With ``tool_calls = "schema"`` the HTTP client rewrites
each chat request that carries tools: the tools are described in the system message, dropped from the request,
and replaced by a ``response_format`` whose JSON schema admits exactly one call of one of them
(``{"name": ..., "arguments": {...}}``, the shape the model was trained on). The server's grammar then constrains
every token; the reply is turned back into an OpenAI ``tool_calls`` message, so the agent loop above (pydantic-ai)
sees an ordinary tool-calling endpoint. A reply that is not a complete call (cut off at the token limit) is left
as text, and the loop's corrective turn handles it.

A cut-off call is almost always a small model repeating itself inside a list (the night of 2026-12-07: the 1.5B
analyst wrote ``"dispatch.session", "dispatch.with_environment"`` until its 1,024 tokens ran out, and at temperature
0 the corrective turn wrote the same again). So a request whose conversation holds such a reply bounds every list
of the call schema (``maxItems``, which the server's grammar enforces) and says why in its last message; a
conversation without one is sent exactly as before.

The rewrite happens in :meth:`SchemaToolClient.send`, above the transport, so a recording (vcrpy patches the
transport layer) holds what went over the wire and a replay runs this code too.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Literal

import httpx

from trials.endpoints.client import server_root

_OPENS_CALL = re.compile(r'\s*\{\s*"name"\s*:')  # a call object's start, however the model spaced it
CUT_OFF_MAX_ITEMS = 5  # the bound on each list of a call after a cut-off one (its minItems where that is larger)
TEXT_REPLY = "reply"  # the extra choice when the request lets the model answer in text (tool_choice "auto")
SCHEMA_NAME = "tool_call"  # the response format's name: a recording made through this client is known by it


def _inline_refs(schema: Any, defs: dict[str, Any], seen: tuple[str, ...] = ()) -> Any:
    """``schema`` with every local ``$ref`` replaced by its definition (the union below merges tools whose
    ``$defs`` may share names). A recursive definition is left as a free object rather than looping."""
    if isinstance(schema, list):
        return [_inline_refs(item, defs, seen) for item in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref.removeprefix("#/$defs/")
        if name in seen or name not in defs:
            return {"type": "object"}
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        return {**_inline_refs(defs[name], defs, (*seen, name)), **_inline_refs(rest, defs, seen)}
    return {k: _inline_refs(v, defs, seen) for k, v in schema.items() if k != "$defs"}


def call_schema(tools: list[dict[str, Any]], *, allow_text: bool) -> dict[str, Any]:
    """The JSON schema of one reply: a call of one of ``tools`` (OpenAI tool entries), or a text reply."""
    choices = []
    for tool in tools:
        fn = tool.get("function", tool)
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        params = _inline_refs(params, params.get("$defs", {}))
        choices.append({"type": "object", "properties": {"name": {"const": fn["name"]}, "arguments": params},
                        "required": ["name", "arguments"], "additionalProperties": False})
    if allow_text:
        choices.append({"type": "object", "properties": {
            "name": {"const": TEXT_REPLY},
            "arguments": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
                          "additionalProperties": False}},
            "required": ["name", "arguments"], "additionalProperties": False})
    return {"anyOf": choices} if len(choices) > 1 else choices[0]


def tools_prompt(tools: list[dict[str, Any]], *, allow_text: bool) -> str:
    """What the system message says about the tools (the request no longer carries them)."""
    lines = ["# Tools", "", "Every reply of yours is exactly one JSON object that calls one tool:",
             '{"name": <tool name>, "arguments": {<the tool\'s arguments>}}', "", "The tools:"]
    for tool in tools:
        fn = tool.get("function", tool)
        params = fn.get("parameters") or {}
        required = set(params.get("required", []))
        args = ", ".join(_argument(name, spec, name in required)
                         for name, spec in params.get("properties", {}).items())
        lines.append(f"- {fn['name']}({args}): {fn.get('description', '').strip()}")
    if allow_text:
        lines.append(f'- {TEXT_REPLY}(text: string): answer in plain text instead of calling a tool')
    lines += ["", ("Leave out an optional argument (marked ?) to get its default. The result of each call comes "
                   "back in the next message.")]
    return "\n".join(lines)


def _type_name(spec: dict[str, Any]) -> str:
    if "type" in spec:
        return str(spec["type"])
    kinds = [str(s.get("type", "object")) for s in spec.get("anyOf", []) if s.get("type") != "null"]
    return "|".join(kinds) or "object"


def _argument(name: str, spec: dict[str, Any], required: bool) -> str:
    """``path: string`` or ``start?: integer = 1``, with the argument's description when it has one."""
    text = f"{name}: {_type_name(spec)}" if required else f"{name}?: {_type_name(spec)}"
    if not required and "default" in spec:
        text += f" = {json.dumps(spec['default'])}"
    if spec.get("description"):
        text += f" ({spec['description']})"
    return text


def _is_cut_off(message: dict[str, Any]) -> bool:
    """An assistant message that is a call cut off: text that opens a call object and is not JSON (a complete call
    went back as ``tool_calls``, a text reply as plain text)."""
    content = message.get("content")
    if message.get("role") != "assistant" or not isinstance(content, str) or not _OPENS_CALL.match(content):
        return False
    try:
        json.loads(content)
    except ValueError:
        return True
    return False


def bound_lists(schema: Any, max_items: int = CUT_OFF_MAX_ITEMS) -> Any:
    """``schema`` with every array that has no ``maxItems`` given one (``max_items``, or its ``minItems``)."""
    if isinstance(schema, list):
        return [bound_lists(item, max_items) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: bound_lists(v, max_items) for k, v in schema.items()}
    if out.get("type") == "array" and "maxItems" not in out:
        out["maxItems"] = max(max_items, int(out.get("minItems", 0)))
    return out


def cut_off_note(count: int) -> str:
    return (f"Your last reply was cut off at the token limit before the call was complete ({count} so far in this "
            f"conversation): it repeated itself. Reply with one complete call; every list now holds at most "
            f"{CUT_OFF_MAX_ITEMS} items, so keep them short and do not repeat an item.")


def rewrite_request(body: dict[str, Any]) -> dict[str, Any] | None:
    """The request to send instead of ``body``, or None when it has no tools to rewrite (or asks for a response
    format of its own, which cannot be combined with the call schema)."""
    tools = body.get("tools")
    choice = body.get("tool_choice", "auto")
    if not tools or choice == "none" or body.get("response_format") or body.get("stream"):
        return None
    if isinstance(choice, dict):  # a named tool: only that one
        wanted = choice.get("function", {}).get("name")
        tools = [t for t in tools if t.get("function", t).get("name") == wanted] or tools
        choice = "required"
    allow_text = choice == "auto"
    new = {k: v for k, v in body.items() if k not in ("tools", "tool_choice", "parallel_tool_calls")}
    messages = [dict(m) for m in body.get("messages", [])]
    note = tools_prompt(tools, allow_text=allow_text)
    if messages and messages[0].get("role") in ("system", "developer") and isinstance(messages[0].get("content"), str):
        messages[0]["content"] = f"{messages[0]['content'].rstrip()}\n\n{note}"
    else:
        messages.insert(0, {"role": "system", "content": note})
    schema = call_schema(tools, allow_text=allow_text)
    if cut := sum(map(_is_cut_off, messages)):
        schema = bound_lists(schema)  # for the rest of the conversation
        said = [m for m in messages if m.get("role") == "assistant"]
        if _is_cut_off(said[-1]):  # the reply just before this request: say why the lists are bounded now
            last = messages[-1]
            if last.get("role") == "user" and isinstance(last.get("content"), str):
                last["content"] = f"{last['content'].rstrip()}\n\n{cut_off_note(cut)}"
            else:
                messages.append({"role": "user", "content": cut_off_note(cut)})
    new["messages"] = messages
    new["response_format"] = {"type": "json_schema", "json_schema": {"name": SCHEMA_NAME, "schema": schema}}
    return new


def _call_id(body: dict[str, Any], index: int) -> str:
    """A call id that is the same on every replay of the same conversation (a recording matches on it)."""
    digest = hashlib.sha256(json.dumps(body.get("messages", []), sort_keys=True).encode()).hexdigest()[:12]
    return f"call_{digest}_{index}"


def rewrite_response(payload: dict[str, Any], sent: dict[str, Any]) -> dict[str, Any]:
    """``payload`` with each choice whose content is a complete call turned into an OpenAI tool call."""
    for index, choice in enumerate(payload.get("choices") or []):
        message = choice.get("message") or {}
        content = message.get("content")
        if not isinstance(content, str) or message.get("tool_calls"):
            continue
        try:
            call = json.loads(content)
        except ValueError:
            continue  # cut off or not JSON: the loop's corrective turn sees the text
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            continue
        args = call.get("arguments") if isinstance(call.get("arguments"), dict) else {}
        if call["name"] == TEXT_REPLY:
            message["content"] = str(args.get("text", ""))
            continue
        message["content"] = None
        message["tool_calls"] = [{"id": _call_id(sent, index), "type": "function",
                                  "function": {"name": call["name"], "arguments": json.dumps(args)}}]
        choice["finish_reason"] = "tool_calls"
    return payload


class SchemaToolClient(httpx.AsyncClient):
    """An ``httpx.AsyncClient`` for the OpenAI SDK that sends tool requests as schema-constrained ones."""

    async def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        if request.method != "POST" or not request.url.path.endswith("/chat/completions"):
            return await super().send(request, **kwargs)
        try:
            body = json.loads(request.content)
        except ValueError:
            return await super().send(request, **kwargs)
        new = rewrite_request(body) if isinstance(body, dict) else None
        if new is None:
            return await super().send(request, **kwargs)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("content-length", "content-type")}
        wire = self.build_request("POST", request.url, json=new, headers=headers,
                                  extensions=request.extensions)
        response = await super().send(wire, **kwargs)
        await response.aread()
        if response.status_code != 200:
            return response
        try:
            payload = rewrite_response(response.json(), new)
        except ValueError:
            return response
        out_headers = {k: v for k, v in response.headers.items()
                       if k.lower() not in ("content-length", "content-encoding", "transfer-encoding")}
        return httpx.Response(response.status_code, headers=out_headers, json=payload, request=request,
                              extensions=response.extensions)


def is_llama_cpp(base_url: str, timeout: float = 5.0) -> bool:
    """Whether ``base_url`` is served by llama.cpp's server (it alone answers ``GET /props`` with its generation
    settings). An unreachable server counts as not llama.cpp: the role call that follows reports the connection
    error itself. Not cached here: a backend asks once and keeps the answer (a port may serve something else
    later)."""
    try:
        response = httpx.get(f"{server_root(base_url)}/props", timeout=timeout)
        return response.status_code == 200 and "default_generation_settings" in response.json()
    except (httpx.HTTPError, ValueError):
        return False


def resolve_tool_calls(mode: str, base_url: str) -> Literal["native", "schema"]:
    """``auto`` made concrete: schema on llama.cpp (its tool grammar lets small models talk past their tools)."""
    if mode == "auto":
        return "schema" if is_llama_cpp(base_url) else "native"
    return "schema" if mode == "schema" else "native"
