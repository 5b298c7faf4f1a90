"""Mid-Harness: action scaling at the model-call boundary.

At each step the wrapped agent asks an :class:`~.actor.Actor` for the next reply instead of calling the model
directly. With ``n == 1`` the actor is a pass-through (exactly the base agent's requests); with ``n > 1`` it
samples N candidate replies from the same history, merges identical ones, asks a verifier (listwise,
pointwise, pairwise round-robin or ring + pivot tournament) which one to execute, and returns that reply with
the step's selection record in ``reply.extra["midharness"]``.

The actor is built by ``midharness.actor:build_actor``. This package file imports none of its modules: they
reach each other through it (``from . import verifiers``), so a re-export here would close an import circle.
"""
