"""Distillation data: every pairwise verdict a job's verifier gave, one JSON line each.

Reads ``<job>/<trial>/agent/trajectory.rich.json``, or ``trajectory.json`` where a trial has no rich one (any
step that carries a ``midharness`` record, wherever the trajectory format nests it), the trial's
``agent/trial_spec.json`` (task text, verifier model) and ``result.json`` (reward). Each line holds what the
verifier saw and said: task, history, the two actions, verdict, margin, and the exact decision-only prompt
with its one-letter completion, ready for SFT of a small verifier (the LoRA served next to the base model).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

import trials.harness_api as api

from .history import HistoryView
from .verifiers import _PROMPTS, render

log = logging.getLogger(__name__)

EXPORT_VERSION = 1
PAIRWISE_STAGES = ("pairwise", "ring", "pivot")


class PairwiseExample(BaseModel):
    """One verifier duel as a training example (versioned; one JSON line)."""

    schema_version: int = EXPORT_VERSION
    task_name: str | None = None
    trial: str
    step: int = Field(description="0-based index of the Mid-Harness step in the trajectory")
    stage: str = Field(description="pairwise (round-robin), ring or pivot (tournament)")
    task: str
    history: str = Field(description="what the verifier saw before the candidates (reasoning stripped)")
    A: str
    B: str
    verdict: str = Field(description="A or B")
    margin: float | None = Field(description="|P(A) - P(B)| from logprobs; 1.0 for a plain verdict")
    p_a: float | None = None
    verifier_model: str | None = None
    decision_only: bool = True
    chosen: str | None = Field(default=None, description="A or B if that side was executed at this step")
    reward: float | None = Field(default=None, description="the trial's final reward")
    prompt: str
    completion: str


def _action_text(cand: dict) -> str:
    commands = [(c["keystrokes"], c["duration"]) for c in cand.get("commands", [])]
    return (
        _PROMPTS.get_template("_context.j2")
        .module.action(commands, cand.get("task_complete", False))
        .strip("\n")
    )


def _view(cand: dict) -> dict:
    """A logged candidate as the prompt templates take it."""
    return {
        "commands": [(c["keystrokes"], c["duration"]) for c in cand.get("commands", [])],
        "task_complete": cand.get("task_complete", False),
    }


def _records(node: Any) -> Iterator[dict]:
    """Every ``midharness`` step record in a trajectory, in document order."""
    if isinstance(node, dict):
        rec = node.get("midharness")
        if isinstance(rec, dict) and "verdicts" in rec:
            yield rec
        for key, value in node.items():
            if key != "midharness":
                yield from _records(value)
    elif isinstance(node, list):
        for item in node:
            yield from _records(item)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        log.warning("skipping %s: %s", path, exc)
        return None


def trajectories(root: Path) -> list[Path]:
    """Trajectory files under a job folder, a trial folder, or the file itself."""
    if root.is_file():
        return [root]
    folders = {p.parent for name in (api.RICH_TRAJECTORY_FILE, api.ATIF_TRAJECTORY_FILE)
               for p in root.rglob(name) if p.is_file()}
    return sorted(api.rich_trajectory_path(folder) for folder in folders)


def examples_from_trajectory(path: Path) -> Iterator[PairwiseExample]:
    """The decided pairwise verdicts of one trajectory."""
    data = _read_json(path)
    if data is None:
        return
    agent_dir = path.parent
    trial_dir = agent_dir.parent if agent_dir.name == "agent" else agent_dir
    spec = _read_json(agent_dir / "trial_spec.json") if (agent_dir / "trial_spec.json").exists() else None
    result = _read_json(trial_dir / "result.json") if (trial_dir / "result.json").exists() else None
    spec = spec or {}
    task = spec.get("instruction") or ""
    endpoint = spec.get("verifier_endpoint") or spec.get("endpoint") or {}
    reward = (result or {}).get("reward")
    for step, rec in enumerate(_records(data)):
        if not rec.get("history"):
            continue
        history = HistoryView.from_record(rec["history"])
        past = _PROMPTS.get_template("_context.j2").module.past(history)
        cands = {c["id"]: c for c in rec.get("candidates", [])}
        model = rec.get("verifier_model") or endpoint.get("model")
        for v in rec.get("verdicts", []):
            if v.get("stage") not in PAIRWISE_STAGES or v.get("verdict") not in ("A", "B"):
                continue
            a, b = cands.get(v["a"]), cands.get(v["b"])
            if a is None or b is None:
                continue
            prompt = render(
                "pairwise.j2", task=task, history=history, a=_view(a), b=_view(b), decision_only=True
            )
            choice = rec.get("choice")
            yield PairwiseExample(
                task_name=spec.get("task_name") or (result or {}).get("task_name"),
                trial=trial_dir.name,
                step=step,
                stage=v["stage"],
                task=task,
                history=str(past),
                A=_action_text(a),
                B=_action_text(b),
                verdict=v["verdict"],
                margin=v.get("margin"),
                p_a=v.get("p_a"),
                verifier_model=model,
                decision_only=bool(rec.get("decision_only", True)),
                chosen="A" if choice == v["a"] else "B" if choice == v["b"] else None,
                reward=reward,
                prompt=prompt,
                completion=v["verdict"],
            )


def export_job(root: str | Path, out: str | Path) -> dict[str, int]:
    """Write every decided pairwise verdict under ``root`` to ``out`` (JSONL); returns counts."""
    root, out = Path(root), Path(out)
    counts = {"trajectories": 0, "examples": 0}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with tmp.open("w") as fh:
        for path in trajectories(root):
            counts["trajectories"] += 1
            for ex in examples_from_trajectory(path):
                fh.write(ex.model_dump_json() + "\n")
                counts["examples"] += 1
    tmp.replace(out)
    return counts
