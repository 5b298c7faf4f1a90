"""Detectors on trial folders of the seed with the real bundled model (issue 12: a hit on real trial folders where
the pattern occurs). The folders are checked in, redacted (``tests/data/analysis/redact.py``):

- ``bundled-1.5b/``: the v0 reference corpus of ``scripts/run.sh``'s experiment (2026-12-03);
- ``bundled-1.5b-ab/``: three trials of the before/after grids of the first-prompt change (2026-12-04,
  ``harness_seed/DIFFERENCES.md``, Prompts): ``before/`` is the seed with the earlier first prompt, ``after/``
  today's seed.

The folders are fixed data, so each expectation below is what the detectors must find in them (the patterns were
read off the trajectories by hand), not a guess about what a model does. Every hit's evidence must point at a
step, episode and span that exist in that trial."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from evolve.roles.analysis.digest import digest
from evolve.roles.analysis.evidence import TraceIndex, check_ref

REAL = Path(__file__).resolve().parent / "data" / "analysis" / "trials"

# trial folder -> detectors that must hit there (at least once), with the pattern seen in the trajectory
EXPECTED = {
    # the model typed the next command while the previous one still ran, sent the same command three times, and
    # wrapped its JSON in prose
    "bundled-1.5b/count-lines__r1": {"keys_while_running", "repeated_commands", "parse_warning"},
    "bundled-1.5b/hello-file__r2": {"parse_warning"},
    # 10 s waits with the prompt back at once, then the episode limit
    "bundled-1.5b-ab/before/count-lines__r1": {"long_idle_wait", "max_episodes", "parse_warning"},
    # the model typed `exit`: the session ended by the agent's own keys (scored failed, not ⊥)
    "bundled-1.5b-ab/before/write-json__r2": {"session_lost", "harness_exception", "parse_warning"},
    "bundled-1.5b-ab/after/write-json__r1": {"max_episodes", "parse_warning"},
}


@pytest.mark.parametrize("trial", sorted(EXPECTED))
def test_detectors_hit_where_the_pattern_occurs_in_real_trials(trial, tmp_path):
    import shutil

    folder = tmp_path / Path(trial).name
    shutil.copytree(REAL / trial, folder)  # the digest cache is written beside the trial: keep the data clean
    d = digest(folder, refresh=True)
    found = Counter(h.detector for h in d.hits)
    missing = EXPECTED[trial] - set(found)
    assert not missing, f"{trial}: {sorted(missing)} did not fire (fired: {dict(found)})"
    index = {folder.name: TraceIndex.load(folder)}
    bad = [p for h in d.hits for r in h.evidence if (p := check_ref(r, index))]
    assert not bad, f"{trial}: hits cite what the trace does not have: {bad[:3]}"


def test_the_agents_own_exit_reads_as_such():
    d = digest(REAL / "bundled-1.5b-ab" / "before" / "write-json__r2", refresh=True)
    [hit] = [h for h in d.hits if h.detector == "session_lost"]
    assert d.outcome == "session_ended" and "the agent's keys ended the tmux session" in hit.summary
