"""One trial's dual trace as the detectors read it: episodes (commands, claim, observation) joined with spans.

The rich trajectory (``agent/trajectory.rich.json``, or an older run's ``agent/trajectory.json``) gives, per
episode, the parsed commands, the completion claim, the warnings and the text that became the next prompt.
The spans (``agent/spans.jsonl``, read through :mod:`monitor.store`) give span ids for evidence and what only
the harness saw (exceptions, timings). In ``trajectory`` mode the spans are not read at all, so a detector
cannot use them by accident.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from evolve.roles.analysis.models import EvidenceRef
from monitor.inference import model_calls, summary_of
from monitor.store import SPANS_FILENAME, Span, TrialTrace, find_agent_dir, load_steps, rich_trajectory_path
from trials.results import TrialResult
from trials.time_split import TimeSplit, trial_split

Mode = Literal["full", "trajectory"]

# The terminal part of an observation starts at one of the seed's markers (observation.py).
_SCREEN_MARKERS = ("New Terminal Output:\n", "Current Terminal Screen:\n")
_CONFIRM = "\n\nAre you sure you want to mark the task as complete?"
# A shell prompt (user@host:/dir# , $ ) or a REPL prompt (>>> , ... ) starts the line; what follows was typed.
PROMPT_LINE = re.compile(r"^(?:\S*[#$]|>>>|\.\.\.)(?: |$)")


@dataclass
class Episode:
    """One agent step of the trajectory."""

    index: int
    step_id: int
    step: dict[str, Any]
    commands: list[tuple[str, float]] = field(default_factory=list)
    claimed: bool = False

    @property
    def extra(self) -> dict[str, Any]:
        return self.step.get("extra") or {}

    @property
    def observation(self) -> str | None:
        """The text that became the next prompt (None at the end of the run)."""
        obs = self.step.get("observation") or {}
        results = obs.get("results") or []
        if results and isinstance(results[0], dict):
            content = results[0].get("content")
            return content if isinstance(content, str) else None
        return None

    @property
    def terminal(self) -> str | None:
        """The terminal part of the observation (None: the step showed no terminal, e.g. a parse error)."""
        return terminal_text(self.observation)


def terminal_text(content: str | None) -> str | None:
    """The screen or new output inside an observation, without the harness's wrapper text."""
    if not content:
        return None
    starts = [(content.rfind(m), m) for m in _SCREEN_MARKERS]
    at, marker = max(starts)
    if at < 0:
        return None
    text = content[at + len(marker):]
    end = text.find(_CONFIRM)
    return text[:end] if end >= 0 else text


def last_line(text: str) -> str:
    """The last non-empty line of ``text`` (a screen ends with empty rows)."""
    for line in reversed(text.splitlines()):
        if line.strip():
            return line.rstrip()
    return ""


def is_prompt_line(line: str) -> bool:
    """Whether ``line`` starts with a shell or REPL prompt (typed text may follow it)."""
    return bool(PROMPT_LINE.match(line.strip()))


def typed_at_prompt(line: str) -> str | None:
    """What was typed after the prompt on ``line`` ('' for a bare prompt; None: not a prompt line)."""
    m = PROMPT_LINE.match(line.strip())
    return line.strip()[m.end():].strip() if m else None


