"""Where a model call's time went, as the server and the client saw it; and a trial's sum of its calls.

A model call's wall time is prefill (evaluating the prompt tokens that were not in the server's prompt cache),
decode (generating the reply) and everything else: waiting for a free slot, the HTTP round trip, the server's
own bookkeeping. Servers say different amounts of this:

- llama.cpp's ``llama-server`` answers every chat completion with a ``timings`` object: ``prompt_n`` tokens
  prefilled in ``prompt_ms``, ``cache_n`` tokens reused from the slot's cache, ``predicted_n`` tokens decoded in
  ``predicted_ms``. Waiting is then the wall time minus prefill and decode.
- vLLM says only which prompt tokens came from its prefix cache (``usage.prompt_tokens_details.cached_tokens``,
  when it runs with ``--enable-prompt-tokens-details``); its call time stays one unsplit figure.
- Any other server: the client's wall time of the call, and the usage counts.

:class:`CallTimings` is one call (what goes into its span and its trajectory step); :class:`InferenceSummary`
is a trial's sum of them (``result.json``'s ``inference``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, computed_field, field_serializer

Source = Literal["llamacpp", "vllm", "client"]


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _add(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else a + b


def _rate(tokens: float | None, ms: float | None) -> float | None:
    return round(tokens * 1000.0 / ms, 2) if tokens and ms else None


def _ratio(cached: float | None, evaluated: float | None) -> float | None:
    if cached is None or evaluated is None or cached + evaluated <= 0:
        return None
    return round(cached / (cached + evaluated), 4)


class CallTimings(BaseModel):
    """One model call's time and tokens. ``None``: the server did not say. A call answered by several HTTP
    requests (``n`` filled in parallel parts) sums their server figures; they overlap in time, so its waiting
    is then a lower bound (never below 0). llama-server's ``timings`` (and usage) of one request with ``n > 1``
    describe its first choice only (seen on build 11434: two choices of 12 tokens, ``predicted_n`` 12); the
    other choices ran alongside in other slots, so ``predicted_n`` counts that one and the wall time all."""

    source: Source = Field(description="who split the time: llamacpp (its timings), vllm (cache counts "
                                       "only) or client (wall time only)")
    wall_ms: float = Field(description="the client's wall time of the whole call")
    requests: int = 1
    choices: int = 1
    prompt_tokens: int | None = Field(default=None, description="the whole prompt (usage.prompt_tokens)")
    prompt_n: int | None = Field(default=None, description="prompt tokens the server evaluated (prefill)")
    cache_n: int | None = Field(default=None, description="prompt tokens reused from the server's cache")
    prompt_ms: float | None = Field(default=None, description="prefill time, server-measured")
    predicted_n: int | None = Field(default=None, description="tokens generated")
    predicted_ms: float | None = Field(default=None, description="decode time, server-measured")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def queue_ms(self) -> float | None:
        """Wall time neither prefill nor decode: waiting for a slot, HTTP, the server's own work."""
        if self.prompt_ms is None or self.predicted_ms is None:
            return None
        return round(max(0.0, self.wall_ms - self.prompt_ms - self.predicted_ms), 3)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cache_hit_ratio(self) -> float | None:
        """cache_n / (cache_n + prompt_n): the share of the prompt the server did not evaluate again."""
        return _ratio(self.cache_n, self.prompt_n)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def prefill_tok_s(self) -> float | None:
        return _rate(self.prompt_n, self.prompt_ms)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def decode_tok_s(self) -> float | None:
        return _rate(self.predicted_n, self.predicted_ms)

    def span_attributes(self, prefix: str = "rise.inference.") -> dict[str, Any]:
        """The figures the server or client gave, as flat span attributes (unknown ones left out)."""
        return {prefix + k: v for k, v in self.model_dump().items() if v is not None}


def cached_tokens(usage: Any) -> int | None:
    """The prompt tokens a reply's ``usage`` says came from the cache (vLLM, OpenAI), else None."""
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return cached if isinstance(cached, int) else None


