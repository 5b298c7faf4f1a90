"""Detectors: deterministic functions over a trial's dual trace, each naming the Handbook behaviour it concerns.

A detector reads a :class:`TrialView` and returns :class:`Hit` objects with evidence references (trial,
episode, ATIF step, span id). ``needs_spans`` detectors read what only the harness recorded and are left out in
``trajectory`` mode (the ``--no-harness-evidence`` ablation); the others read the rich trajectory and add span
ids when spans were loaded. Behaviour ids are those of the seed Handbook; the digest maps them onto an evolved
Handbook through the span lookup when an id is gone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from evolve.roles.analysis.models import Hit
from evolve.roles.analysis.trial_view import Episode, TrialView, is_prompt_line, last_line, typed_at_prompt

LONG_WAIT_SEC = 10.0  # a wait this long after a command that had already finished is idle time
STUCK_REPEATS = 3  # the same commands this many episodes in a row is a loop
LIMIT_MARKER = "[... output limited to"
# A trial whose prefill plus waiting for the model server took at least this share of its time spent it on
# re-reading its prompt and queueing, not on its work: a harness cost (prompt size, cache reuse, concurrent calls).
PREFILL_WAIT_SHARE = 0.5
# tmux key names sent on purpose without Enter (C-c, Escape, q to leave a pager...)
_KEY_NAME = re.compile(r"^(?:[CMS]-\S+|Escape|Enter|Tab|BSpace|Up|Down|Left|Right|PageUp|PageDown|Home|End|"
                       r"F\d+|\S)$")
_INTERRUPTS = {"C-c", "C-d", "C-z", "C-\\", "q", "Escape", ""}
ERROR_PATTERN = re.compile(
    r"command not found|No such file or directory|Traceback \(most recent call last\)|Permission denied|"
    r"syntax error|\bError\b|\berror:|\bFAILED\b|\bcannot\b|Exception\b|exit status [1-9]", re.IGNORECASE)
_RUNNERS = r"(?:python3?|bash|sh|make|pytest|node|npm|npx|cargo|go|ruby|perl|java|gcc|cc|\./\S+)"
_INVOCATION = re.compile(rf"^{_RUNNERS}(?:\s+\S+)+$")


@dataclass(frozen=True)
class Detector:
    name: str
    behaviour: str
    description: str
    fn: Callable[[TrialView], list[Hit]]
    needs_spans: bool = False


DETECTORS: dict[str, Detector] = {}


def detector(name: str, behaviour: str, description: str, needs_spans: bool = False):
    """Register a detector function under ``name``."""
    def register(fn: Callable[[TrialView], list[Hit]]) -> Callable[[TrialView], list[Hit]]:
        DETECTORS[name] = Detector(name, behaviour, description, fn, needs_spans)
        return fn
    return register


def _hit(view: TrialView, name: str, ep: Episode | None, summary: str, refs=None, behaviour: str | None = None,
         **details) -> Hit:
    return Hit(detector=name, behaviour=behaviour or DETECTORS[name].behaviour,
               episode=ep.index if ep is not None else None, summary=summary[:300],
               evidence=refs if refs is not None else ([view.ref(ep.index, ep.step_id)] if ep else [view.ref()]),
               details=details)


def _keys_span(keys: str):
    return lambda s: keys[:40] in s.args.get("keys", "")


# --------------------------------------------------------------------------------------------- parsing
@detector("parse_error", "parse.json", "the reply could not be parsed: nothing ran, the model was asked again")
def parse_error(view: TrialView) -> list[Hit]:
    out = []
    for ep in view.episodes:
        error = ep.extra.get("parse_error")
        if error:
            out.append(_hit(view, "parse_error", ep, f"parse error: {error}",
                            view.refs(ep, "parsing:parse_response"), behaviour=f"parse.{view.format}"))
    return out


@detector("parse_warning", "parse.feedback", "the reply parsed with warnings, fed back in the next prompt")
def parse_warning(view: TrialView) -> list[Hit]:
    out = []
    for ep in view.episodes:
        warnings = [w for w in ep.extra.get("warnings") or [] if not str(w).startswith("AUTO-CORRECTED")]
        if warnings:
            out.append(_hit(view, "parse_warning", ep, "; ".join(map(str, warnings)),
                            view.refs(ep, "parsing:parse_response"), count=len(warnings)))
    return out


@detector("auto_fix", "parse.json", "the parser repaired the reply (AUTO-CORRECTED)")
def auto_fix(view: TrialView) -> list[Hit]:
    out = []
    for ep in view.episodes:
        fixes = [w for w in ep.extra.get("warnings") or [] if str(w).startswith("AUTO-CORRECTED")]
        if fixes:
            out.append(_hit(view, "auto_fix", ep, "; ".join(map(str, fixes)), view.refs(ep, "parsing:parse_response"),
                            behaviour=f"parse.{view.format}"))
    return out


# --------------------------------------------------------------------------------------------- dispatch
@detector("keys_without_newline", "dispatch.commands",
          "keystrokes without a trailing newline were left unexecuted on the prompt line")
def keys_without_newline(view: TrialView) -> list[Hit]:
    out = []
    for ep in view.episodes:
        if not ep.commands:
            continue
        keys = ep.commands[-1][0]
        typed = keys.strip()
        if not typed or keys.endswith("\n") or _KEY_NAME.match(typed):
            continue
        terminal = ep.terminal
        on_screen = None if terminal is None else typed_at_prompt(last_line(terminal))
        if on_screen is not None and on_screen.endswith(typed[-60:]):
            out.append(_hit(view, "keys_without_newline", ep, f"typed but not run: {typed[:120]!r}",
                            view.refs(ep, "tmux:TmuxSession.send_keys", match=_keys_span(keys)),
                            keys=typed[:200]))
    return out


@detector("keys_while_running", "dispatch.commands",
          "keys were sent while the previous command was still running (no prompt on the screen)")
def keys_while_running(view: TrialView) -> list[Hit]:
    out = []
    for prev, ep in zip(view.episodes, view.episodes[1:]):
        terminal = prev.terminal
        if terminal is None or prev.extra.get("timed_out") or not ep.commands or not last_line(terminal):
            continue
        typed = typed_at_prompt(last_line(terminal))
        if typed == "":
            continue  # a bare prompt: the shell was waiting for input
        if typed is not None and not (prev.commands and prev.commands[-1][0].endswith("\n")):
            continue  # typed but never run (keys_without_newline), not a running command
        keys = ep.commands[0][0]
        if keys.strip() in _INTERRUPTS:
            continue
        out.append(_hit(view, "keys_while_running", ep,
                        f"screen ended with {last_line(terminal)[-80:]!r} (no prompt); sent {keys.strip()[:80]!r}",
                        [view.ref(prev.index, prev.step_id)]
                        + view.refs(ep, "tmux:TmuxSession.send_keys", match=_keys_span(keys))))
    return out


@detector("command_timeout", "dispatch.blocking", "a blocking command did not finish within its limit")
def command_timeout(view: TrialView) -> list[Hit]:
    return [_hit(view, "command_timeout", ep, "command timed out",
                 view.refs(ep, "tmux:TmuxSession.send_keys", match=lambda s: s.is_error))
            for ep in view.episodes if ep.extra.get("timed_out")]


@detector("long_idle_wait", "dispatch.commands",
          f"the harness waited {LONG_WAIT_SEC:g} s or more after commands that had already finished")
def long_idle_wait(view: TrialView) -> list[Hit]:
    out = []
    for ep in view.episodes:
        waited = sum(d for _, d in ep.commands)
        exec_sec = float((ep.extra.get("timings") or {}).get("exec_sec") or 0.0)
        terminal = ep.terminal
        if max(waited, exec_sec) < LONG_WAIT_SEC or terminal is None or ep.extra.get("timed_out"):
            continue
        if is_prompt_line(last_line(terminal)) and not typed_at_prompt(last_line(terminal)):
            out.append(_hit(view, "long_idle_wait", ep,
                            f"waited {max(waited, exec_sec):.1f} s; the prompt was back at the end",
                            view.refs(ep, "loop:Agent.execute_commands"), requested_sec=round(waited, 2),
                            exec_sec=round(exec_sec, 2)))
    return out


# --------------------------------------------------------------------------------------------- observation
def _cut_by_limit(span) -> bool:
    """A limit_output span that cut its text: the marker in its return, or (the capture itself being cut, as the
    monitor notes with ``…[N chars]``) a text longer than the limit."""
    if LIMIT_MARKER in (span.result or ""):
        return True
    m = re.search(r"…\[(\d+) chars\]$", span.args.get("text", ""))
    limit = span.args.get("limit", "")
    return bool(m and limit.isdigit() and int(m.group(1)) > int(limit))


@detector("observation_truncated", "observe.truncate", "the observation was cut to its byte limit")
def observation_truncated(view: TrialView) -> list[Hit]:
    return [_hit(view, "observation_truncated", ep, "output limited: interior bytes omitted",
                 view.refs(ep, "observation:limit_output", match=_cut_by_limit))
            for ep in view.episodes if LIMIT_MARKER in (ep.observation or "")]


# --------------------------------------------------------------------------------------------- completion
def _last_command_output(terminal: str) -> str:
    """The output of the last command on the screen: lines after the last typed command line, prompt excluded."""
    lines = [ln for ln in terminal.splitlines() if ln.strip()]
    starts = [i for i, ln in enumerate(lines) if typed_at_prompt(ln)]
    if not starts:
        return "\n".join(ln for ln in lines if not is_prompt_line(ln))
    return "\n".join(ln for ln in lines[starts[-1] + 1:] if not is_prompt_line(ln))


@detector("claim_after_error", "completion.handshake",
          "completion was claimed while the last command had failed or printed an error")
def claim_after_error(view: TrialView) -> list[Hit]:
    previous: Episode | None = None
    for ep in view.episodes:
        if ep.claimed:
            # the claiming step's own commands ran first; otherwise the model judged the previous screen
            seen = ep if ep.commands and ep.terminal else previous
            terminal = seen.terminal if seen is not None else None
            output = _last_command_output(terminal) if terminal else ""
            m = ERROR_PATTERN.search(output)
            if m:
                line = next(ln for ln in output.splitlines() if m.group(0) in ln)
                refs = ([view.ref(seen.index, seen.step_id)] if seen is not ep else []) + \
                    view.refs(ep, "completion:CompletionHandshake.on_reply")
                return [_hit(view, "claim_after_error", ep, f"claimed after: {line.strip()[:160]!r}", refs)]
        previous = ep
    return []


def named_invocations(instruction: str) -> list[str]:
    """Commands the instruction names (code spans and fenced lines that start with a runner)."""
    spans = re.findall(r"`([^`\n]+)`", instruction.replace("```", "\n"))
    fenced = [ln.strip() for block in re.findall(r"```[^\n]*\n(.*?)```", instruction, re.DOTALL)
              for ln in block.splitlines()]
    out = []
    for text in [*fenced, *spans]:
        last = text.split("&&")[-1].strip()
        if _INVOCATION.match(last):
            key = " ".join(last.split()[:2])  # the program and its target: arguments vary on purpose
            if key not in out:
                out.append(key)
    return out


@detector("claim_without_invocation", "completion.handshake",
          "completion was claimed without running an invocation the instruction names")
def claim_without_invocation(view: TrialView) -> list[Hit]:
    claims = [ep for ep in view.episodes if ep.claimed]
    if not claims:
        return []
    typed = " ".join(" ".join(k.split()) for ep in view.episodes for k, _ in ep.commands)
    missing = [inv for inv in named_invocations(view.instruction) if inv not in typed]
    if not missing:
        return []
    return [_hit(view, "claim_without_invocation", claims[0], f"never ran {', '.join(missing)}",
                 view.refs(claims[0], "completion:CompletionHandshake.on_reply"), missing=", ".join(missing))]


# --------------------------------------------------------------------------------------------- loop
@detector("repeated_commands", "loop.episodes",
          f"the same commands {STUCK_REPEATS} or more episodes in a row (a stuck loop)")
def repeated_commands(view: TrialView) -> list[Hit]:
    out, run = [], []
    for ep in [*view.episodes, None]:
        key = None if ep is None else "\n".join(" ".join(k.split()) for k, _ in ep.commands)
        if run and key == run[0][1] and key:
            run.append((ep, key))
            continue
        if len(run) >= STUCK_REPEATS:
            first = run[0][0]
            out.append(_hit(view, "repeated_commands", first,
                            f"{len(run)} episodes in a row sent {run[0][1][:100]!r}",
                            [view.ref(e.index, e.step_id) for e, _ in run], repeats=len(run)))
        run = [(ep, key)] if ep is not None else []
    return out


@detector("max_episodes", "loop.episodes", "the run stopped at the episode limit")
def max_episodes(view: TrialView) -> list[Hit]:
    if view.outcome != "max_episodes":
        return []
    last = view.episodes[-1] if view.episodes else None
    return [_hit(view, "max_episodes", last, f"stopped after {len(view.episodes)} episodes (limit reached)")]


@detector("session_lost", "dispatch.session", "the tmux session disappeared during the run")
def session_lost(view: TrialView) -> list[Hit]:
    # the seed ends such a run as ``session_ended`` (the agent's own keys, e.g. ``exit``, ended the shell);
    # ``session_lost`` is the older name, still read from earlier trial folders
    ended = view.outcome == "session_ended" or view.agent_result.get("error_kind") == "session_ended"
    if view.outcome != "session_lost" and not ended:
        return []
    last = view.episodes[-1] if view.episodes else None
    what = ("the agent's keys ended the tmux session (it typed exit or closed the shell); the run stopped" if ended
            else "the tmux session was gone; the run stopped")
    return [_hit(view, "session_lost", last, what)]


# --------------------------------------------------------------------------------------------- context
def _subcall_error(view: TrialView, name: str) -> str | None:
    try:
        record = json.loads((view.agent_dir / name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return f"{name} missing or unreadable"
    return record.get("error")


@detector("summarization", "context.proactive", "the context was summarized (and whether a sub-call failed)")
def summarization(view: TrialView) -> list[Hit]:
    out = []
    for ep in view.episodes:
        reason = ep.extra.get("summarization")
        if not reason:
            continue
        errors = [e for e in (_subcall_error(view, f) for f in ep.extra.get("summarization_files") or []) if e]
        failed = bool(errors) or ep.step.get("extra", {}).get("finish_reason") == "fallback"
        behaviour = "context.summary" if failed else ("context.overflow" if reason == "overflow"
                                                      else "context.proactive")
        out.append(_hit(view, "summarization", ep, f"{reason} summarization" + (
            f" failed: {errors[0][:120]}" if errors else " failed" if failed else ""),
            view.refs(ep, "context:ContextManager.summarize"), behaviour=behaviour, failed=failed, reason=reason))
    return out


@detector("output_length", "context.output_length", "the reply was cut at the output token limit")
def output_length(view: TrialView) -> list[Hit]:
    return [_hit(view, "output_length", ep, "reply cut at max_tokens",
                 view.refs(ep, "model_call:ModelCaller.call"))
            for ep in view.episodes if ep.extra.get("finish_reason") == "length"]


# --------------------------------------------------------------------------------------------- model
@detector("model_errors", "model.call", "model requests failed and were retried (or gave up)")
def model_errors(view: TrialView) -> list[Hit]:
    failed = [r for r in view.final_extra.get("requests") or [] if isinstance(r, dict) and r.get("error")]
    out = []
    if failed:
        out.append(_hit(view, "model_errors", None, f"{len(failed)} failed model request(s): {failed[0]['error']}",
                        [view.ref()], failures=len(failed)))
    for ep in view.episodes:
        if ep.extra.get("finish_reason") == "fallback":
            out.append(_hit(view, "model_errors", ep, "model call failed after summarizing; fallback reply used",
                            view.refs(ep, "model_call:ModelCaller.call")))
    kind = view.agent_result.get("error_kind") or view.result.get("agent_error_kind")
    if kind in ("model_unreachable", "model_error"):
        out.append(_hit(view, "model_errors", None, f"the run ended with {kind}", [view.ref()]))
    return out


@detector("model_time", "context.proactive", "most of the trial's time went to prefilling prompts or to "
          "waiting for the model server", needs_spans=True)
def model_time(view: TrialView) -> list[Hit]:
    # the figures reach result.json through the monitor, hence needs_spans (the no-harness-evidence ablation)
    split = view.time_split()
    if split is None:
        return []
    prefill, waiting = split.share("prefill") or 0.0, split.share("waiting") or 0.0
    if prefill + waiting < PREFILL_WAIT_SHARE:
        return []
    hit = split.inference.cache_hit_ratio
    cache = "unknown" if hit is None else f"{100 * hit:.0f}%"
    worst = view.slowest_model_call()
    refs = [view.ref()] + ([view.ref(worst.episode, None, worst)] if worst is not None else [])
    return [_hit(view, "model_time", None,
                 f"{100 * (prefill + waiting):.0f}% of the trial's time went to prefill ({100 * prefill:.0f}%, "
                 f"{split.prefill:.0f} s) and waiting for the model server ({100 * waiting:.0f}%, "
                 f"{split.waiting:.0f} s); prompt cache hits {cache}", refs,
                 behaviour="context.proactive" if prefill >= waiting else "model.call",
                 prefill_sec=round(split.prefill, 1), waiting_sec=round(split.waiting, 1),
                 share=round(prefill + waiting, 3), cache_hit_ratio=hit)]


@detector("harness_exception", "loop.process", "a recorded harness function raised", needs_spans=True)
def harness_exception(view: TrialView) -> list[Hit]:
    out, seen = [], set()
    for span in view.error_spans():  # innermost first: a re-raise up the stack is the same exception
        exc = span.exception or {}
        text = f"{exc.get('exception.type', 'error')}: {str(exc.get('exception.message', ''))[:160]}"
        if (span.episode, text) in seen:
            continue
        seen.add((span.episode, text))
        ep = next((e for e in view.episodes if e.index == span.episode), None)
        out.append(Hit(detector="harness_exception", behaviour="loop.process", episode=span.episode,
                       summary=f"{span.boundary} raised {text}",
                       evidence=[view.ref(span.episode, ep.step_id if ep else None, span)],
                       details={"boundary": span.boundary}))
    return out


def run_detectors(view: TrialView) -> list[Hit]:
    """All detectors that apply in the view's mode, hits in episode order (run-level hits first)."""
    hits = []
    for d in DETECTORS.values():
        if d.needs_spans and view.trace is None:
            continue
        hits.extend(d.fn(view))
    return sorted(hits, key=lambda h: (-1 if h.episode is None else h.episode))
