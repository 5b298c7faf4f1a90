"""Model calls in a trial's spans: each recorded call's timings (``rise.inference.*`` attributes, written by
:mod:`monitor.instrument` from the call's :class:`trials.harness_api.CallTimings`), their sum, and a table."""

from __future__ import annotations

from pydantic import ValidationError

from trials.harness_api import CallTimings, InferenceSummary

from .store import Span, TrialTrace

PREFIX = "rise.inference."


def timings_of(span: Span) -> CallTimings | None:
    """The call timings a model-call span recorded (None: a span from before they were recorded, or none)."""
    fields = {k.removeprefix(PREFIX): v for k, v in span.attributes.items() if k.startswith(PREFIX)}
    if not fields:
        return None
    try:
        return CallTimings.model_validate(fields)
    except ValidationError:
        return None


def model_calls(trace: TrialTrace) -> list[tuple[Span, CallTimings]]:
    """Every recorded model call with timings, in start order."""
    found = [(s, t) for s in trace.spans if s.is_genai and (t := timings_of(s)) is not None]
    return sorted(found, key=lambda pair: pair[0].start_ns)


def summary_of(trace: TrialTrace) -> InferenceSummary:
    """The calls' sum, rebuilt from the spans (what ``result.json`` holds, also for a trial killed before the
    monitor could write its stats)."""
    summary = InferenceSummary()
    for _, t in model_calls(trace):
        summary.add(t)
    return summary


def _ms(x: float | None) -> str:
    return "—" if x is None else f"{x / 1000:.1f}"


def render_calls(trace: TrialTrace) -> str:
    """One line per model call: episode, boundary, seconds of wall / prefill / decode / waiting, tokens
    prefilled and cached, the cache hit ratio and the decode speed."""
    head = f"{'ep':>3} {'call':<34} {'wall':>6} {'prefill':>7} {'decode':>6} {'wait':>6} {'prompt':>7} " \
           f"{'cached':>7} {'hit':>5} {'dec tok/s':>9}"
    lines = [head]
    for span, t in model_calls(trace):
        hit = "—" if t.cache_hit_ratio is None else f"{100 * t.cache_hit_ratio:.0f}%"
        rate = "—" if t.decode_tok_s is None else f"{t.decode_tok_s:.1f}"
        episode = "—" if span.episode is None else str(span.episode)
        lines.append(f"{episode:>3} {span.boundary.split(':')[-1][:34]:<34} {_ms(t.wall_ms):>6} {_ms(t.prompt_ms):>7} "
                     f"{_ms(t.predicted_ms):>6} {_ms(t.queue_ms):>6} {t.prompt_n if t.prompt_n is not None else '—':>7} "
                     f"{t.cache_n if t.cache_n is not None else '—':>7} {hit:>5} {rate:>9}")
    if len(lines) == 1:
        return "no model call in these spans has timings (recorded from this version on)"
    return "\n".join(lines)
