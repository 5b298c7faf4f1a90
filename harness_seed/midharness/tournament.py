"""Which pairs duel, and how duels become scores. Pure functions over candidate ids; no model calls here.

A duel is ``(a, b, p_a)``: candidate ``a`` was shown as A, ``b`` as B, and ``p_a`` is the verifier's
probability that A is the better action (from the A/B logprobs where the server returns them, else 1 or 0 for
a plain verdict; ``None`` when the verdict could not be read). The margin-weighted win rate of a candidate is
the sum of its shares (``p_a`` for A, ``1 - p_a`` for B, i.e. ``(1 + margin) / 2`` with ``margin = P(A) - P(B)``)
divided by the number of decided duels it played.
"""

from __future__ import annotations

Pair = tuple[int, int]
Duel = tuple[int, int, float | None]


def round_robin(ids: list[int]) -> list[Pair]:
    """Every unordered pair once (N(N-1)/2); A/B orientation alternates so neither slot is favoured."""
    pairs = []
    for i in range(len(ids)):
        for j in range(i + 1, len(ids)):
            pair = (ids[i], ids[j]) if len(pairs) % 2 == 0 else (ids[j], ids[i])
            pairs.append(pair)
    return pairs


def ring(ids: list[int]) -> list[Pair]:
    """Candidate i (as A) against candidate i+1 (as B), wrapping around: every candidate is seen once in each
    slot, so both orders are represented. Two candidates make one duel, not two."""
    pairs, seen = [], set()
    for i in range(len(ids)):
        a, b = ids[i], ids[(i + 1) % len(ids)]
        if a == b or frozenset((a, b)) in seen:
            continue
        seen.add(frozenset((a, b)))
        pairs.append((a, b))
    return pairs


def effective_pivots(requested: int, unique: int) -> int:
    """At most half the field becomes pivots, so the pivot stage stays "top faces the rest" (k=4 of N=8)."""
    return max(1, min(requested, unique // 2)) if unique >= 2 else 0


def pivot_pairs(pivots: list[int], rest: list[int], done: set[frozenset]) -> list[Pair]:
    """Each pivot against each non-pivot, skipping pairs that already met; orientation alternates."""
    pairs = []
    for p in pivots:
        for q in rest:
            if frozenset((p, q)) in done:
                continue
            pairs.append((p, q) if len(pairs) % 2 == 0 else (q, p))
    return pairs


def win_rates(ids: list[int], duels: list[Duel]) -> dict[int, float]:
    """Margin-weighted win rate per candidate (0.0 for one that had no decided duel)."""
    won = {i: 0.0 for i in ids}
    played = {i: 0 for i in ids}
    for a, b, p_a in duels:
        if p_a is None:
            continue
        won[a] += p_a
        won[b] += 1.0 - p_a
        played[a] += 1
        played[b] += 1
    return {i: (won[i] / played[i] if played[i] else 0.0) for i in ids}


def ranking(ids: list[int], scores: dict[int, float], counts: dict[int, int]) -> list[int]:
    """Best first: higher score, then more merged samples, then earlier candidate."""
    return sorted(ids, key=lambda i: (-scores.get(i, 0.0), -counts.get(i, 1), i))
