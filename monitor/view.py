"""Text views of a dual trace: the aligned per-step view of ``rise trace show`` and a span tree.

Per step (episode): what the model asked for (parsed actions of the trajectory step, else the parser span),
what the harness dispatched (``send_keys`` spans), what came back (``capture`` spans) and what the model was
shown next (the step's observation, else the ``build_observation`` span) — so a command that was never sent,
or output cut before the model saw it, is visible at a glance.
"""

from __future__ import annotations

import ast
import json
import re
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


def step_thoughts(step: dict[str, Any] | None) -> tuple[str | None, str | None]:
    """The analysis and plan of an agent step: recorded by the harness in ``extra``, else read from the reply
    (a JSON object or XML tags); (None, None) when the reply has neither."""
    if not step:
        return None, None
    extra = step.get("extra") if isinstance(step.get("extra"), dict) else {}
    analysis, plan = extra.get("analysis"), extra.get("plan")
    if analysis is None and plan is None and isinstance(step.get("message"), str):
        text = step["message"]
        start, end = text.find("{"), text.rfind("}")
        if 0 <= start < end:
            try:
                obj = json.loads(text[start:end + 1])
            except ValueError:
                obj = None
            if isinstance(obj, dict):
                analysis, plan = obj.get("analysis"), obj.get("plan")
        if analysis is None and plan is None:
            found = {tag: re.search(rf"<{tag}>(.*?)(?:</{tag}>|$)", text, re.DOTALL) for tag in ("analysis", "plan")}
            analysis, plan = (m.group(1).strip() if m else None for m in found.values())
    return (str(analysis) if analysis is not None else None), (str(plan) if plan is not None else None)


_PY_STR = r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\""  # a quoted str literal as repr() writes it


def _repr_field(text: str, name: str) -> str | None:
    """A string field out of a dataclass repr (``Observation(text='...')``), for spans without a step."""
    m = re.search(rf"\b{name}=({_PY_STR})", text)
    if not m:
        return None
    try:
        return str(ast.literal_eval(m.group(1)))
    except (ValueError, SyntaxError):
        return None


def _first_arg(span: Span) -> str:
    args = span.args
    return next(iter(args.values()), "") if args else ""


def _capture_text(span: Span) -> str:
    """A capture's text, tagged with what was captured (the whole scrollback or the visible screen)."""
    entire = span.args.get("entire") in ("True", "true", "1")
    return f"[{'scrollback' if entire else 'screen'}] " + (span.result or "")


def _span_actions(spans: list[Span]) -> list[str]:
    """What the parser returned, from its spans (no trajectory step): keystrokes, else its error, never a repr."""
    out = []
    for s in spans:
        if s.stage != "parse" or not s.result:
            continue
        keys = re.findall(rf"keystrokes=({_PY_STR})", s.result)
        if keys:
            out += [_visible(str(ast.literal_eval(k))) for k in keys]
        elif (error := _repr_field(s.result, "error")) is not None:
            out.append(f"(parse error) {error}")
        elif "(" not in s.result[:40]:
            out.append(s.result)
        if "task_complete=True" in s.result:
            out.append("[mark_task_complete]")
    return out


def _span_observation(span: Span) -> str:
    return _repr_field(span.result or "", "text") or ("" if (span.result or "").startswith("Observation(")
                                                      else span.result or "")


# ---------------------------------------------------------------------------------------------- views
def _split(span: Span) -> str:
    """`` (prefill 60.1 s, decode 9.3 s, wait 2.0 s, cache 12%)`` from a model call's recorded timings."""
    a = span.attributes
    parts = [f"{label} {a[key] / 1000:.1f} s" for label, key in (
        ("prefill", "rise.inference.prompt_ms"), ("decode", "rise.inference.predicted_ms"),
        ("wait", "rise.inference.queue_ms")) if isinstance(a.get(key), (int, float))]
    if isinstance(a.get("rise.inference.cache_hit_ratio"), (int, float)):
        parts.append(f"cache {100 * a['rise.inference.cache_hit_ratio']:.0f}%")
    return f" ({', '.join(parts)})" if parts else ""


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
        extra = step.get("extra") if step and isinstance(step.get("extra"), dict) else {}
        head = f"━━ episode {ep}"
        if step is not None and "step_id" in step:
            head += f" · step {step['step_id']}"
        if extra.get("summarization"):
            head += f" · SUMMARIZED ({extra['summarization']})"
        if model:
            m = model[0]
            tokens = (m.attributes.get("gen_ai.usage.input_tokens"), m.attributes.get("gen_ai.usage.output_tokens"))
            head += f" · model {m.duration_ms / 1000:.2f} s" + _split(m)
            if tokens[0] is not None:
                head += f" · {tokens[0]}→{tokens[1]} tokens"
        out.append("")
        out.append(head + " " + "━" * max(0, 60 - len(head)))
        analysis, plan = step_thoughts(step)
        if analysis:
            out += _block("analysis", [analysis], max_lines, width)
        if plan:
            out += _block("plan", [plan], max_lines, width)
        if extra.get("parse_error"):
            out += _block("✗ parse error", [str(extra["parse_error"])], max_lines, width)
            out += _block("model replied", [str(step.get("message") or "")], max_lines, width)
        if extra.get("warnings"):
            out += _block("warnings", [str(w) for w in extra["warnings"]], max_lines, width)
        actions = step_actions(step)
        out += _block("model asked", actions if actions is not None else _span_actions(spans), max_lines, width)
        out += _block("dispatched", [_visible(_first_arg(s)) for s in spans if s.stage == "dispatch"],
                      max_lines, width)
        captures = [s for s in spans if s.stage == "capture"]
        if max_lines is not None:  # clipped view: the screen; the scrollback repeats it (see --full)
            captures = [s for s in captures if s.args.get("entire") not in ("True", "true", "1")] or captures
        out += _block("came back", [_capture_text(s) for s in captures], max_lines, width)
        shown = step_observation(step)
        if shown is None:
            shown_items = [_span_observation(s) for s in spans if s.stage == "observation"]
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


def episode_records(trace: TrialTrace, episode: int | None = None) -> list[dict[str, Any]]:
    """The raw form behind the step view: per episode its trajectory steps and its spans, JSON-ready."""
    out = []
    for ep in trace.episodes() if episode is None else [episode]:
        out.append({"episode": ep, "steps": trace.steps_for_episode(ep), "spans": [
            {"boundary": s.boundary, "stage": s.stage, "span_id": format(s.data.span_id, "016x"),
             "ms": round(s.duration_ms, 3), "args": s.args, "return": s.result, "exception": s.exception}
            for s in trace.in_episode(ep)]})
    return out


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
