"""The one model client every harness uses: an OpenAI-compatible chat endpoint (vLLM, llama.cpp, hosted).

:class:`ModelClient` posts to ``/chat/completions`` with httpx, without retries (retry policy belongs to the
harness, which can see episodes and budgets), and turns the servers' different error dialects into one small
exception family under :class:`ModelError`. It does not use the ``openai`` SDK: a harness makes one kind of
request and reads a handful of fields, while importing the SDK cost every trial's agent process more CPU than the
rest of its start together (``benchmarks/start_cost.py``; issue 42). The replies stay the server's JSON, so
fields the API does not define (llama.cpp's ``timings``) are read as they came. It also asks the server what the
OpenAI API does not say: the context limit (vLLM's ``max_model_len``, llama.cpp's ``/props``) and token counts
(``/tokenize``), falling back to estimates when a server has no such route.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import time
from collections import OrderedDict
from typing import Any, Self
from urllib.parse import urlsplit, urlunsplit

import httpx
from pydantic import BaseModel, Field, ValidationError

from ..environments.channel import channel_transport
from ..errors import ModelServerUnreachable
from .spec import EndpointSpec
from .timings import CallTimings, cached_tokens, call_timings

log = logging.getLogger(__name__)

DEFAULT_CONTEXT_LIMIT = 8192
CONNECT_TIMEOUT_SEC = 5.0
SIDE_TIMEOUT_SEC = 10.0  # /health, /tokenize, /props: small requests that should answer at once

# Arguments chat.completions.create() takes by name; any other sampling default (top_k, min_p,
# repetition_penalty...) is a server extension and goes into extra_body.
_OPENAI_SAMPLING_ARGS = {
    "temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "seed", "presence_penalty",
    "frequency_penalty", "logit_bias", "n", "logprobs", "top_logprobs", "response_format", "user",
}


# -- results ------------------------------------------------------------------------------------


class TokenLogprob(BaseModel):
    """One generated token with its log-probability and the server's top alternatives."""

    token: str
    logprob: float
    top_logprobs: dict[str, float] = Field(default_factory=dict)


class Choice(BaseModel):
    text: str
    finish_reason: str | None = None
    logprobs: list[TokenLogprob] | None = None
    reasoning: str | None = None  # a reasoning model's thinking, split out by the server (vLLM, llama.cpp)


class ChatResult(BaseModel):
    """One chat call (possibly several HTTP requests when ``n`` had to be filled)."""

    choices: list[Choice]
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int | None = None
    latency_sec: float = 0.0
    model: str = ""
    requests: int = Field(default=1, description="HTTP requests made (more than 1 when n was filled)")
    usage_estimated: bool = Field(default=False, description="the server sent no usage; counts are len//4")
    timings: CallTimings | None = Field(default=None, description="where the call's time went (endpoints/timings)")

    @property
    def text(self) -> str:
        """The first choice's text."""
        return self.choices[0].text if self.choices else ""


# -- errors -------------------------------------------------------------------------------------


class ModelError(Exception):
    """A model call failed. ``retryable`` says whether the same request may succeed later."""

    retryable = False

    def __init__(self, message: str, *, status_code: int | None = None, body: Any = None):
        super().__init__(message)
        self.message, self.status_code, self.body = message, status_code, body


class ContextLengthExceeded(ModelError):
    """The prompt (plus max_tokens) does not fit; ``limit``/``requested`` are parsed when the server says."""

    def __init__(self, message: str, *, limit: int | None = None, requested: int | None = None, **kw: Any):
        super().__init__(message, **kw)
        self.limit, self.requested = limit, requested


class AuthError(ModelError):
    """401/403: the key is missing or wrong (never retry)."""


class RateLimited(ModelError):
    retryable = True


class BadResponse(ModelError):
    """The server answered, but with an error or something that is not a usable completion."""

    def __init__(self, message: str, **kw: Any):
        super().__init__(message, **kw)
        self.retryable = self.status_code is not None and self.status_code >= 500


class ServerUnreachable(ModelError, ModelServerUnreachable):
    """Connection refused, timed out, or the server says it is unavailable (the runner maps this to ⊥)."""

    retryable = True

    def __init__(self, message: str, **kw: Any):
        ModelError.__init__(self, message, **kw)
        self.cause = "model_unreachable"
        self.log_path = None


