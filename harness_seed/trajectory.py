"""The agent's side of the dual trace, in two files (names: settings ``trajectory.file``/``atif_file``).

``trajectory.rich.json`` is the working record the platform reads (analysis, monitor, validators): ATIF-v1.4
in shape, extended. Step 1 is the first prompt (source ``user``); each episode adds one ``agent`` step holding
the raw reply, the parsed actions as tool calls (``bash_command`` per command, ``mark_task_complete`` for a
claim), the warnings, the observation that became the next prompt, token usage and timings, with ``trial_id``
and ``episode`` on every step. It is rewritten atomically after each episode.

``trajectory.json`` is the same run as strict ATIF v1.8 (:func:`to_atif`), the file Harbor's tools read and
its models validate; it is written when the run ends (:meth:`Trajectory.write_atif`).

Messages sent are stored as a delta, not whole (whole would make the file grow with the square of the run):
``extra.messages_sent = {"base_step", "keep", "append", "count", "sha256"}`` means "the first ``keep`` messages
sent at ``base_step``, then ``append``". :func:`messages_sent` rebuilds the full list for any step.
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import trials.harness_api as api

SCHEMA_VERSION = "ATIF-v1.4"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def prompt_hash(messages: list[dict]) -> str:
    """sha256 of the messages as sent (stable key order), to check a rebuilt prompt."""
    data = json.dumps(messages, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(data.encode()).hexdigest()


class Trajectory:
    """Collects the steps of one run and rewrites ``path`` on every :meth:`write`."""

    def __init__(self, path: str | Path, trial_id: str, agent: dict[str, Any]):
        self.path = Path(path)
        self.started = time.time()
        self.data: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "session_id": trial_id,
            "trial_id": trial_id,
            "agent": agent,
            "steps": [],
            "final_metrics": None,
        }
        self._last_sent: list[dict] = []
        self._last_sent_step: int | None = None

    @property
    def steps(self) -> list[dict[str, Any]]:
        return self.data["steps"]

    def _step(self, source: str, episode: int | None, **fields: Any) -> dict[str, Any]:
        step = {"step_id": len(self.steps) + 1, "trial_id": self.data["trial_id"], "episode": episode,
                "timestamp": _now(), "source": source, **fields}
        self.steps.append(step)
        return step

    def add_prompt(self, text: str) -> dict[str, Any]:
        """Step 1: the first prompt (task and terminal state)."""
        return self._step("user", None, message=text)

    def _delta(self, sent: list[dict], step_id: int) -> dict[str, Any]:
        keep = 0
        for old, new in zip(self._last_sent, sent):
            if old != new:
                break
            keep += 1
        delta = {"base_step": self._last_sent_step if keep else None, "keep": keep, "append": sent[keep:],
                 "count": len(sent), "sha256": prompt_hash(sent)}
        self._last_sent, self._last_sent_step = list(sent), step_id
        return delta

    def add_episode(self, *, episode: int, model_name: str, sent: list[dict], reply: Any, parsed: Any,
                    observation: str | None, timings: dict[str, float], extra: dict[str, Any]) -> dict[str, Any]:
        """One agent step: ``sent`` is the message list the model saw, ``reply`` a ModelReply, ``parsed`` a
        ParseResult (or None when the reply was not parsed), ``observation`` the next prompt (None at the end)."""
        step_id = len(self.steps) + 1
        tool_calls = []
        if parsed is not None and parsed.error is None:
            for i, cmd in enumerate(parsed.commands, start=1):
                tool_calls.append({"tool_call_id": f"call_{episode}_{i}", "function_name": "bash_command",
                                   "arguments": {"keystrokes": cmd.keystrokes, "duration": cmd.duration}})
            if parsed.task_complete:
                tool_calls.append({"tool_call_id": f"call_{episode}_complete",
                                   "function_name": "mark_task_complete", "arguments": {}})
        step_extra = {
            "messages_sent": self._delta(sent, step_id),
            "finish_reason": reply.finish_reason,
            "analysis": parsed.analysis if parsed is not None else None,
            "plan": parsed.plan if parsed is not None else None,
            "parse_error": parsed.error if parsed is not None else None,
            "warnings": list(parsed.warnings) if parsed is not None else [],
            "timings": timings,
            **extra,
        }
        if reply.extra.get("midharness") is not None:
            step_extra["midharness"] = reply.extra["midharness"]
        thinking = {"reasoning_content": reply.extra["reasoning"]} if reply.extra.get("reasoning") else {}
        return self._step(
            "agent", episode, model_name=model_name, message=reply.text, **thinking, tool_calls=tool_calls,
            observation={"results": [{"content": observation}]} if observation is not None else None,
            metrics=_metrics(reply), extra=step_extra,
        )

    def finish(self, cost: api.CostLedger, extra: dict[str, Any],
               inference: api.InferenceSummary | None = None) -> None:
        """Set the final metrics (call :meth:`write` after); ``inference``: the generator calls' time."""
        if inference is not None and inference.calls:
            extra = {**extra, "inference": inference.model_dump()}
        self.data["final_metrics"] = {
            "total_prompt_tokens": cost.generator.input_tokens,
            "total_completion_tokens": cost.generator.output_tokens,
            "total_cached_tokens": inference.cache_n if inference is not None and inference.cache_known else None,
            "total_cost_usd": cost.cost_usd,
            "total_steps": len(self.steps),
            "extra": {"wall_sec": time.time() - self.started, "cost": cost.model_dump(), **extra},
        }

    def write(self) -> None:
        api.write_json_atomic(self.path, self.data)

    def write_atif(self, path: str | Path) -> bool:
        """Write the strict ATIF v1.8 form (:func:`to_atif`) to ``path``; False (nothing written) for a run
        without steps, which ATIF cannot express (a trajectory has at least one step)."""
        if not self.steps:
            return False
        api.write_json_atomic(path, to_atif(self.data))
        return True


