"""A scripted OpenAI-compatible HTTP server (tests, behavioural contracts): real HTTP, real sockets, no model.

    with ScriptedServer(["hello", {"content": "{}", "finish_reason": "length"}]) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x")
        ...
        srv.requests  # the JSON bodies /v1/chat/completions received, in arrival order

``responder`` is either a list consumed one item per chat request (exhausted → HTTP 500 saying so), or a
callable ``(body) -> item``. An item is

- a ``str``: the assistant content;
- a ``dict``: ``{"content", "finish_reason"="stop", "logprobs"=None, "usage"=None, "tool_calls"=None}``;
  ``logprobs`` is either the OpenAI ``{"content": [...]}`` object or just its list; ``usage`` overrides the
  computed counts; ``tool_calls`` is a list of ``{"name", "arguments"}`` (finish_reason then ``tool_calls``);
- a ``list`` of str/dict: one per choice. With ``n>1`` a single (non-list) item is replicated; a list shorter
  than ``n`` is answered as is (that is how a server that ignores ``n`` behaves);
- a :class:`ScriptedError`: an OpenAI-style error body with its status (see the ``context_length_*`` helpers);
- a :class:`RawReply`: exactly these bytes with this status (garbage a broken server or proxy sends).

Other routes: ``GET /v1/models`` (``max_model_len``), ``GET /health``, ``POST /tokenize`` (≈ 1 token per 4
chars), and with ``flavor="llamacpp"`` also ``GET /props`` (``default_generation_settings.n_ctx``) while
``/v1/models`` then omits ``max_model_len``, as llama.cpp's server does. ``delay`` sleeps before answering
each chat request, on its own thread, so concurrent requests overlap.

Prompt cache and timings: the server remembers the last prompt it saw (one slot) and counts the prefix the next
prompt shares with it as cached. The ``llamacpp`` flavor answers every chat with llama.cpp's ``timings`` object
(``cache_n``, ``prompt_n``, ``prompt_ms``, ``predicted_n``, ``predicted_ms``...): of the time it held the
request, a quarter is reported as prefill and a half as decode, the rest is left as waiting; an item's
``timings`` dict overrides any of these. ``prefix_cache=True`` makes the ``vllm`` flavor report the cached
prefix as vLLM does with ``--enable-prompt-tokens-details`` (``usage.prompt_tokens_details.cached_tokens``,
whole 16-token blocks).
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


@dataclass
class ScriptedError:
    """Answer a request with an HTTP error in OpenAI's shape: ``{"error": {"message", "type", "code"}}``."""

    status: int
    message: str
    type: str | None = None
    code: str | int | None = None

    @classmethod
    def context_length_vllm(cls, limit: int = 8192, requested: int = 9000) -> ScriptedError:
        """vLLM's wording for a prompt that does not fit."""
        return cls(
            400,
            f"This model's maximum context length is {limit} tokens. However, you requested {requested} "
            f"tokens ({requested - 256} in the messages, 256 in the completion). Please reduce the length of "
            "the messages or completion.",
            type="BadRequestError",
            code=400,
        )

    @classmethod
    def context_length_llamacpp(cls, limit: int = 8192, requested: int = 9000) -> ScriptedError:
        """llama.cpp server's wording."""
        return cls(
            400,
            f"the request exceeds the available context size ({limit} tokens), try increasing it "
            f"(requested {requested})",
            type="exceed_context_size_error",
            code=400,
        )

    @classmethod
    def context_length_openai(cls, limit: int = 8192, requested: int = 9000) -> ScriptedError:
        """OpenAI's own API wording and code."""
        return cls(
            400,
            f"This model's maximum context length is {limit} tokens. However, your messages resulted in "
            f"{requested} tokens. Please reduce the length of the messages.",
            type="invalid_request_error",
            code="context_length_exceeded",
        )

    @classmethod
    def auth(cls) -> ScriptedError:
        return cls(401, "Incorrect API key provided.", type="invalid_request_error", code="invalid_api_key")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type or "error", "code": self.code,
                          "param": None}}


