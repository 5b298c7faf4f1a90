"""The four verifiers: listwise (1 call), pointwise (one call per candidate), pairwise round-robin and the
ring + pivot tournament (duels). Each takes the unique parseable candidates and returns per-candidate scores
plus one verdict record per call; the choice itself is made by the actor from the scores.

Decision-only calls ask for one token (A/B, a number, a digit): ``max_tokens`` of the answer's length, logprobs
with the top alternatives, and, where the server allows, a constraint to the valid answers (vLLM
``structured_outputs`` choice, or a llama.cpp grammar). The answer is read from the text (first valid token);
its probability split comes from the first token's top logprobs when present. Reasoning calls think first and
end with a ``VERDICT:`` / ``BEST:`` / ``SCORE:`` line, read from the last such line.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from . import tournament
from .config import MidHarnessSettings
from .dedupe import Candidate
from .history import HistoryView

_PROMPTS = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "prompts")),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=False,
    autoescape=False,
)
# Plain JSON strings (jinja's tojson escapes < > & for HTML, which would garble shell commands).
_PROMPTS.filters["keys"] = lambda s: json.dumps(s, ensure_ascii=False)

_FINAL = {"pairwise": "VERDICT", "listwise": "BEST", "pointwise": "SCORE"}


def render(template: str, **values: Any) -> str:
    return _PROMPTS.get_template(template).render(**values)


def _field(obj: Any, name: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def first_token_probs(logprobs: Any) -> dict[str, float]:
    """Probabilities of the first generated token and its top alternatives, keyed by stripped token text.

    Accepts ModelClient's ``[TokenLogprob(token, logprob, top_logprobs={token: logprob})]``, the OpenAI shape
    (object or dict with ``content``: [{token, logprob, top_logprobs: [{token, logprob}]}]) or its bare list.
    """
    if logprobs is None:
        return {}
    content = logprobs if isinstance(logprobs, list) else _field(logprobs, "content")
    if not content:
        return {}
    first = content[0]
    top = _field(first, "top_logprobs") or []
    if isinstance(top, dict):  # ModelClient's TokenLogprob: {token: logprob}
        pairs = list(top.items())
    else:
        pairs = [(_field(e, "token"), _field(e, "logprob")) for e in top]
    if not pairs:
        pairs = [(_field(first, "token"), _field(first, "logprob"))]
    probs: dict[str, float] = {}
    for token, lp in pairs:
        if token is None or lp is None:
            continue
        key = str(token).strip()
        probs[key] = probs.get(key, 0.0) + math.exp(float(lp))
    return probs


def read_answer(text: str, choices: list[str], reasoning: bool, final: str) -> str | None:
    """The answer among ``choices`` in a verifier reply, or None."""
    text = text or ""
    if reasoning:
        marked = re.findall(rf"{final}\s*[:=]\s*\**\s*([A-Za-z0-9]+)", text, flags=re.IGNORECASE)
        for token in reversed(marked):
            if token.upper() in choices:
                return token.upper()
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        text = lines[-1] if lines else ""
    for token in re.findall(r"[A-Za-z0-9]+", text):
        if token.upper() in choices:
            return token.upper()
    return None


@dataclass
class CallOutcome:
    answer: str | None
    probs: dict[str, float] | None  # normalised over the valid answers, when logprobs gave any
    text: str
    input_tokens: int
    output_tokens: int
    latency_sec: float
    error: str | None = None
    timings: Any = None  # the call's CallTimings (prefill, decode, waiting), when the client measured them


def _is_context_error(exc: BaseException) -> bool:
    return any(c.__name__ == "ContextLengthExceeded" for c in type(exc).__mro__)


def _first_leaf(group: BaseExceptionGroup) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


class VerifierCalls:
    """Issues verifier requests (bounded concurrency) and remembers each call's usage."""

    def __init__(self, client: Any, settings: MidHarnessSettings) -> None:
        self.client = client
        self.settings = settings
        self.semaphore = asyncio.Semaphore(settings.max_concurrency)
        self._constraints: dict[tuple[str, ...], dict] = {}

    async def _constraint(self, choices: list[str]) -> dict:
        """``chat`` keyword arguments that restrict the answer to ``choices`` (cached per choice list).

        ``auto``: the client's own server detection (``ModelClient.choice_args``: vLLM structured_outputs,
        a llama.cpp grammar, nothing elsewhere), or the endpoint's ``supports_choice`` for a plainer client.
        """
        key = tuple(choices)
        if key not in self._constraints:
            mode = self.settings.constraint
            if mode == "auto":
                choice_args = getattr(self.client, "choice_args", None)
                if choice_args is not None:
                    self._constraints[key] = dict(await choice_args(list(choices)))
                    return self._constraints[key]
                endpoint = _field(self.client, "endpoint") or _field(self.client, "spec")
                mode = "choice" if endpoint is not None and _field(endpoint, "supports_choice") else "none"
            if mode == "choice":
                self._constraints[key] = {"extra_body": {"structured_outputs": {"choice": list(choices)}}}
            elif mode == "grammar":
                grammar = "root ::= " + " | ".join(json.dumps(c) for c in choices)
                self._constraints[key] = {"extra_body": {"grammar": grammar}}
            else:
                self._constraints[key] = {}
        return self._constraints[key]

    async def _request(self, choices: list[str]) -> dict:
        s = self.settings
        kwargs: dict[str, Any] = {"temperature": s.verifier_temperature}
        if s.verifier_model:
            kwargs["model"] = s.verifier_model
        if not s.decision_only:
            kwargs["max_tokens"] = s.reasoning_max_tokens
            return kwargs
        kwargs["max_tokens"] = max(len(c) for c in choices)
        if s.top_logprobs:
            kwargs["logprobs"] = True
            kwargs["top_logprobs"] = max(s.top_logprobs, min(len(choices), 20))
        kwargs.update(await self._constraint(choices))
        return kwargs

    async def ask(self, prompt: str, choices: list[str], kind: str) -> CallOutcome:
        """One verifier call; a prompt too long for the verifier is recorded as an unread verdict, any other
        failure propagates (an unreachable verifier makes the trial fail, it does not silently pick sample 0)."""
        async with self.semaphore:
            try:
                request = await self._request(choices)
                result = await self.client.chat([{"role": "user", "content": prompt}], **request)
            except Exception as exc:
                if not _is_context_error(exc):
                    raise
                return CallOutcome(None, None, "", 0, 0, 0.0, error=f"{type(exc).__name__}: {exc}")
        choice = result.choices[0] if result.choices else None
        text = (_field(choice, "text") or "") if choice is not None else ""
        answer = read_answer(text, choices, not self.settings.decision_only, _FINAL[kind])
        probs = None
        if self.settings.decision_only and choice is not None:
            raw = first_token_probs(_field(choice, "logprobs"))
            valid = {c: raw.get(c, 0.0) for c in choices}
            total = sum(valid.values())
            if total > 0:
                probs = {c: p / total for c, p in valid.items()}
                if answer is None:
                    answer = max(choices, key=lambda c: probs[c])
        return CallOutcome(
            answer=answer,
            probs=probs,
            text=text,
            input_tokens=int(result.input_tokens or 0),
            output_tokens=int(result.output_tokens or 0),
            latency_sec=float(result.latency_sec or 0.0),
            timings=getattr(result, "timings", None),
        )

    async def ask_all(self, jobs: list[tuple[str, list[str], str]]) -> list[CallOutcome]:
        """Run several calls concurrently (bounded by the semaphore), results in job order."""
        tasks = []
        try:
            async with asyncio.TaskGroup() as group:
                for prompt, choices, kind in jobs:
                    tasks.append(group.create_task(self.ask(prompt, choices, kind)))
        except BaseExceptionGroup as eg:
            raise _first_leaf(eg) from None
        return [t.result() for t in tasks]


