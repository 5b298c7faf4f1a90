"""A real analysis of a wider real corpus, replayed in CI without a model: the seed on the bundled
Qwen2.5-Coder-1.5B, six starter tasks x r = 2 in the local sandbox (2026-12-04: ``rise eval ... --setting
terminus.max_episodes=12 --setting model.max_tokens=1024``; several runs hit the 300 s agent timeout because the
one CPU server was shared with another model job), two flipping tasks (config-edit, write-json). The corpus is
``tests/data/analysis/trials/bundled-1.5b-wide`` (redacted), the recordings ``.../recordings/bundled-1.5b-wide``
(``python tests/test_analysis_bundled_replay.py BASE_URL wide``, the 1.5B in every role). As in
``test_analysis_bundled_replay.py``, replaying asserts what the platform does with the real calls."""

from __future__ import annotations

import json
from pathlib import Path

from tests.test_analysis_bundled_replay import (
    DATA,
    analyze,
    kill_after_first_finding_then_resume,
    make_demo,
    researcher_inputs_by_group,
)

WIDE_CORPUS = DATA / "trials" / "bundled-1.5b-wide"
WIDE_RECORDINGS = DATA / "recordings" / "bundled-1.5b-wide"
WIDE_TASKS = ["hello-file", "write-json", "count-lines", "config-edit", "project-skeleton", "rename-ext"]


def test_the_wide_real_analysis_replays_with_two_flipping_tasks(tmp_path: Path) -> None:
    expected = json.loads((WIDE_RECORDINGS / "expected.json").read_text())
    exp = make_demo(tmp_path, corpus=WIDE_CORPUS, tasks=WIDE_TASKS)
    out = analyze(exp, recordings=WIDE_RECORDINGS)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines()[0].split(": ", 1)[1].startswith("2 flipping task(s), 2 pair(s)")
    events = [json.loads(line) for line in (exp.root / "ledger.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in events if ":analysis" in e["key"]] == expected["kinds"]
    result = json.loads((exp.root / "rounds" / "r01" / "analysis" / "analysis.json").read_text())
    assert [g["name"] for g in result["groups"]] == expected["groups"]
    assert researcher_inputs_by_group(result) == expected["researcher_inputs_by_group"]  # the researcher's
    assert len(result["findings"]) == expected["findings"]
    for line in expected["stdout_lines"]:
        assert line in out.stdout
    assert "cost analyst:" in out.stdout  # cost per role, from the recorded usage
    transcripts = sorted((exp.root / "rounds" / "r01" / "analysis" / "transcripts").glob("*.jsonl"))
    assert len(transcripts) == expected["calls"]


def test_kill_9_between_the_real_findings_then_resume_pays_for_no_call_twice(tmp_path: Path) -> None:
    """kill -9 after the first real finding, then --resume: the second analyst call, the grouper and the reviewer
    run once each from the recording, the first analyst call is not made again, and the result is the same."""
    kill_after_first_finding_then_resume(make_demo(tmp_path, corpus=WIDE_CORPUS, tasks=WIDE_TASKS), WIDE_RECORDINGS)