class TrialView:
    """A trial folder, read once for all detectors."""

    def __init__(self, folder: str | Path, mode: Mode = "full"):
        self.folder = Path(folder)
        self.agent_dir = find_agent_dir(self.folder)
        self.mode: Mode = mode
        self.notes: list[str] = []
        self.name = self.folder.name if self.agent_dir != self.folder else self.folder.parent.name
        self.doc = self._read_json(rich_trajectory_path(self.agent_dir)) or {}
        self.steps = load_steps(self.agent_dir)
        self.result = self._read_json(self.folder / "result.json") or {}
        self.agent_result = self._read_json(self.agent_dir / "agent_result.json") or {}
        self.spec = self._read_json(self.agent_dir / "trial_spec.json") or {}
        self.trace: TrialTrace | None = None
        if mode == "full" and (self.agent_dir / SPANS_FILENAME).is_file():
            self.trace = TrialTrace.load(self.agent_dir)
            if self.trace.bad_lines:
                self.notes.append(f"{self.trace.bad_lines} unreadable line(s) in {SPANS_FILENAME} skipped")
        elif mode == "full":
            self.notes.append(f"no {SPANS_FILENAME}: trajectory-only detectors")
        self.episodes = self._episodes()

    def _read_json(self, path: Path) -> dict[str, Any] | None:
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            self.notes.append(f"{path.name} unreadable: {exc}")
            return None
        return data if isinstance(data, dict) else None

    def _episodes(self) -> list[Episode]:
        out = []
        for st in self.steps:
            if st.get("source") != "agent" or not isinstance(st.get("episode"), int):
                continue
            ep = Episode(st["episode"], int(st.get("step_id", 0)), st)
            for call in st.get("tool_calls") or []:
                args = call.get("arguments") or {}
                if call.get("function_name") == "bash_command":
                    ep.commands.append((str(args.get("keystrokes", "")), float(args.get("duration") or 0.0)))
                elif call.get("function_name") == "mark_task_complete":
                    ep.claimed = True
            out.append(ep)
        return out

    # ------------------------------------------------------------------------------------------ facts
    @property
    def task(self) -> str | None:
        return self.result.get("task_name") or self.spec.get("task_name")

    @property
    def status(self) -> str | None:
        return self.result.get("status")

    @property
    def outcome(self) -> str | None:
        """How the agent's run ended: completed, max_episodes, session_lost, error..."""
        final = (self.doc.get("final_metrics") or {}).get("extra") or {}
        return final.get("status") or self.agent_result.get("status") or self.result.get("agent_status")

    @property
    def final_extra(self) -> dict[str, Any]:
        return (self.doc.get("final_metrics") or {}).get("extra") or {}

    @property
    def instruction(self) -> str:
        return str(self.spec.get("instruction") or "")

    @property
    def format(self) -> str:
        return str(((self.doc.get("agent") or {}).get("extra") or {}).get("format") or "json")

    def time_split(self) -> TimeSplit | None:
        """Where the trial's time went (:mod:`trials.time_split`): result.json's model-call sum, else the sum
        of the spans' call timings; None without a readable result or any model timings."""
        try:
            result = TrialResult.model_validate(self.result)
        except ValidationError:
            return None
        if result.inference is None and self.trace is not None:
            summary = summary_of(self.trace)
            result.inference = summary if summary.calls else None
        return trial_split(result) if result.inference is not None else None

    def slowest_model_call(self) -> Span | None:
        """The recorded model call with the longest wall time (None in trajectory mode or without timings)."""
        calls = model_calls(self.trace) if self.trace is not None else []
        return max(calls, key=lambda pair: pair[1].wall_ms)[0] if calls else None

    # ------------------------------------------------------------------------------------------ evidence
    def spans(self, episode: int | None, boundary: str) -> list[Span]:
        """Spans of one boundary (``module:qualname``) in an episode; empty in trajectory mode."""
        if self.trace is None:
            return []
        return self.trace.spans_of(boundary, episode)

    def error_spans(self, episode: int | None = None) -> list[Span]:
        return [] if self.trace is None else self.trace.exceptions(episode)

    def ref(self, episode: int | None = None, step: int | None = None, span: Span | None = None) -> EvidenceRef:
        return EvidenceRef(trial=self.name, episode=episode, step=step,
                           span=span_id(span) if span is not None else None)

    def refs(self, ep: Episode, *boundaries: str, match: Any = None) -> list[EvidenceRef]:
        """The step of ``ep`` and the first span of each boundary there (optionally one ``match`` accepts)."""
        out = [self.ref(ep.index, ep.step_id)]
        for boundary in boundaries:
            found = [s for s in self.spans(ep.index, boundary) if match is None or match(s)]
            if found:
                out.append(self.ref(ep.index, ep.step_id, found[0]))
        return out


def span_id(span: Span) -> str:
    """A span's id as written in ``spans.jsonl`` (16 hex digits)."""
    return format(span.data.span_id, "016x")
