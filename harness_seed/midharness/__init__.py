"""Mid-Harness: action scaling at the model-call boundary.

At each step the wrapped agent asks an :class:`Actor` for the next reply instead of calling the model
directly. With ``n == 1`` the actor is a pass-through (exactly the base agent's requests); with ``n > 1`` it
samples N candidate replies from the same history, merges identical ones, asks a verifier (listwise,
pointwise, pairwise round-robin or ring + pivot tournament) which one to execute, and returns that reply with
the step's selection record in ``reply.extra["midharness"]``.
"""

from __future__ import annotations

from .actor import Actor, MidHarnessActor, PassthroughActor, build_actor
from .config import MidHarnessSettings

__all__ = ["Actor", "MidHarnessActor", "MidHarnessSettings", "PassthroughActor", "build_actor"]
