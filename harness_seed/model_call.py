"""The harness's one way to the model: a chat call with the reference retry policy, and N-sampling.

Retry policy (settings ``[model]``, run by tenacity as in the reference agent): up to ``max_attempts``
attempts, waiting ``multiplier * 2**(k-1)`` seconds after the k-th failure, clamped to
``[retry_wait_min_sec, retry_wait_max_sec]`` (4 s, 4 s, 8 s, ... by default). The error's own ``retryable``
flag decides: a 5xx, a rate limit or an unreachable server is retried; a 4xx (bad request, auth, context
length) is not, since the same request would fail the same way. An output-length cut is not an error here
(the reply comes back with ``finish_reason == "length"`` and the loop decides). Every successful call adds
its tokens to the generator part of the cost ledger.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

import trials.harness_api as api

SCHEMA_FILE = Path(__file__).with_name("response_schema.json")

log = logging.getLogger(__name__)


@dataclass
class ModelReply:
    """One assistant reply. ``extra`` carries what wrappers add (e.g. ``extra["midharness"]``)."""

    text: str
    finish_reason: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    latency_sec: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    timings: api.CallTimings | None = None  # the call's prefill/decode/wait; the candidates of one call share it


# Context-overflow wordings of servers the platform client does not classify yet (TGI, vLLM 0.16, Bedrock
# through a proxy, plain "context length exceeded"): the seed treats them as overflows, as the reference does.
OVERFLOW_WORDINGS = ("`inputs` tokens + `max_new_tokens`", "model's context length",
                     "input is too long for requested model", "context length exceeded")


def as_overflow(exc: BaseException) -> BaseException:
    """``exc`` as a context-length error when a 4xx model error says so in one of the wordings above."""
    if not isinstance(exc, api.ModelError) or isinstance(exc, api.ContextLengthExceeded):
        return exc
    status = getattr(exc, "status_code", None)
    text = f"{exc} {getattr(exc, 'body', '')}".lower()
    if (status is None or 400 <= status < 500) and any(w.lower() in text for w in OVERFLOW_WORDINGS):
        return api.ContextLengthExceeded(str(exc), status_code=status, body=getattr(exc, "body", None))
    return exc


def is_retryable(exc: BaseException) -> bool:
    """Whether a failed call may succeed if sent again: the model error's own ``retryable`` flag."""
    return isinstance(exc, api.ModelError) and bool(getattr(exc, "retryable", False))


