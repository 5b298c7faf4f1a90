"""Text views of a dual trace: the aligned per-step view of ``rise trace show`` and a span tree.

Per step (episode): what the model asked for (parsed actions of the trajectory step, else the parser span),
what the harness dispatched (``send_keys`` spans), what came back (``capture`` spans) and what the model was
shown next (the step's observation, else the ``build_observation`` span) — so a command that was never sent,
or output cut before the model saw it, is visible at a glance.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from .store import Span, TrialTrace

LABEL_WIDTH = 14


def _clip(text: str, max_lines: int | None, width: int | None) -> list[str]:
    lines = text.rstrip().splitlines() or [""]  # a pane capture ends in blank rows
    out = []
    for line in lines if max_lines is None else lines[:max_lines]:
        out.append(line if width is None or len(line) <= width else line[: width - 1] + "…")
    if max_lines is not None and len(lines) > max_lines:
        out.append(f"… ({len(lines) - max_lines} more lines)")
    return out


def _block(label: str, items: Iterable[str], max_lines: int | None, width: int | None) -> list[str]:
    out, first = [], True
    for item in items:
        for line in _clip(item, max_lines, width):
            out.append(f"  {label if first else '':<{LABEL_WIDTH}} │ {line}")
            first = False
    if first:
        out.append(f"  {label:<{LABEL_WIDTH}} │ —")
    return out


def _visible(text: str) -> str:
    """Keystrokes with their control characters made visible (a trailing newline is the Enter key)."""
    return text.replace("\r", "⏎").replace("\n", "⏎\n").rstrip("\n")


# ---------------------------------------------------------------------------------------------- step data
def step_actions(step: dict[str, Any] | None) -> list[str] | None:
    """Keystrokes (and completion claims) of an ATIF step's tool calls; None when the step has none."""
    if not step:
        return None
    calls = step.get("tool_calls")
    if not isinstance(calls, list):
        return None
    out = []
    for call in calls:
        if not isinstance(call, dict):
            continue
        name = call.get("function_name") or call.get("name") or "?"
        args = call.get("arguments") or {}
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                args = {"raw": args}
        if name == "bash_command" and isinstance(args, dict):
            extra = f"   (wait {args['duration']} s)" if "duration" in args else ""
            out.append(_visible(str(args.get("keystrokes", ""))) + extra)
        else:
            out.append(f"[{name}]" + (f" {json.dumps(args)}" if args else ""))
    return out


def step_observation(step: dict[str, Any] | None) -> str | None:
    """The observation text of an ATIF step (several shapes tolerated)."""
    if not step:
        return None
    obs = step.get("observation")
    if isinstance(obs, str):
        return obs
    if isinstance(obs, dict):
        results = obs.get("results")
        if isinstance(results, list):
            parts = [r.get("content", "") if isinstance(r, dict) else str(r) for r in results]
            return "\n".join(str(p) for p in parts)
        for key in ("content", "text"):
            if isinstance(obs.get(key), str):
                return obs[key]
    return None


def _first_arg(span: Span) -> str:
    args = span.args
    return next(iter(args.values()), "") if args else ""


def _capture_text(span: Span) -> str:
    """A capture's text, tagged with what was captured (the whole scrollback or the visible screen)."""
    entire = span.args.get("entire") in ("True", "true", "1")
    return f"[{'scrollback' if entire else 'screen'}] " + (span.result or "")


def _span_actions(spans: list[Span]) -> list[str]:
    return [f"(parser) {s.result}" for s in spans if s.stage == "parse" and s.result]


# ---------------------------------------------------------------------------------------------- views
def render_steps(trace: TrialTrace, *, max_lines: int | None = 6, width: int | None = 140,
                 episode: int | None = None) -> str:
    """The aligned per-step view."""
    out = [f"trial {trace.trial_id or '?'} · {len(trace.spans)} spans · {len(trace.steps)} trajectory steps"
           + (f" · {trace.bad_lines} unreadable span lines" if trace.bad_lines else "")]
    episodes = trace.episodes() if episode is None else [episode]
    for ep in episodes:
        spans = trace.in_episode(ep)
        steps = trace.steps_for_episode(ep)
        step = steps[-1] if steps else None
        model = [s for s in spans if s.stage == "model"]
        head = f"━━ episode {ep}"
        if step is not None and "step_id" in step:
            head += f" · step {step['step_id']}"
        if model:
            m = model[0]
            tokens = (m.attributes.get("gen_ai.usage.input_tokens"), m.attributes.get("gen_ai.usage.output_tokens"))
            head += f" · model {m.duration_ms / 1000:.2f} s"
            if tokens[0] is not None:
                head += f" · {tokens[0]}→{tokens[1]} tokens"
        out.append("")
        out.append(head + " " + "━" * max(0, 60 - len(head)))
        actions = step_actions(step)
        out += _block("model asked", actions if actions is not None else _span_actions(spans), max_lines, width)
        out += _block("dispatched", [_visible(_first_arg(s)) for s in spans if s.stage == "dispatch"],
                      max_lines, width)
        out += _block("came back", [_capture_text(s) for s in spans if s.stage == "capture"], max_lines, width)
        shown = step_observation(step)
        if shown is None:
            shown_items = [s.result or "" for s in spans if s.stage == "observation"]
        else:
            shown_items = [shown]
        out += _block("model shown", shown_items, max_lines, width)
        errors = [f"{s.boundary}: {(s.exception or {}).get('exception.type', '?')}: "
                  f"{(s.exception or {}).get('exception.message', s.data.status_message)}"
                  for s in trace.exceptions(ep)]
        if errors:
            out += _block("✗ errors", errors, max_lines, width)
    orphans = [s for s in trace.spans if s.episode is None and s.is_error]
    if orphans:
        out.append("")
        out += _block("✗ outside", [f"{s.boundary}: {s.data.status_message}" for s in orphans], max_lines, width)
    return "\n".join(out)


def render_tree(trace: TrialTrace, *, width: int | None = 140) -> str:
    """Every span as an indented tree with duration, episode and errors."""
    out: list[str] = []

    def visit(s: Span, depth: int) -> None:
        mark = " ✗" if s.is_error else ""
        ep = f" ep={s.episode}" if s.episode is not None else ""
        line = f"{'  ' * depth}{s.boundary}{ep} {s.duration_ms:.2f} ms{mark}"
        out.append(line if width is None or len(line) <= width else line[: width - 1] + "…")
        for c in s.children:
            visit(c, depth + 1)

    for root in trace.roots:
        visit(root, 0)
    return "\n".join(out)
