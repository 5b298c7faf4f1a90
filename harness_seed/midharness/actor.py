"""The actor the agent loop calls for each model reply: pass-through (N = 1) or Mid-Harness (N > 1).

Cost accounting (added to the trial's ``CostLedger``):

- ``cost.verifier``: every verifier call's input and output tokens (``calls`` counts requests).
- ``cost.parallel_output_tokens`` (POT): the output tokens a fully parallel system waits for in a step. For the
  generator that is the longest of the N branches (they decode side by side); for verification it is, per
  stage of calls that can run at once, the longest verifier output, summed over stages (listwise, pointwise
  and pairwise have one stage; the tournament two: ring, then pivots). At N = 1 it is the reply's output
  tokens, booked by the caller's ``call`` itself. Limits of real hardware (our ``max_concurrency``, batch
  size) are left out on purpose, so POT compares mechanisms, not machines.
- The generator's own tokens are counted by the model caller (``cost.generator``), as for the base agent;
  for ``sample`` it splits the one reported output count over the branches, and POT takes the largest share.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

# Calls go through module attributes (dedupe.merge_candidates, verifiers.<mechanism>) so that runtime
# instrumentation (monitor.host, per recording.toml) sees them.
from . import dedupe, history, tournament, verifiers
from .config import MidHarnessSettings
from .dedupe import Candidate


class Actor(Protocol):
    """What the loop needs: one reply per step."""

    async def act(self, messages: list[dict]) -> Any:  # -> model_call.ModelReply
        ...


def _branch_tokens(reply: Any) -> int:
    # A client that knows per-branch usage of an n>1 request may put it here; else the reply's own count.
    extra = getattr(reply, "extra", None) or {}
    return int(extra.get("branch_output_tokens", getattr(reply, "output_tokens", 0)) or 0)


class PassthroughActor:
    """N = 1: exactly the base agent's model call, nothing added (the caller books its tokens and POT)."""

    def __init__(self, caller: Any) -> None:
        self.caller = caller

    async def act(self, messages: list[dict]) -> Any:
        return await self.caller.call(messages)


class MidHarnessActor:
    """N > 1: sample N candidates, merge identical ones, verify, return the winner's reply."""

    def __init__(
        self,
        settings: MidHarnessSettings,
        caller: Any,
        verifier_client: Any,
        instruction: str,
        parse_fn: Callable[[str], Any],
        cost: Any,
    ) -> None:
        self.settings = settings
        self.caller = caller
        self.calls = verifiers.VerifierCalls(verifier_client, settings)
        self.instruction = instruction
        self.parse_fn = parse_fn
        self.cost = cost
        self._verifier_limit: int | None | bool = False  # False: not asked yet

    async def history_budget(self, cands: list[Candidate]) -> int:
        """Characters of history the verifier prompt can hold: ``history_chars``, lowered to fit the verifier's
        context (asked once from the client; ~3 characters per token, room kept for the template, the
        candidates' actions and a reasoning answer)."""
        s = self.settings
        if self._verifier_limit is False:
            ask = getattr(self.calls.client, "context_limit", None)
            try:
                self._verifier_limit = int(await ask()) if ask is not None else None
            except Exception:  # noqa: BLE001 - unknown limit: keep the configured budget
                self._verifier_limit = None
        if not self._verifier_limit:
            return s.history_chars
        actions = sum(len(k) + 40 for c in cands for k, _ in c.commands)
        answer = 0 if s.decision_only else s.reasoning_max_tokens
        room = (int(self._verifier_limit) - answer - 400) * 3 - actions
        return max(1000, min(s.history_chars, room))

    async def act(self, messages: list[dict]) -> Any:
        s = self.settings
        replies = await self.caller.sample(messages, s.n, s.temperature)
        if not replies:
            raise RuntimeError("the model returned no candidates")
        cands = dedupe.merge_candidates(list(replies), self.parse_fn)
        # Unparseable candidates lose to any parseable one: only parseable ones reach the verifier.
        valid = [c for c in cands if c.valid]
        started = time.monotonic()
        view = None
        if len(valid) >= 2:
            budget = await self.history_budget(valid)
            view = history.build_history(
                messages, self.instruction, self.parse_fn, budget, s.observation_chars
            )
            mechanism = getattr(verifiers, verifiers.MECHANISMS[s.verifier])
            result = await mechanism(self.calls, self.instruction, view, valid)
            scores, verdicts, stages, extra = (
                result.scores,
                result.verdicts,
                result.stage_output_tokens,
                result.extra,
            )
        else:
            scores, verdicts, stages, extra = {c.id: 1.0 for c in valid}, [], [], {}
        winner = self._choose(cands, valid, scores)
        pot = max(_branch_tokens(r) for r in replies) + sum(stages)
        v_in = sum(v.get("input_tokens", 0) for v in verdicts)
        v_out = sum(v.get("output_tokens", 0) for v in verdicts)
        if self.cost is not None:
            self.cost.verifier.add(v_in, v_out, calls=len(verdicts))
            self.cost.parallel_output_tokens += pot
        record = {
            "n": s.n,
            "samples": len(replies),
            "unique": len(cands),
            "valid": len(valid),
            "verifier": s.verifier,
            "decision_only": s.decision_only,
            "verifier_model": s.verifier_model or None,
            "calls": len(verdicts),
            "candidates": [c.record() for c in cands],
            "verdicts": verdicts,
            "scores": {str(k): v for k, v in scores.items()},
            "choice": winner.id,
            "choice_sample": winner.members[0],
            "verifier_tokens": {"input": v_in, "output": v_out},
            "pot": pot,
            "verification_sec": round(time.monotonic() - started, 4),
            "history": view.record() if view is not None else None,
            **extra,
        }
        reply = winner.reply
        merged = dict(getattr(reply, "extra", None) or {})
        merged["midharness"] = record
        try:
            reply.extra = merged
        except AttributeError:  # a frozen reply type: rebuild it with the record attached
            reply = reply.__class__(**{**vars(reply), "extra": merged})
        return reply

    @staticmethod
    def _choose(cands: list[Candidate], valid: list[Candidate], scores: dict[int, float]) -> Candidate:
        if not valid:
            # Nothing parses: hand the loop the most common reply; its parser reports the error as usual.
            return max(cands, key=lambda c: (c.count, -c.id))
        best = tournament.ranking([c.id for c in valid], scores, {c.id: c.count for c in valid})[0]
        return next(c for c in valid if c.id == best)


def build_actor(
    settings: dict,
    caller: Any,
    verifier_client: Any,
    instruction: str,
    parse_fn: Callable[[str], Any],
    cost: Any,
) -> Actor:
    """The actor for the ``[midharness]`` settings section; ``n == 1`` gives the plain model call.

    ``verifier_client`` is a ``ModelClient`` for verifier calls (None: the generator caller's ``client``).
    """
    config = MidHarnessSettings.from_section(settings)
    if config.n <= 1:
        return PassthroughActor(caller)
    client = verifier_client if verifier_client is not None else getattr(caller, "client", None)
    if client is None:
        raise ValueError("midharness n > 1 needs a verifier client (or a caller with a .client)")
    return MidHarnessActor(config, caller, client, instruction, parse_fn, cost)