class ModelCaller:
    """Generator calls for one trial. ``settings`` is the ``[model]`` section; ``cost`` the trial's ledger."""

    def __init__(self, client: Any, settings: Any, cost: api.CostLedger,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
        self.client, self.s, self.cost, self._sleep = client, settings, cost, sleep
        self.request_log: list[dict[str, Any]] = []  # one entry per HTTP attempt, for the trajectory
        self.inference = api.InferenceSummary()  # the generator calls' time, for the trajectory's final metrics
        self.response_format: dict | None = None
        if getattr(settings, "json_schema", False):  # a grammar for small models (off in the reference)
            self.response_format = {"type": "json_schema", "json_schema": {
                "name": "terminus_response", "schema": json.loads(SCHEMA_FILE.read_text())}}

    def _seed(self) -> int | None:
        """The sampling seed to send: ``model.seed``, or none for its ``-1`` (TOML has no null)."""
        return self.s.seed if self.s.seed >= 0 else None

    def _wait(self) -> wait_exponential:
        return wait_exponential(multiplier=self.s.retry_multiplier, min=self.s.retry_wait_min_sec,
                                max=self.s.retry_wait_max_sec)

    def retry_wait(self, failed_attempt: int) -> float:
        """Seconds waited after the ``failed_attempt``-th (1-based) failure (tenacity's exponential wait)."""
        return self._wait()(_AttemptNumber(failed_attempt))

    def _log_retry(self, state: Any) -> None:
        exc = state.outcome.exception()
        log.warning("model call failed (%s, attempt %d/%d); retrying in %.1f s", type(exc).__name__,
                    state.attempt_number, self.s.max_attempts, state.next_action.sleep)

    async def _with_retries(self, kind: str, fn: Callable[[], Awaitable[Any]]) -> Any:
        retrying = AsyncRetrying(stop=stop_after_attempt(self.s.max_attempts), wait=self._wait(),
                                 retry=retry_if_exception(is_retryable), sleep=self._sleep,
                                 before_sleep=self._log_retry, reraise=True)
        async for attempt in retrying:
            with attempt:
                started = time.monotonic()
                entry: dict[str, Any] = {"kind": kind, "attempt": attempt.retry_state.attempt_number}
                try:
                    result = await fn()
                except api.ModelError as exc:
                    self.request_log.append({**entry, "sec": time.monotonic() - started,
                                             "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
                    overflow = as_overflow(exc)
                    if overflow is not exc:
                        raise overflow from exc
                    raise
                self.request_log.append({**entry, "sec": time.monotonic() - started, "error": None})
                return result
        raise AssertionError("unreachable: tenacity re-raises the last failure")

    async def call(self, messages: list[dict], free_text: bool = False) -> ModelReply:
        """One chat completion of ``messages`` (with retries). Adds its usage to ``cost.generator`` and its
        output tokens to ``cost.parallel_output_tokens`` (a single call is its own critical path).
        ``free_text`` lifts the ``json_schema`` constraint (summaries are prose)."""
        result = await self._with_retries("call", lambda: self.client.chat(
            messages, temperature=self.s.temperature, max_tokens=self.s.max_tokens,
            seed=self._seed(),
            response_format=None if free_text else self.response_format))
        choice = result.choices[0]
        self.cost.generator.add(result.input_tokens, result.output_tokens)
        self.cost.parallel_output_tokens += result.output_tokens
        self._count(result)
        return ModelReply(text=choice.text, finish_reason=choice.finish_reason, input_tokens=result.input_tokens,
                          output_tokens=result.output_tokens, latency_sec=result.latency_sec,
                          timings=result.timings,
                          extra={"requests": result.requests, "usage_estimated": result.usage_estimated,
                                 **({"reasoning": choice.reasoning} if choice.reasoning else {})})

    def _count(self, result: Any) -> None:
        timings = getattr(result, "timings", None)  # a test double's result may carry none
        if timings is not None:
            self.inference.add(timings)

    async def sample(self, messages: list[dict], n: int, temperature: float | None) -> list[ModelReply]:
        """``n`` replies to the same ``messages`` in one request (the client fills missing choices with
        parallel single requests itself). Adds the usage to ``cost.generator``; parallel output tokens are
        left to the caller, which knows how the branches are combined.

        The server reports one output count for all choices; each reply gets a share proportional to its
        text length (``extra["output_tokens_estimated"]``), so the shares add up to the reported total.
        """
        result = await self._with_retries("sample", lambda: self.client.chat(
            messages, n=n, temperature=temperature, max_tokens=self.s.max_tokens,
            seed=self._seed(),
            response_format=self.response_format))
        self.cost.generator.add(result.input_tokens, result.output_tokens, calls=result.requests)
        self._count(result)
        lengths = [max(len(c.text), 1) for c in result.choices]
        shares = [result.output_tokens * length // sum(lengths) for length in lengths]
        if shares:
            shares[-1] += result.output_tokens - sum(shares)
        return [
            ModelReply(text=c.text, finish_reason=c.finish_reason, input_tokens=result.input_tokens,
                       output_tokens=share, latency_sec=result.latency_sec, timings=result.timings,
                       extra={"choice_index": i, "output_tokens_estimated": True, "requests": result.requests})
            for i, (c, share) in enumerate(zip(result.choices, shares))
        ]


@dataclass
class _AttemptNumber:
    """The one field of tenacity's retry state that its exponential wait reads."""

    attempt_number: int
