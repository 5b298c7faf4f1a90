"""Screening of a settings-tier candidate: its switches must show in its runs.

A settings change adds no code, so no boundary is its own: the spans of the behaviours its keys govern are hit by
the incumbent too. What shows that the change acted is (a) every screening trial that ran recorded the new values
among its effective settings (the seed writes them to its trajectory, ``agent.extra.settings``), and (b) some
span of a governed behaviour was recorded (the behaviour the switch steers ran at all).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trials import harness_settings
from trials.harness_api import rich_trajectory_path

from .evaluate import ScreeningOutcome


def recorded_settings(trial_dir: Path) -> dict[str, Any] | None:
    """The effective settings a trial's harness recorded, or None where it recorded none (or the file is bad)."""
    try:
        data = json.loads(rich_trajectory_path(trial_dir / "agent").read_text())
    except (OSError, ValueError):
        return None
    found = ((data.get("agent") or {}).get("extra") or {}).get("settings")
    return found if isinstance(found, dict) else None


_MISSING = object()


@dataclass
class SettingsScreening(ScreeningOutcome):
    """A :class:`ScreeningOutcome` judged by the settings the trials recorded (see the module docstring)."""

    expected: dict[str, Any] = field(default_factory=dict)
    seen: dict[str, dict[str, Any]] = field(default_factory=dict)  # trial -> key -> recorded value (or "absent")

    @classmethod
    def of(cls, res: ScreeningOutcome, expected: dict[str, Any]) -> SettingsScreening:
        seen = {}
        for tdir in res.outcome.trial_dirs():
            rec = recorded_settings(tdir)
            if rec is not None:
                seen[tdir.name] = {k: (v if (v := harness_settings.lookup(rec, k, _MISSING)) is not _MISSING else "absent") for k in expected}
        return cls(res.outcome, res.boundaries, res.spans, res.per_trial, res.common, dict(expected), seen)

    def _applied(self) -> bool:
        return bool(self.seen) and all(v == self.expected[k] for got in self.seen.values() for k, v in got.items())

    @property
    def mechanism_ran(self) -> bool:
        return self._applied() and (not self.boundaries or any(self.spans.values()))

    def details(self) -> dict[str, Any]:
        out = super().details()
        wrong = {t: {k: v for k, v in got.items() if v != self.expected[k]} for t, got in self.seen.items()}
        wrong = {t: w for t, w in wrong.items() if w}
        out["reason"] = (
            f"the trials recorded {', '.join(f'{k} = {v!r}' for k, v in self.expected.items())}"
            + (f" and spans of {', '.join(b for b, n in self.spans.items() if n)}" if self.boundaries else "")
            if self.mechanism_ran else
            "no screening trial recorded its effective settings" if not self.seen else
            f"trials ran with other values: {wrong}" if wrong else
            f"no span of {', '.join(self.boundaries)} (the behaviours the switches steer) in any screening trial")
        out["settings_expected"], out["settings_seen"] = self.expected, self.seen
        return out