def call_timings(responses: list[dict[str, Any]], wall_sec: float) -> CallTimings:
    """The timings of one call from its replies (the servers' JSON objects, llama.cpp's ``timings`` among them)."""
    source: Source = "client"
    out = CallTimings(source="client", wall_ms=round(wall_sec * 1000.0, 3), requests=len(responses),
                      choices=sum(len(r.get("choices") or []) for r in responses))
    fields: dict[str, float | None] = dict.fromkeys(
        ("prompt_tokens", "prompt_n", "cache_n", "prompt_ms", "predicted_n", "predicted_ms"))
    for resp in responses:
        usage = resp.get("usage")
        prompt_tokens = _num(usage.get("prompt_tokens")) if isinstance(usage, dict) else None
        cached = cached_tokens(usage)
        server = resp.get("timings")
        part: dict[str, float | None]
        if isinstance(server, dict) and _num(server.get("prompt_ms")) is not None:
            source = "llamacpp"
            prompt_n = _num(server.get("prompt_n"))
            cache_n = _num(server.get("cache_n"))
            if cache_n is None and cached is not None:
                cache_n = float(cached)
            part = {"prompt_n": prompt_n, "cache_n": cache_n, "prompt_ms": _num(server.get("prompt_ms")),
                    "predicted_n": _num(server.get("predicted_n")),
                    "predicted_ms": _num(server.get("predicted_ms"))}
        elif cached is not None and prompt_tokens is not None:
            source = "vllm" if source == "client" else source
            part = {"prompt_n": prompt_tokens - cached, "cache_n": float(cached)}
        else:
            part = {}
        part["prompt_tokens"] = prompt_tokens
        for key, value in part.items():
            fields[key] = _add(fields[key], value)
    ints = {"prompt_tokens", "prompt_n", "cache_n", "predicted_n"}
    return out.model_copy(update={"source": source, **{
        k: (int(v) if k in ints else round(v, 3)) for k, v in fields.items() if v is not None}})


class InferenceSummary(BaseModel):
    """A trial's model calls summed (``result.json`` ``inference``): where their time went, the prompt cache's
    hit ratio and the speeds. Calls that run at once (Mid-Harness verifier calls) each count their own wall
    time, so ``wall_sec`` may exceed the agent's time."""

    calls: int = 0
    wall_sec: float = Field(default=0.0, description="summed wall time of the calls")
    prefill_sec: float = 0.0
    decode_sec: float = 0.0
    waiting_sec: float = Field(default=0.0, description="wall time of split calls that was neither prefill "
                               "nor decode: a slot's queue, HTTP, the server's own work")
    unsplit_sec: float = Field(default=0.0, description="wall time of calls whose server gave no split")
    split_calls: int = Field(default=0, description="calls with a server-measured prefill/decode split")
    prompt_tokens: int = 0
    prompt_n: int = Field(default=0, description="prompt tokens evaluated (prefilled)")
    cache_n: int = Field(default=0, description="prompt tokens reused from the cache")
    cache_known: bool = Field(default=False, description="some call said how many tokens came from the cache")
    predicted_n: int = 0
    split_prompt_n: int = Field(default=0, description="prefilled tokens of split calls (for prefill tok/s)")
    split_predicted_n: int = Field(default=0, description="decoded tokens of split calls (for decode tok/s)")

    @field_serializer("wall_sec", "prefill_sec", "decode_sec", "waiting_sec", "unsplit_sec")
    def _seconds(self, value: float) -> float:
        return round(value, 3)

    def add(self, t: CallTimings) -> InferenceSummary:
        """Count one call (in place); returns the summary."""
        self.calls += 1
        self.wall_sec += t.wall_ms / 1000.0
        self.prompt_tokens += t.prompt_tokens or 0
        self.prompt_n += t.prompt_n or 0
        self.cache_n += t.cache_n or 0
        self.cache_known = self.cache_known or t.cache_n is not None
        self.predicted_n += t.predicted_n or 0
        if t.prompt_ms is not None and t.predicted_ms is not None:
            self.split_calls += 1
            self.prefill_sec += t.prompt_ms / 1000.0
            self.decode_sec += t.predicted_ms / 1000.0
            self.waiting_sec += (t.queue_ms or 0.0) / 1000.0
            self.split_prompt_n += t.prompt_n or 0
            self.split_predicted_n += t.predicted_n or 0
        else:
            self.unsplit_sec += t.wall_ms / 1000.0
        return self

    def merge(self, other: InferenceSummary) -> InferenceSummary:
        """Add another summary into this one (a grid's sum of its trials); returns this one."""
        for name in type(self).model_fields:
            mine, theirs = getattr(self, name), getattr(other, name)
            setattr(self, name, (mine or theirs) if isinstance(mine, bool) else mine + theirs)
        return self

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cache_hit_ratio(self) -> float | None:
        return _ratio(self.cache_n, self.prompt_n) if self.cache_known else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def prefill_tok_s(self) -> float | None:
        return _rate(self.split_prompt_n, self.prefill_sec * 1000.0)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def decode_tok_s(self) -> float | None:
        return _rate(self.split_predicted_n, self.decode_sec * 1000.0)