@dataclass
class RawReply:
    """Answer a request with this text as it is (not JSON, or JSON of the wrong shape)."""

    text: str
    status: int = 200
    content_type: str = "text/plain"


Item = str | dict | list | ScriptedError | RawReply
Responder = Iterable[Item] | Callable[[dict], Item]


def estimate_tokens(text: str) -> int:
    """The fake's tokenizer: one token per four characters, at least one for non-empty text."""
    return (len(text) + 3) // 4 if text else 0


def _fake_logprobs(content: str, top_n: int) -> dict:
    """A plausible ``logprobs`` object for the first token of ``content`` (4 chars = 1 token)."""
    token = content[:4] if content else ""
    top = [{"token": token, "logprob": -0.05, "bytes": list(token.encode())}]
    for i, alt in enumerate(["A", "B", "yes", "no", "the", " ", "\n", "1", "0", "x"]):
        if len(top) >= max(top_n, 1):
            break
        if alt != token:
            top.append({"token": alt, "logprob": -3.0 - i, "bytes": list(alt.encode())})
    entry = {"token": token, "logprob": -0.05, "bytes": list(token.encode()),
             "top_logprobs": top[: top_n] if top_n else []}
    return {"content": [entry]}


def _tool_calls(calls: list, choice: int) -> list[dict]:
    """OpenAI ``tool_calls`` from ``{"name", "arguments"}`` items (arguments a dict or a JSON string)."""
    out = []
    for i, call in enumerate(calls):
        args = call.get("arguments", {})
        out.append({"id": call.get("id") or f"call_{choice}_{i}_{uuid.uuid4().hex[:6]}", "type": "function",
                    "function": {"name": call["name"],
                                 "arguments": args if isinstance(args, str) else json.dumps(args)}})
    return out


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read srv.requests instead
        pass

    def _send(self, status: int, payload: dict | RawReply) -> None:
        raw = isinstance(payload, RawReply)
        data = payload.text.encode() if raw else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", payload.content_type if raw else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _read_json(self) -> dict | None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as exc:
            self._send(400, ScriptedError(400, f"invalid JSON body: {exc}").body())
            return None
        if not isinstance(body, dict):
            self._send(400, ScriptedError(400, "JSON body must be an object").body())
            return None
        return body

    def _authorised(self) -> bool:
        owner = self.server.owner
        if owner.api_key is None:
            return True
        if self.headers.get("Authorization", "") == f"Bearer {owner.api_key}":
            return True
        self._send(401, ScriptedError.auth().body())
        return False

    def do_GET(self) -> None:
        owner = self.server.owner
        path = self.path.split("?", 1)[0].rstrip("/")
        owner._record_call("GET", path, None)
        if path == "/health":
            self._send(200, {"status": "ok"})
        elif path == "/v1/models":
            if not self._authorised():
                return
            card: dict[str, Any] = {"id": owner.model, "object": "model", "created": 0, "owned_by": "scripted"}
            if owner.flavor == "vllm":
                card["max_model_len"] = owner.context_limit
            self._send(200, {"object": "list", "data": [card]})
        elif path == "/props" and owner.flavor == "llamacpp":
            self._send(200, {"default_generation_settings": {"n_ctx": owner.context_limit},
                             "total_slots": 2, "model_path": f"/models/{owner.model}.gguf"})
        else:
            self._send(404, ScriptedError(404, f"no route GET {path}", type="not_found_error").body())

    def do_POST(self) -> None:
        owner = self.server.owner
        path = self.path.split("?", 1)[0].rstrip("/")
        body = self._read_json()
        if body is None:
            return
        owner._record_call("POST", path, body)
        if path == "/v1/chat/completions":
            if not self._authorised():
                return
            owner._record_chat(body)
            started = time.monotonic()
            if owner.delay:
                time.sleep(owner.delay)
            status, payload = owner._answer_chat(body, time.monotonic() - started)
            self._send(status, payload)
        elif path in ("/tokenize", "/v1/tokenize"):
            if "content" in body:
                text = str(body["content"])
            elif "prompt" in body:
                text = str(body["prompt"])
            else:
                text = json.dumps(body.get("messages", []))
            count = estimate_tokens(text)
            self._send(200, {"tokens": list(range(count)), "count": count,
                             "max_model_len": owner.context_limit})
        else:
            self._send(404, ScriptedError(404, f"no route POST {path}", type="not_found_error").body())


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # bursts of concurrent verifier calls overflow the default backlog of 5
    daemon_threads = True  # a hung test request never blocks interpreter exit
    owner: ScriptedServer