_CONTEXT_PATTERNS = [
    re.compile(r"maximum context length is (\d+)", re.IGNORECASE),  # vLLM, OpenAI
    re.compile(r"maximum model length of (\d+)", re.IGNORECASE),  # vLLM: "... is longer than the maximum model length"
    re.compile(r"exceeds the available context size(?:\D+(\d+))?", re.IGNORECASE),  # llama.cpp
    re.compile(r"context_length_exceeded", re.IGNORECASE),  # OpenAI's code
    re.compile(r"exceed_context_size_error", re.IGNORECASE),  # llama.cpp's type
    re.compile(r"prompt is too long", re.IGNORECASE),  # Anthropic-style servers
    re.compile(r"context window", re.IGNORECASE),
    re.compile(r"`inputs` tokens \+ `max_new_tokens` must be <= (\d+)", re.IGNORECASE),  # TGI
    re.compile(r"model's context length(?: of (\d+))?", re.IGNORECASE),  # vLLM 0.16 and proxies
    re.compile(r"input is too long for requested model", re.IGNORECASE),  # Bedrock
    re.compile(r"context length exceeded", re.IGNORECASE),
]
_REQUESTED_PATTERNS = [
    re.compile(r"you requested (\d+) tokens", re.IGNORECASE),
    re.compile(r"resulted in (\d+) tokens", re.IGNORECASE),
    re.compile(r"\(length (\d+)\)", re.IGNORECASE),
    re.compile(r"requested (\d+)", re.IGNORECASE),
    re.compile(r"Given: (\d+) `inputs` tokens", re.IGNORECASE),  # TGI
]


def _error_text(body: Any, fallback: str) -> str:
    """All text of an error body, so every dialect's wording and codes can be matched."""
    if body is None:
        return fallback
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]
    try:
        return fallback + " " + json.dumps(body)
    except (TypeError, ValueError):
        return f"{fallback} {body}"


def _context_error(text: str, body: Any) -> tuple[int | None, int | None] | None:
    """(limit, requested) when ``text`` is a context-length complaint in any known dialect, else None."""
    matched, limit = False, None
    for pat in _CONTEXT_PATTERNS:
        m = pat.search(text)
        if m:
            matched = True
            if m.groups() and m.group(1) and limit is None:
                limit = int(m.group(1))
    if not matched:
        return None
    requested = None
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):  # llama.cpp sends the numbers as fields
        limit = limit or _int(err.get("n_ctx"))
        requested = _int(err.get("n_prompt_tokens"))
    if requested is None:
        for pat in _REQUESTED_PATTERNS:
            m = pat.search(text)
            if m:
                requested = int(m.group(1))
                break
    return limit, requested


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def map_status_error(status: int, body: Any, message: str) -> ModelError:
    """Translate a server's error answer (``status``, its JSON ``body`` or text) into this module's family; the
    message keeps the server's words."""
    if isinstance(body, dict) and "error" not in body:
        body = {"error": body}  # some servers send the inner object alone
    text = _error_text(body, message)
    ctx = _context_error(text, body)
    if ctx is not None:
        return ContextLengthExceeded(message, limit=ctx[0], requested=ctx[1], status_code=status, body=body)
    if status in (401, 403):
        return AuthError(f"model server refused the credentials ({status}): {message}", status_code=status,
                         body=body)
    if status == 429:
        return RateLimited(message, status_code=status, body=body)
    if status in (502, 503, 504):
        return ServerUnreachable(f"model server unavailable ({status}): {message}", status_code=status, body=body)
    return BadResponse(message, status_code=status, body=body)


def map_transport_error(exc: httpx.HTTPError) -> ModelError:
    """Translate an httpx failure to get any answer (timeout, refused or broken connection) into this family."""
    said = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.TimeoutException):
        return ServerUnreachable(f"model server timed out: {said}")
    if isinstance(exc, httpx.TransportError):
        return ServerUnreachable(f"model server unreachable: {said}")
    return BadResponse(f"{type(exc).__name__}: {said}")


def _reply_json(resp: httpx.Response) -> Any:
    """The reply's JSON, or its text (at most 2,000 characters) when it is not JSON."""
    try:
        return resp.json()
    except ValueError:
        return resp.text[:2000]


# -- the client ---------------------------------------------------------------------------------


def unreachable_hint(base_url: str) -> str:
    """Which URL was tried and how to start a server there; ends every 'unreachable' message."""
    return (f"tried {base_url.rstrip('/')}/chat/completions; start a server there (the bundled CPU model: "
            "`rise serve bundled`, or run `rise eval` without --base-url to start it), or pass the right --base-url")