def _metrics(reply: Any) -> dict[str, Any]:
    """A step's metrics: tokens and latency; with the server's word on the call, its cached prompt tokens (an
    ATIF field) and ``inference`` (prefill, decode, waiting: :class:`trials.harness_api.CallTimings`), which the
    strict ATIF form keeps under ``metrics.extra``."""
    metrics: dict[str, Any] = {"prompt_tokens": reply.input_tokens, "completion_tokens": reply.output_tokens,
                               "latency_sec": reply.latency_sec}
    timings = getattr(reply, "timings", None)
    if timings is not None:
        if timings.cache_n is not None:
            metrics["cached_tokens"] = timings.cache_n
        metrics["inference"] = timings.model_dump(exclude_none=True)
    return metrics


ATIF_VERSION = "ATIF-v1.8"
_ATIF_STEP_KEYS = ("step_id", "timestamp", "source", "model_name", "message", "reasoning_content", "tool_calls",
                   "observation", "metrics", "extra")
_ATIF_METRIC_KEYS = ("prompt_tokens", "completion_tokens", "cached_tokens", "cost_usd")


def to_atif(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a rich trajectory) as strict ATIF v1.8, the form Harbor's own models accept: fields ATIF
    does not have (``trial_id``, ``episode``, ``latency_sec``) move into ``extra``; an agent step's message
    becomes "Analysis: ...\nPlan: ..." as in the reference, the raw reply moving to ``extra.raw_message``."""
    steps = []
    for step in data["steps"]:
        extra = {"trial_id": step.get("trial_id"), "episode": step.get("episode"), **(step.get("extra") or {})}
        out = {k: step[k] for k in _ATIF_STEP_KEYS if step.get(k) is not None and k != "extra"}
        if step["source"] == "agent" and (extra.get("analysis") or extra.get("plan")):
            parts = [f"{label}: {extra[key]}" for label, key in (("Analysis", "analysis"), ("Plan", "plan"))
                     if extra.get(key)]
            out["message"], extra["raw_message"] = "\n".join(parts), step.get("message", "")
        if step.get("metrics"):
            metrics = step["metrics"]
            out["metrics"] = {k: metrics[k] for k in _ATIF_METRIC_KEYS if metrics.get(k) is not None}
            rest = {k: v for k, v in metrics.items() if k not in _ATIF_METRIC_KEYS}
            if rest:
                out["metrics"]["extra"] = rest
        if not out.get("tool_calls"):
            out.pop("tool_calls", None)
        out.setdefault("message", "")  # ATIF requires one on every step
        out["extra"] = extra
        steps.append(out)
    return {"schema_version": ATIF_VERSION, "session_id": data.get("session_id"), "agent": data["agent"],
            "steps": steps, "final_metrics": data.get("final_metrics"),
            "extra": {"trial_id": data.get("trial_id"), "source_schema_version": data.get("schema_version")}}


def messages_sent(trajectory: dict[str, Any], step_id: int) -> list[dict]:
    """The full message list the model saw at ``step_id`` of a loaded trajectory (rich or ATIF: the deltas are
    in each step's ``extra`` in both)."""
    by_id = {s["step_id"]: s for s in trajectory["steps"]}
    chain = []
    current: int | None = step_id
    while current is not None:  # walk back to a step that starts from nothing
        delta = by_id[current]["extra"]["messages_sent"]
        chain.append(delta)
        current = delta["base_step"]
    messages: list[dict] = []
    for delta in reversed(chain):
        messages = messages[: delta["keep"]] + list(delta["append"])
    return messages