def _usage(out: CallOutcome) -> dict:
    return {
        "text": out.text,
        "input_tokens": out.input_tokens,
        "output_tokens": out.output_tokens,
        "latency_sec": round(out.latency_sec, 4),
        "error": out.error,
        **({"inference": out.timings.model_dump(exclude_none=True)} if out.timings is not None else {}),
    }


@dataclass
class Verification:
    scores: dict[int, float]
    verdicts: list[dict]
    stage_output_tokens: list[int]  # max output tokens per concurrent stage (for POT)
    extra: dict


def _view(c: Candidate) -> dict:
    return {"commands": c.commands, "task_complete": c.task_complete}


async def listwise(
    calls: VerifierCalls, task: str, history: HistoryView, cands: list[Candidate]
) -> Verification:
    labels = [str(i + 1) for i in range(len(cands))]
    prompt = render(
        "listwise.j2",
        task=task,
        history=history,
        candidates=[_view(c) for c in cands],
        decision_only=calls.settings.decision_only,
    )
    (out,) = await calls.ask_all([(prompt, labels, "listwise")])
    if out.probs:
        scores = {c.id: out.probs[label] for c, label in zip(cands, labels)}
    else:
        scores = {c.id: (1.0 if out.answer == label else 0.0) for c, label in zip(cands, labels)}
    chosen = cands[labels.index(out.answer)].id if out.answer else None
    verdict = {
        "stage": "listwise",
        "options": [c.id for c in cands],
        "answer": chosen,
        "probs": out.probs,
        **_usage(out),
    }
    return Verification(scores, [verdict], [out.output_tokens], {})


