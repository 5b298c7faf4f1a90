"""The dual-trace store: a trial's spans as a tree, joined with its trajectory steps.

A span links to a trajectory step by (trial id, episode): every span records ``rise.trial_id`` and
``rise.episode`` at its start and every step of the rich trajectory (``trajectory.rich.json``, or the
``trajectory.json`` of a run from before the split) carries ``trial_id`` and ``episode``.
The queries here are the ones analysis needs: spans of a function in an episode, exceptions, and the path
from a model response through parsing, dispatch and capture to the observation it produced.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trials.harness_api import ATIF_TRAJECTORY_FILE, RICH_TRAJECTORY_FILE, rich_trajectory_path

from .export import STATUS_ERROR, SpanData, read_jsonl

SPANS_FILENAME = "spans.jsonl"
TRAJECTORY_FILENAME = ATIF_TRAJECTORY_FILE  # strict ATIF; what the platform reads is rich_trajectory_path()

# Stage of a boundary on the path model response → observation. Exact seed targets first; evolved harnesses
# that rename things still classify through the substring rules.
SEED_STAGES = {
    "model_call:ModelCaller.call": "model",
    "model_call:ModelCaller.sample": "model",
    "parsing:parse_response": "parse",
    "loop:Agent.execute_commands": "execute",
    "tmux:TmuxSession.send_keys": "dispatch",
    "tmux:TmuxSession.capture": "capture",
    "observation:limit_output": "limit",
    "observation:build_observation": "observation",
}
_STAGE_RULES = [("send_keys", "dispatch"), ("capture", "capture"), ("build_observation", "observation"),
                ("limit_output", "limit"), ("parse", "parse"), ("execute", "execute")]
STAGE_ORDER = ["model", "parse", "execute", "dispatch", "capture", "limit", "observation"]


@dataclass(eq=False)
class Span:
    """A recorded span with its resource and tree links."""

    data: SpanData
    resource: dict[str, Any]
    parent: Span | None = None
    children: list[Span] = field(default_factory=list)

    # -------------------------------------------------------------------------------- attribute views
    @property
    def name(self) -> str:
        return self.data.name

    @property
    def attributes(self) -> dict[str, Any]:
        return self.data.attributes

    @property
    def boundary(self) -> str:
        return self.data.attributes.get("rise.boundary", self.data.name)

    @property
    def trial_id(self) -> str | None:
        return self.data.attributes.get("rise.trial_id", self.resource.get("rise.trial_id"))

    @property
    def episode(self) -> int | None:
        return self.data.attributes.get("rise.episode")

    @property
    def function(self) -> str | None:
        return self.data.attributes.get("code.function.name")

    @property
    def args(self) -> dict[str, str]:
        raw = self.data.attributes.get("rise.args")
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except ValueError:
            return {"?": raw}

    @property
    def result(self) -> str | None:
        return self.data.attributes.get("rise.return")

    @property
    def is_error(self) -> bool:
        return self.data.status_code == STATUS_ERROR

    @property
    def exception(self) -> dict[str, Any] | None:
        for _, name, attrs in self.data.events:
            if name == "exception":
                return attrs
        return None

    @property
    def is_genai(self) -> bool:
        return "gen_ai.operation.name" in self.data.attributes

    @property
    def start_ns(self) -> int:
        return self.data.start_ns

    @property
    def duration_ms(self) -> float:
        return max(0, self.data.end_ns - self.data.start_ns) / 1e6

    @property
    def stage(self) -> str | None:
        """Where this span sits on the response → observation path (None: not on it)."""
        b = self.boundary
        if b in SEED_STAGES:
            return SEED_STAGES[b]
        if self.is_genai:
            return "model"
        tail = b.split(":", 1)[-1]
        for needle, stage in _STAGE_RULES:
            if needle in tail:
                return stage
        return None

    def walk(self) -> Iterator[Span]:
        yield self
        for c in self.children:
            yield from c.walk()

    def __repr__(self) -> str:
        return f"Span({self.boundary}, ep={self.episode}, {self.duration_ms:.2f} ms{', ERROR' if self.is_error else ''})"


class TrialTrace:
    """All spans of one trial (a tree) plus its trajectory steps."""

    def __init__(self, spans: Iterable[Span], steps: list[dict[str, Any]] | None = None, *,
                 bad_lines: int = 0, agent_dir: Path | None = None):
        self.spans = sorted(spans, key=lambda s: s.start_ns)
        self.steps = steps or []
        self.bad_lines = bad_lines
        self.agent_dir = agent_dir
        self.by_id = {s.data.span_id: s for s in self.spans}
        self.roots: list[Span] = []
        for s in self.spans:
            parent = self.by_id.get(s.data.parent_id) if s.data.parent_id else None
            if parent is None:
                self.roots.append(s)  # a real root, or an orphan whose parent never ended (killed trial)
            else:
                s.parent = parent
                parent.children.append(s)

    # -------------------------------------------------------------------------------- loading
    @classmethod
    def load(cls, trial_dir: str | Path) -> TrialTrace:
        """Load from a trial folder (``<trial>/agent/``) or an agent folder holding ``spans.jsonl``."""
        agent_dir = find_agent_dir(trial_dir)
        spans_path = agent_dir / SPANS_FILENAME
        items, bad = read_jsonl(spans_path) if spans_path.is_file() else ([], 0)
        return cls([Span(d, r) for r, d in items], load_steps(agent_dir), bad_lines=bad, agent_dir=agent_dir)

    # -------------------------------------------------------------------------------- queries
    @property
    def trial_id(self) -> str | None:
        for s in self.spans:
            if s.trial_id:
                return s.trial_id
        return None

    def episodes(self) -> list[int]:
        eps = {s.episode for s in self.spans if s.episode is not None}
        eps |= {st["episode"] for st in self.steps if isinstance(st.get("episode"), int)}
        return sorted(eps)

    def in_episode(self, episode: int) -> list[Span]:
        return [s for s in self.spans if s.episode == episode]

    def spans_of(self, boundary: str, episode: int | None = None) -> list[Span]:
        """Spans of one function: its config target (``loop:Agent.step``), qualname or code.function.name."""
        def match(s: Span) -> bool:
            return boundary in (s.boundary, s.name, s.function) or s.boundary.split(":", 1)[-1] == boundary

        return [s for s in self.spans if match(s) and (episode is None or s.episode == episode)]

    def exceptions(self, episode: int | None = None) -> list[Span]:
        """Spans that ended with an error status, innermost first within a chain of re-raises."""
        errs = [s for s in self.spans if s.is_error and (episode is None or s.episode == episode)]
        return sorted(errs, key=lambda s: -_depth(s))

    def path_from_response(self, episode: int) -> list[tuple[str, Span]]:
        """(stage, span) from the episode's model response to the observation it produced, in time order.

        Starts at the first top-level model call (a verifier call inside Mid-Harness selection is nested
        under it, or comes after it and is kept as 'model'), ends at the last observation span.
        """
        spans = self.in_episode(episode)
        model = [s for s in spans if s.stage == "model" and not _has_ancestor_stage(s, "model")]
        if not model:
            return []
        first = model[0]
        out: list[tuple[str, Span]] = [("model", first)]
        last_obs = max((s.data.end_ns for s in spans if s.stage == "observation"), default=None)
        for s in spans:
            if s is first or s.start_ns < first.data.start_ns or _is_inside(s, first):
                continue
            if last_obs is not None and s.start_ns > last_obs:
                continue
            if s.stage:
                out.append((s.stage, s))
        return out

    # -------------------------------------------------------------------------------- trajectory join
    def steps_for_episode(self, episode: int) -> list[dict[str, Any]]:
        return [st for st in self.steps if st.get("episode") == episode]

    def step_for(self, span: Span) -> dict[str, Any] | None:
        """The trajectory step a span belongs to (same trial and episode), if any."""
        if span.episode is None:
            return None
        for st in self.steps:
            if st.get("episode") == span.episode and st.get("trial_id", span.trial_id) == span.trial_id:
                return st
        return None

    def spans_for_step(self, step: dict[str, Any]) -> list[Span]:
        ep, trial = step.get("episode"), step.get("trial_id")
        return [s for s in self.spans if s.episode == ep and (trial is None or s.trial_id == trial)]

    def unlinked(self) -> list[Span]:
        """Spans that carry an episode but match no trajectory step (empty when the join is complete)."""
        return [s for s in self.spans if s.episode is not None and self.step_for(s) is None]


def _depth(s: Span) -> int:
    d = 0
    while s.parent is not None:
        s, d = s.parent, d + 1
    return d


def _has_ancestor_stage(s: Span, stage: str) -> bool:
    p = s.parent
    while p is not None:
        if p.stage == stage:
            return True
        p = p.parent
    return False


def _is_inside(s: Span, ancestor: Span) -> bool:
    p = s.parent
    while p is not None:
        if p is ancestor:
            return True
        p = p.parent
    return False


def find_agent_dir(path: str | Path) -> Path:
    """``<trial>/agent`` for a trial folder, the folder itself when it already holds the agent files."""
    path = Path(path)
    if path.is_file():
        return path.parent
    if any((path / name).exists() for name in (SPANS_FILENAME, RICH_TRAJECTORY_FILE, TRAJECTORY_FILENAME)):
        return path
    if (path / "agent").is_dir():
        return path / "agent"
    return path


def load_steps(agent_dir: Path) -> list[dict[str, Any]]:
    """The steps of the rich trajectory (:func:`rich_trajectory_path`; empty when missing or unreadable)."""
    path = rich_trajectory_path(agent_dir)
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text())
    except ValueError:
        return []
    steps = data.get("steps", []) if isinstance(data, dict) else data
    return [s for s in steps if isinstance(s, dict)]


def group_by_episode(spans: Iterable[Span]) -> dict[int | None, list[Span]]:
    out: dict[int | None, list[Span]] = defaultdict(list)
    for s in spans:
        out[s.episode].append(s)
    return dict(out)
