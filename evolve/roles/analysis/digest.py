"""A trial's digest: its detector hits in episode order, cached beside the trial (``digest.json``).

The cache is keyed by a stamp of the files it was computed from (size and mtime of the rich trajectory,
``spans.jsonl``, ``result.json``) and the digest format version; a changed trial is digested again. The
trajectory-only digest of the ablation is cached separately (``digest-trajectory.json``). A trial folder that
cannot be written (a read-only corpus) is digested without caching.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from pydantic import ValidationError

from evolve.roles.analysis.detectors import DETECTORS, run_detectors
from evolve.roles.analysis.models import DIGEST_VERSION, Digest
from evolve.roles.analysis.trial_view import Mode, TrialView
from monitor.store import SPANS_FILENAME, find_agent_dir, rich_trajectory_path

log = logging.getLogger(__name__)

CACHE_NAMES = {"full": "digest.json", "trajectory": "digest-trajectory.json"}


class DigestError(ValueError):
    """A folder that is not a trial (nothing to digest)."""


def trial_folder(path: str | Path) -> Path:
    """The trial folder for a trial folder or its ``agent/`` folder."""
    agent = find_agent_dir(Path(path))
    return agent.parent if agent.name == "agent" else Path(path)


def source_stamp(folder: Path) -> str:
    agent = find_agent_dir(folder)
    parts = [f"v{DIGEST_VERSION}", ",".join(sorted(DETECTORS))]
    for path in (rich_trajectory_path(agent), agent / SPANS_FILENAME, folder / "result.json"):
        try:
            st = path.stat()
            parts.append(f"{path.name}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            parts.append(f"{path.name}:-")
    return "|".join(parts)


def compute_digest(folder: str | Path, mode: Mode = "full") -> Digest:
    """Run the detectors over one trial (no cache)."""
    folder = trial_folder(folder)
    agent = find_agent_dir(folder)
    if not rich_trajectory_path(agent).is_file() and not (agent / SPANS_FILENAME).is_file():
        raise DigestError(f"{folder}: no trajectory or {SPANS_FILENAME} (not a trial folder?)")
    view = TrialView(folder, mode)
    return Digest(trial=view.name, task=view.task, status=view.status, outcome=view.outcome,
                  episodes=len(view.episodes), mode=mode, source_stamp=source_stamp(folder),
                  hits=run_detectors(view), notes=view.notes)


def digest(folder: str | Path, mode: Mode = "full", *, refresh: bool = False) -> Digest:
    """The digest of a trial, from its cache when the trial has not changed since."""
    folder = trial_folder(folder)
    cache = folder / CACHE_NAMES[mode]
    stamp = source_stamp(folder)
    if cache.is_file() and not refresh:
        try:
            cached = Digest.model_validate_json(cache.read_text(encoding="utf-8"))
            if cached.source_stamp == stamp and cached.mode == mode:
                return cached
        except (OSError, ValidationError, ValueError) as exc:
            log.info("digest cache %s unreadable (%s); recomputing", cache, exc)
    result = compute_digest(folder, mode)
    try:
        tmp = cache.with_name(cache.name + f".{os.getpid()}.tmp")
        tmp.write_text(result.model_dump_json(indent=1), encoding="utf-8")
        tmp.replace(cache)  # atomic: a reader never sees half a digest
    except OSError as exc:
        log.info("digest of %s not cached: %s", folder, exc)
    return result


def render_digest(d: Digest, *, behaviours: bool = True, width: int = 160) -> str:
    """The digest as text: a header line, then one line per hit (episode, detector, behaviour, summary)."""
    head = (f"{d.trial}  task={d.task or '?'}  status={d.status or '?'}  outcome={d.outcome or '?'}  "
            f"episodes={d.episodes}  hits={len(d.hits)}" + ("  (trajectory only)" if d.mode == "trajectory" else ""))
    lines = [head]
    for h in d.hits:
        where = "run" if h.episode is None else f"ep{h.episode}"
        labels = list(dict.fromkeys(" ".join(x for x in (f"step{r.step}" if r.step is not None else "",
                                                           f"span {r.span}" if r.span else "") if x)
                                    for r in h.evidence[:4] if r.step is not None or r.span))
        refs = ", ".join(lb for lb in labels if not any(o.startswith(lb + " ") for o in labels))
        tag = f"{h.detector} [{h.behaviour}]" if behaviours else h.detector
        line = f"  {where:>5}  {tag}: {h.summary}" + (f"  <{refs}>" if refs else "")
        lines.append(line if len(line) <= width else line[: width - 1] + "…")
    if not d.hits:
        lines.append("  (no detector fired)")
    lines.extend(f"  note: {n}" for n in d.notes)
    return "\n".join(lines)