def server_root(base_url: str) -> str:
    """``http://h:p/v1`` → ``http://h:p``: where llama.cpp and vLLM keep /health, /tokenize, /props."""
    parts = urlsplit(base_url.rstrip("/"))
    path = parts.path
    path = path.removesuffix("/v1")
    return urlunsplit((parts.scheme, parts.netloc, path, "", "")).rstrip("/")


def channel_socket(base_url: str) -> str | None:
    """The trial channel's socket when ``base_url`` names a channel host (``http://model-<i>.rise/...``) and
    ``RISE_CHANNEL`` says where the socket is; None for a direct endpoint."""
    host = urlsplit(base_url).hostname or ""
    socket_path = os.environ.get("RISE_CHANNEL")
    return socket_path if socket_path and host.endswith(".rise") else None


_N_LIMIT = re.compile(r"""['"`]n['"`].*(?:<=|at most|maximum(?: is| of)?)\s*(\d+)""", re.IGNORECASE | re.DOTALL)


def n_limit_of(err: ModelError) -> int | None:
    """The largest ``n`` a server said it accepts, from its refusal of a larger one, else None. llama-server
    answers 400 "Field 'n': Value must be between 1 <= value <= 2" when ``n`` exceeds its slots."""
    if err.status_code != 400:
        return None
    found = _N_LIMIT.search(str(err))
    return int(found.group(1)) if found and int(found.group(1)) >= 1 else None