async def pointwise(
    calls: VerifierCalls, task: str, history: HistoryView, cands: list[Candidate]
) -> Verification:
    digits = [str(d) for d in range(10)]
    jobs = [
        (
            render(
                "pointwise.j2",
                task=task,
                history=history,
                c=_view(c),
                decision_only=calls.settings.decision_only,
            ),
            digits,
            "pointwise",
        )
        for c in cands
    ]
    outs = await calls.ask_all(jobs)
    scores, verdicts = {}, []
    for c, out in zip(cands, outs):
        if out.probs:
            score = sum(int(d) * p for d, p in out.probs.items())
        elif out.answer is not None:
            score = float(out.answer)
        else:
            score = -1.0  # unreadable rating ranks below any rating
        scores[c.id] = score
        verdicts.append(
            {"stage": "pointwise", "candidate": c.id, "score": score, "probs": out.probs, **_usage(out)}
        )
    return Verification(scores, verdicts, [max((o.output_tokens for o in outs), default=0)], {})


async def _duels(
    calls: VerifierCalls,
    task: str,
    history: HistoryView,
    by_id: dict[int, Candidate],
    pairs: list[tuple[int, int]],
    stage: str,
) -> tuple[list[tournament.Duel], list[dict], int]:
    jobs = [
        (
            render(
                "pairwise.j2",
                task=task,
                history=history,
                a=_view(by_id[a]),
                b=_view(by_id[b]),
                decision_only=calls.settings.decision_only,
            ),
            ["A", "B"],
            "pairwise",
        )
        for a, b in pairs
    ]
    outs = await calls.ask_all(jobs)
    duels, verdicts = [], []
    for (a, b), out in zip(pairs, outs):
        if out.probs:
            p_a = out.probs["A"]
        elif out.answer is not None:
            p_a = 1.0 if out.answer == "A" else 0.0
        else:
            p_a = None
        duels.append((a, b, p_a))
        verdicts.append(
            {
                "stage": stage,
                "a": a,
                "b": b,
                "verdict": out.answer,
                "winner": None if out.answer is None else (a if out.answer == "A" else b),
                "p_a": p_a,
                "margin": None if p_a is None else abs(2 * p_a - 1),
                "probs": out.probs,
                **_usage(out),
            }
        )
    return duels, verdicts, max((o.output_tokens for o in outs), default=0)


async def pairwise(
    calls: VerifierCalls, task: str, history: HistoryView, cands: list[Candidate]
) -> Verification:
    ids = [c.id for c in cands]
    by_id = {c.id: c for c in cands}
    duels, verdicts, pot = await _duels(calls, task, history, by_id, tournament.round_robin(ids), "pairwise")
    return Verification(tournament.win_rates(ids, duels), verdicts, [pot], {})


async def ring_pivot(
    calls: VerifierCalls, task: str, history: HistoryView, cands: list[Candidate]
) -> Verification:
    ids = [c.id for c in cands]
    by_id = {c.id: c for c in cands}
    counts = {c.id: c.count for c in cands}
    ring_duels, verdicts, pot_ring = await _duels(calls, task, history, by_id, tournament.ring(ids), "ring")
    ring_scores = tournament.win_rates(ids, ring_duels)
    k = tournament.effective_pivots(calls.settings.pivots, len(ids))
    pivots = tournament.ranking(ids, ring_scores, counts)[:k]
    rest = [i for i in ids if i not in pivots]
    done = {frozenset((a, b)) for a, b, _ in ring_duels}
    pairs = tournament.pivot_pairs(pivots, rest, done)
    stages = [pot_ring]
    duels = list(ring_duels)
    if pairs:
        more, more_verdicts, pot_pivot = await _duels(calls, task, history, by_id, pairs, "pivot")
        duels += more
        verdicts += more_verdicts
        stages.append(pot_pivot)
    extra = {"ring_scores": ring_scores, "pivots": pivots}
    return Verification(tournament.win_rates(ids, duels), verdicts, stages, extra)


# Setting value -> function name in this module (looked up at call time, so instrumentation can wrap them).
MECHANISMS = {
    "listwise": "listwise",
    "pointwise": "pointwise",
    "pairwise": "pairwise",
    "tournament": "ring_pivot",
}