class ScriptedServer:
    """See the module docstring. Use as a context manager, or call :meth:`start` / :meth:`stop`."""

    def __init__(self, responder: Responder, model: str = "scripted", context_limit: int = 8192,
                 delay: float = 0.0, *, api_key: str | None = None, flavor: str = "vllm",
                 host: str = "127.0.0.1", port: int = 0, prefix_cache: bool = False):
        if flavor not in ("vllm", "llamacpp"):
            raise ValueError(f"flavor must be 'vllm' or 'llamacpp', not {flavor!r}")
        self.model, self.context_limit, self.delay = model, context_limit, delay
        self.api_key, self.flavor, self.host, self._port = api_key, flavor, host, port
        self.prefix_cache = prefix_cache
        self._last_prompt = ""  # the slot's cache: the prompt text of the last chat request
        self._lock = threading.Lock()
        if callable(responder):
            self._callable: Callable[[dict], Item] | None = responder
            self._script: list[Item] = []
        else:
            self._callable, self._script = None, list(responder)
        self._served = 0
        self.requests: list[dict] = []
        self.calls: list[tuple[str, str, dict | None]] = []  # (method, path, body) of every request
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> Self:
        if self._httpd is not None:
            return self
        self._httpd = _Server((self.host, self._port), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="scripted-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("ScriptedServer is not started")
        return self._httpd.server_address[1]

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    # -- script ----------------------------------------------------------------------------------

    def push(self, *items: Item) -> None:
        """Append items to a list script while the server runs."""
        with self._lock:
            self._script.extend(items)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._script)

    def _record_call(self, method: str, path: str, body: dict | None) -> None:
        with self._lock:
            self.calls.append((method, path, body))

    def _record_chat(self, body: dict) -> None:
        with self._lock:
            self.requests.append(body)

    def _next_item(self, body: dict) -> Item | None:
        if self._callable is not None:
            return self._callable(body)
        with self._lock:
            if not self._script:
                return None
            self._served += 1
            return self._script.pop(0)

    def _cached_tokens(self, prompt: str, prompt_tokens: int) -> int:
        """Tokens of ``prompt``'s prefix shared with the last prompt (at least one token is evaluated again)."""
        with self._lock:
            last, self._last_prompt = self._last_prompt, prompt
        shared = len(os.path.commonprefix([last, prompt]))
        return max(0, min(shared // 4, prompt_tokens - 1))

    def _cache_figures(self, payload: dict, prompt: str, elapsed: float, override: dict | None) -> None:
        """llama.cpp's ``timings`` or vLLM's cached-token count, as the flavor's server would send them."""
        usage = payload["usage"]
        cached = self._cached_tokens(prompt, usage["prompt_tokens"])
        if self.flavor == "vllm":
            if self.prefix_cache:
                usage["prompt_tokens_details"] = {"cached_tokens": cached // 16 * 16}
            return
        held_ms = elapsed * 1000.0
        timings = {"cache_n": cached, "prompt_n": usage["prompt_tokens"] - cached, "prompt_ms": held_ms / 4,
                   "predicted_n": usage["completion_tokens"], "predicted_ms": held_ms / 2, **(override or {})}
        for what, n, ms in (("prompt", "prompt_n", "prompt_ms"), ("predicted", "predicted_n", "predicted_ms")):
            timings[f"{what}_per_token_ms"] = timings[ms] / timings[n] if timings[n] else 0.0
            timings[f"{what}_per_second"] = 1000.0 * timings[n] / timings[ms] if timings[ms] else 0.0
        payload["timings"] = timings

    def _answer_chat(self, body: dict, elapsed: float = 0.0) -> tuple[int, dict | RawReply]:
        if body.get("stream"):
            return 400, ScriptedError(400, "ScriptedServer does not stream; send stream=false").body()
        try:
            item = self._next_item(body)
        except Exception as exc:  # noqa: BLE001 (a broken test responder shows up as a clear 500)
            return 500, ScriptedError(500, f"scripted responder raised {type(exc).__name__}: {exc}").body()
        if item is None:
            return 500, ScriptedError(
                500, f"ScriptedServer script exhausted after {self._served} responses "
                     f"(request #{len(self.requests)} had nothing left to answer)",
                type="script_exhausted").body()
        if isinstance(item, ScriptedError):
            return item.status, item.body()
        if isinstance(item, RawReply):
            return item.status, item
        n = int(body.get("n") or 1)
        if isinstance(item, list):
            items = item
        else:
            items = [item] * n
        if not items:
            return 500, ScriptedError(500, "scripted item is an empty list of choices").body()
        want_logprobs = bool(body.get("logprobs"))
        top_n = int(body.get("top_logprobs") or 0)
        choices, completion_tokens, usage_override, timings = [], 0, None, None
        for index, one in enumerate(items):
            if isinstance(one, ScriptedError):
                return one.status, one.body()
            spec = {"content": one} if isinstance(one, str) else dict(one)
            content = str(spec.get("content", ""))
            logprobs = spec.get("logprobs")
            if isinstance(logprobs, list):
                logprobs = {"content": logprobs}
            if logprobs is None and want_logprobs:
                logprobs = _fake_logprobs(content, top_n)
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if spec.get("tool_calls"):
                message["tool_calls"] = _tool_calls(spec["tool_calls"], index)
            if spec.get("reasoning_content"):  # what vLLM's and llama.cpp's reasoning parsers add
                message["reasoning_content"] = str(spec["reasoning_content"])
            choices.append({
                "index": index,
                "message": message,
                "finish_reason": spec.get("finish_reason", "tool_calls" if spec.get("tool_calls") else "stop"),
                "logprobs": logprobs,
            })
            completion_tokens += estimate_tokens(content)
            if spec.get("usage") and usage_override is None:
                usage_override = spec["usage"]
            timings = timings or spec.get("timings")
        prompt = json.dumps(body.get("messages", []))
        prompt_tokens = estimate_tokens(prompt)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
        if usage_override:
            usage.update(usage_override)
        usage.setdefault("total_tokens", usage["prompt_tokens"] + usage["completion_tokens"])
        payload = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": choices,
            "usage": usage,
        }
        self._cache_figures(payload, prompt, elapsed, timings)
        return 200, payload


def main(argv: list[str] | None = None) -> int:
    """Run as a process (``python -m tests.fakes.openai_server --port P``): echoes the last user message
    until killed. Tests of server processes and harness subprocesses use it as a stand-in model server."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--model", default="scripted")
    parser.add_argument("--context-limit", type=int, default=8192)
    parser.add_argument("--reply", default=None, help="fixed reply instead of the echo")
    args = parser.parse_args(argv)

    def respond(body: dict) -> str:
        if args.reply is not None:
            return args.reply
        messages = body.get("messages") or [{}]
        return str(messages[-1].get("content", ""))

    srv = ScriptedServer(respond, model=args.model, context_limit=args.context_limit, host=args.host,
                         port=args.port)
    srv.start()
    print(f"serving {srv.base_url}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    srv.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