class ModelClient:
    """Async chat client for one :class:`EndpointSpec`. Reuse one per process; close with :meth:`aclose`."""

    def __init__(self, spec: EndpointSpec):
        self.spec = spec
        self.supports_n: bool | None = spec.supports_n
        self.n_limit: int | None = None  # the most choices one request may ask for (llama-server: its slots)
        self.root_url = server_root(spec.base_url)
        # A confined harness reaches its endpoints only through the trial channel's socket (trials/channel.py).
        via = channel_socket(spec.base_url)
        self._chat_url = f"{spec.base_url.rstrip('/')}/chat/completions"
        self._chat_timeout = httpx.Timeout(spec.timeout_sec, connect=min(CONNECT_TIMEOUT_SEC, spec.timeout_sec))
        # One connection pool for the chat calls and the side requests; n parallel requests fit its 100.
        self._http = httpx.AsyncClient(timeout=min(SIDE_TIMEOUT_SEC, spec.timeout_sec),
                                       headers=self._auth_headers(), follow_redirects=True,
                                       transport=channel_transport(via) if via else None)
        self._context_limit: int | None = spec.context_limit
        self._tokenize_ok: bool | None = None  # None: not tried yet
        self._kind: str | None = None
        self._messages_via: str | None = None  # how count_tokens(messages) works here; None: not probed
        self._token_cache: OrderedDict[str, int] = OrderedDict()

    def _auth_headers(self) -> dict[str, str]:
        key = self.spec.api_key()
        return {"Authorization": f"Bearer {key}"} if key and key != "EMPTY" else {}

    def __repr__(self) -> str:  # never the key
        return f"ModelClient(base_url={self.spec.base_url!r}, model={self.spec.model!r})"

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- chat -----------------------------------------------------------------------------------

    def _request_args(self, messages: list[dict], *, n: int, model: str | None,
                      explicit: dict[str, Any], extra_body: dict | None) -> dict[str, Any]:
        """spec.sampling defaults under the explicit arguments; server extensions into extra_body."""
        args: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in self.spec.sampling.items():
            (args if key in _OPENAI_SAMPLING_ARGS else extra)[key] = value
        args.update({k: v for k, v in explicit.items() if v is not None and v is not False})
        cap = self.spec.max_output_tokens
        if cap is not None:  # the endpoint's ceiling wins over any request's own cap, and applies without one
            args["max_tokens"] = min(args.get("max_tokens") or cap, cap)
        extra.update(extra_body or {})
        args.update(model=model or self.spec.model, messages=messages)
        if n > 1:
            args["n"] = n
        else:
            args.pop("n", None)
        if extra:
            args["extra_body"] = extra
        return args

    async def _create(self, args: dict[str, Any]) -> dict[str, Any]:
        """One POST to /chat/completions; the reply's JSON object. ``extra_body`` goes into the body."""
        body = {k: v for k, v in args.items() if k != "extra_body"}
        body.update(args.get("extra_body") or {})
        try:
            resp = await self._http.post(self._chat_url, json=body, timeout=self._chat_timeout)
        except httpx.HTTPError as exc:
            raise self._located(map_transport_error(exc)) from exc
        reply = _reply_json(resp)
        if resp.status_code >= 400:
            raise self._located(map_status_error(resp.status_code, reply, f"Error code: {resp.status_code} - "
                                                 f"{reply}"))
        if not isinstance(reply, dict):
            raise BadResponse(f"unparseable response from model server ({self._chat_url}, status "
                              f"{resp.status_code}): {str(reply)[:300]!r}", status_code=resp.status_code)
        if not isinstance(reply.get("choices"), list) or not reply["choices"]:
            raise BadResponse(f"model server returned no choices (model {args.get('model')!r})",
                              status_code=resp.status_code, body=reply)
        return reply

    def _located(self, err: ModelError) -> ModelError:
        """An unreachable server's error says where, and how to get a server there."""
        if isinstance(err, ServerUnreachable):
            return ServerUnreachable(f"{err} — {unreachable_hint(self.spec.base_url)}",
                                     status_code=err.status_code, body=err.body)
        return err

    async def chat(self, messages: list[dict], *, n: int = 1, temperature: float | None = None,
                   max_tokens: int | None = None, response_format: dict | None = None, logprobs: bool = False,
                   top_logprobs: int | None = None, extra_body: dict | None = None, model: str | None = None,
                   stop: list[str] | str | None = None, seed: int | None = None) -> ChatResult:
        """One chat completion with ``n`` choices; raises a :class:`ModelError` subclass on failure.

        When the server returns fewer than ``n`` choices (llama-cpp-python ignores ``n``), the rest are
        filled by parallel single requests, and later calls go straight to single requests.
        """
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        explicit = {"temperature": temperature, "max_tokens": max_tokens, "response_format": response_format,
                    "logprobs": logprobs, "top_logprobs": top_logprobs, "stop": stop, "seed": seed}
        if top_logprobs:
            explicit["logprobs"] = True
        started = time.monotonic()
        responses: list[dict[str, Any]] = []

        def request(k: int) -> dict[str, Any]:
            return self._request_args(messages, n=k, model=model, explicit=explicit, extra_body=extra_body)

        if n == 1 or self.supports_n is not False:
            asked = min(n, self.n_limit or n)
            try:
                first = await self._create(request(asked))
            except BadResponse as err:
                limit = n_limit_of(err) if asked > 1 else None
                if limit is None or limit >= asked:
                    raise
                log.info("%s takes at most n = %d per request; asking in parts from now on",
                         self.spec.base_url, limit)
                self.n_limit = asked = limit
                first = await self._create(request(asked))
            responses.append(first)
            missing = n - len(first["choices"])
            if asked > 1:
                if len(first["choices"]) < asked:
                    if self.supports_n is not False:
                        log.info("%s returned %d of %d choices; filling with single requests from now on",
                                 self.spec.base_url, len(first["choices"]), asked)
                    self.supports_n = False
                elif self.supports_n is None:
                    self.supports_n = True
        else:
            missing = n
        if missing > 0:  # the rest in parallel: parts of the server's n limit, or single requests
            part = (self.n_limit or missing) if self.supports_n else 1
            sizes = [min(part, missing - i) for i in range(0, missing, part)]
            try:
                async with asyncio.TaskGroup() as tg:
                    tasks = [tg.create_task(self._create(request(k))) for k in sizes]
            except ExceptionGroup as group:  # callers catch ModelError, not groups
                raise group.exceptions[0] from group
            responses.extend(t.result() for t in tasks)
        latency = time.monotonic() - started
        try:
            parsed = [[_choice(c) for c in r["choices"]] for r in responses]
        except (TypeError, ValueError, LookupError, AttributeError, ValidationError) as exc:
            raise BadResponse(f"malformed completion from model server ({self._chat_url}): "
                              f"{type(exc).__name__}: {str(exc)[:300]}") from exc
        recount = [await self._recount_output(r, c) for r, c in zip(responses, parsed, strict=True)]
        return self._result(responses, parsed, messages, n, latency, model, recount)

    async def _recount_output(self, resp: dict[str, Any], choices: list[Choice]) -> int | None:
        """llama.cpp's usage for an ``n>1`` answer counts one choice only (its reply carries ``timings``);
        count every choice's tokens instead, so the cost ledger is right."""
        if len(choices) < 2 or "timings" not in resp:
            return None
        return sum([await self.count_tokens(c.text) for c in choices])

    def _result(self, responses: list[dict[str, Any]], parsed: list[list[Choice]], messages: list[dict], n: int,
                latency: float, model: str | None, recount: list[int | None]) -> ChatResult:
        choices: list[Choice] = []
        input_tokens = output_tokens = 0
        cached: int | None = None
        estimated = False
        for resp, mine, corrected in zip(responses, parsed, recount, strict=True):
            choices.extend(mine)
            usage = resp.get("usage")
            prompt_tokens = _int(usage.get("prompt_tokens")) if isinstance(usage, dict) else None
            if isinstance(usage, dict) and prompt_tokens is not None:
                input_tokens += prompt_tokens
                output_tokens += corrected if corrected is not None else (_int(usage.get("completion_tokens")) or 0)
                hit = cached_tokens(usage)
                if hit is not None:
                    cached = (cached or 0) + hit
            else:
                estimated = True
                input_tokens += len(json.dumps(messages)) // 4
                output_tokens += sum(len(c.text) // 4 for c in mine)
        served = responses[0].get("model")
        return ChatResult(choices=choices[:n], input_tokens=input_tokens, output_tokens=output_tokens,
                          cached_input_tokens=cached, latency_sec=latency,
                          model=(served if isinstance(served, str) and served else None) or model or self.spec.model,
                          requests=len(responses), usage_estimated=estimated,
                          timings=call_timings(responses, latency))

    # -- what the OpenAI API does not say ---------------------------------------------------------

    async def _get_json(self, url: str) -> Any | None:
        try:
            resp = await self._http.get(url)
        except httpx.HTTPError as exc:
            log.debug("GET %s failed: %s", url, exc)
            return None
        if resp.status_code != 200:
            return None
        try:
            return resp.json()
        except ValueError:
            return None

    async def context_limit(self) -> int:
        """Tokens the server accepts: the spec's value, else the server's, else 8192 (with a warning)."""
        if self._context_limit:
            return self._context_limit
        limit = None
        models = await self._get_json(f"{self.spec.base_url.rstrip('/')}/models")
        if isinstance(models, dict) and isinstance(models.get("data"), list):
            cards = [c for c in models["data"] if isinstance(c, dict)]
            mine = [c for c in cards if c.get("id") == self.spec.model] or cards
            for card in mine:
                limit = _int(card.get("max_model_len"))  # vLLM
                if limit:
                    break
        if not limit:
            props = await self._get_json(f"{self.root_url}/props")  # llama.cpp
            if isinstance(props, dict):
                limit = _int((props.get("default_generation_settings") or {}).get("n_ctx"))
        if not limit:
            slots = await self._get_json(f"{self.root_url}/slots")  # older llama.cpp
            if isinstance(slots, list) and slots and isinstance(slots[0], dict):
                limit = _int(slots[0].get("n_ctx"))
        if not limit:
            log.warning("%s does not say its context limit; assuming %d tokens (set context_limit in the "
                        "endpoint spec)", self.spec.base_url, DEFAULT_CONTEXT_LIMIT)
            limit = DEFAULT_CONTEXT_LIMIT
        self._context_limit = limit
        return limit

    async def count_tokens(self, content: str | list[dict]) -> int:
        """Tokens in a text or a message list, from the server's ``/tokenize`` when it has one.

        Without one (hosted APIs), ``len(text) // 4``. Results are cached per text.
        """
        if isinstance(content, str):
            key, text, messages = content, content, None
        else:
            messages = content
            text = "\n".join(f"<|{m.get('role', '')}|>\n{_message_text(m)}" for m in messages)
            key = "\0messages\0" + json.dumps(messages, sort_keys=True, default=str)
        if key in self._token_cache:
            self._token_cache.move_to_end(key)
            return self._token_cache[key]
        count = None
        if self._tokenize_ok is not False:
            if messages is not None:
                count = await self._count_messages(messages)
            if count is None:
                count = await self._tokenize({"model": self.spec.model, "prompt": text, "content": text})
                if messages is not None and count is not None:
                    count += 4 * len(messages)  # chat-template markers per message
                if self._tokenize_ok is None:
                    self._tokenize_ok = count is not None
                    if count is None:
                        log.info("%s has no /tokenize; counting tokens as len//4", self.root_url)
        if count is None:
            count = len(text) // 4 + (4 * len(messages) if messages else 0)
        self._token_cache[key] = count
        if len(self._token_cache) > 512:
            self._token_cache.popitem(last=False)
        return count

    async def _count_messages(self, messages: list[dict]) -> int | None:
        """Exact counts with the chat template: vLLM tokenizes messages; llama.cpp applies the template first."""
        if self._messages_via in (None, "messages"):
            count = await self._tokenize({"model": self.spec.model, "messages": messages})
            if count:  # llama.cpp answers 0 tokens for a body without "content"
                self._messages_via = "messages"
                return count
        if self._messages_via in (None, "apply-template"):
            prompt = None
            try:
                resp = await self._http.post(f"{self.root_url}/apply-template", json={"messages": messages})
                if resp.status_code == 200:
                    prompt = resp.json().get("prompt")
            except (httpx.HTTPError, ValueError, AttributeError):
                prompt = None
            if isinstance(prompt, str):
                count = await self._tokenize({"content": prompt, "prompt": prompt})
                if count is not None:
                    self._messages_via = "apply-template"
                    return count
        self._messages_via = "text"
        return None

    async def _tokenize(self, body: dict) -> int | None:
        try:
            resp = await self._http.post(f"{self.root_url}/tokenize", json=body)
        except httpx.HTTPError as exc:
            log.debug("POST /tokenize failed: %s", exc)
            return None
        if resp.status_code != 200:
            return None
        try:
            data = resp.json()
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        if isinstance(data.get("count"), int):
            return data["count"]
        if isinstance(data.get("tokens"), list):
            return len(data["tokens"])
        return None

    async def server_kind(self) -> str:
        """``llamacpp``, ``vllm`` or ``other`` (hosted APIs), from routes only those servers have; cached."""
        if self._kind is None:
            props = await self._get_json(f"{self.root_url}/props")
            if isinstance(props, dict) and "default_generation_settings" in props:
                self._kind = "llamacpp"
            else:
                models = await self._get_json(f"{self.spec.base_url.rstrip('/')}/models")
                cards = models.get("data") if isinstance(models, dict) else None
                vllm = isinstance(cards, list) and any(
                    isinstance(c, dict) and ("max_model_len" in c or c.get("owned_by") == "vllm") for c in cards)
                self._kind = "vllm" if vllm or self.spec.supports_choice else "other"
        return self._kind

    async def choice_args(self, options: list[str]) -> dict[str, Any]:
        """Keyword arguments for :meth:`chat` that make the answer exactly one of ``options``.

        vLLM: ``structured_outputs.choice`` (the old ``guided_choice`` is silently ignored); llama.cpp: a
        GBNF grammar; other servers: nothing (the caller must parse the free answer).
        """
        if not options:
            raise ValueError("choice_args needs at least one option")
        kind = "vllm" if self.spec.supports_choice else await self.server_kind()
        if kind == "vllm":
            return {"extra_body": {"structured_outputs": {"choice": list(options)}}}
        if kind == "llamacpp":
            alternatives = " | ".join(_gbnf_literal(o) for o in options)
            return {"extra_body": {"grammar": f"root ::= {alternatives}"}}
        log.debug("%s cannot constrain choices; the answer is free text", self.spec.base_url)
        return {}

    async def health(self) -> bool:
        """True when the server answers ``/health`` (or, for hosted APIs without one, ``/v1/models``)."""
        try:
            resp = await self._http.get(f"{self.root_url}/health")
            if resp.status_code == 200:
                return True
            if resp.status_code != 404:
                return False
            resp = await self._http.get(f"{self.spec.base_url.rstrip('/')}/models")
            return resp.status_code == 200
        except httpx.HTTPError:
            return False


def _gbnf_literal(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _message_text(message: dict) -> str:
    content = message.get("content", "")
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content or "")


def _choice(ch: Any) -> Choice:
    """One choice of a reply's JSON; a field of the wrong shape raises (the caller names it a bad response)."""
    message = ch.get("message") or {}
    text = _message_text(message) if isinstance(message, dict) else ""
    lps = None
    raw = ch.get("logprobs")
    if isinstance(raw, dict) and raw.get("content") is not None:
        lps = [
            TokenLogprob(token=t["token"], logprob=t["logprob"],
                         top_logprobs={a["token"]: a["logprob"] for a in (t.get("top_logprobs") or [])})
            for t in raw["content"]
        ]
    reasoning = None
    if isinstance(message, dict):  # vLLM names it reasoning_content (older) or reasoning; llama.cpp reasoning_content
        reasoning = message.get("reasoning_content") or message.get("reasoning")
    return Choice(text=text, finish_reason=ch.get("finish_reason"), logprobs=lps,
                  reasoning=str(reasoning) if reasoning else None)
