"""Dollars spent by role calls, summed per round, checked before each call."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from evolve.roles.runtime.role import RoleError
from evolve.roles.runtime.transcript import call_ends
from trials.harness_api import Cost


@dataclass
class Budget:
    """A spending limit shared by the role calls of a round (``max_usd=None``: no limit, still summed)."""

    max_usd: float | None = None
    spent: Cost = field(default_factory=Cost)  # every call charged so far (the platform's cost record)
    by_role: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def spent_usd(self) -> float:
        return self.spent.usd

    @property
    def calls(self) -> int:
        return self.spent.calls

    @classmethod
    def from_transcripts(cls, folder: str | Path, max_usd: float | None = None) -> Budget:
        """A budget that already counts the calls whose transcripts are in ``folder`` (a resumed round)."""
        budget = cls(max_usd=max_usd)
        for row in call_ends(sorted(Path(folder).glob("*.jsonl"))):
            budget.charge(str(row.get("role", "?")), float(row.get("cost") or 0.0))
        return budget

    def check(self, role: str, reserve: float | None = None) -> None:
        """Refuse a call when the budget is spent (or cannot cover ``reserve``, the call's own $ limit): a
        RoleError of a call that did not start."""
        if self.max_usd is None:
            return
        left = self.max_usd - self.spent_usd
        if left <= 0 or (reserve is not None and reserve > left):
            raise RoleError(role, "budget", f"budget spent: ${self.spent_usd:.4f} of ${self.max_usd:.4f}"
                            + (f"; this call may cost up to ${reserve:.4f}" if reserve else ""), started=False)

    def charge(self, role: str, usd: float) -> None:
        with self._lock:
            self.spent.add(usd=usd)
            self.by_role[role] = self.by_role.get(role, 0.0) + usd
