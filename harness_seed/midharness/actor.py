"""The actor the agent loop calls for each model reply: pass-through (N = 1) or Mid-Harness (N > 1)."""

from __future__ import annotations

from typing import Any, Callable, Protocol


class Actor(Protocol):
    """What the loop needs: one reply per step."""

    async def act(self, messages: list[dict]) -> Any:  # -> model_call.ModelReply
        ...


class PassthroughActor:
    """N = 1: exactly the base agent's model call, nothing added."""

    def __init__(self, caller: Any) -> None:
        self.caller = caller

    async def act(self, messages: list[dict]) -> Any:
        return await self.caller.call(messages)


class MidHarnessActor:
    """N > 1: sample, merge, verify, return the winner (filled in below)."""

    def __init__(self, settings: dict, caller: Any, verifier_client: Any, instruction: str,
                 parse_fn: Callable[[str], Any], cost: Any) -> None:
        self.settings = settings
        self.caller = caller
        self.verifier_client = verifier_client
        self.instruction = instruction
        self.parse_fn = parse_fn
        self.cost = cost

    async def act(self, messages: list[dict]) -> Any:
        raise NotImplementedError("Mid-Harness N>1 is being written (helper H6); use n = 1 meanwhile")


def build_actor(settings: dict, caller: Any, verifier_client: Any, instruction: str,
                parse_fn: Callable[[str], Any], cost: Any) -> Actor:
    """The actor for the ``[midharness]`` settings section; ``n == 1`` gives the plain model call."""
    settings = dict(settings or {})
    if int(settings.get("n", 1)) <= 1:
        return PassthroughActor(caller)
    return MidHarnessActor(settings, caller, verifier_client, instruction, parse_fn, cost)
