"""``rise research sync|search|show`` on a small corpus in a temporary cache, and the --no-external-research
ablation in the research API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from research.api import Research, ResearchDisabled, ResearchSettings
from research.store import research_root
from rise.cli import app

LOOP = '''def run_loop(agent):
    while True:
        action = agent.step()
        if action.done:
            # verify completion before accepting the claim: run the task's checks once more
            if agent.checks_pass():
                return action
'''
DOCS = "# Completion\n\nThe harness asks the model to confirm before it accepts a completion claim.\n"


@pytest.fixture
def corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RISE_RESEARCH_DIR", str(tmp_path / "cache"))
    for name, rel, text in (("alpha", "loop.py", LOOP), ("beta", "docs/guide.md", DOCS)):
        f = tmp_path / name / rel
        f.parent.mkdir(parents=True)
        f.write_text(text)
    c = tmp_path / "corpus.toml"
    c.write_text('version = 1\n[[sources]]\nkind = "local"\nname = "alpha"\npath = "alpha"\n'
                 '[[sources]]\nkind = "local"\nname = "beta"\npath = "beta"\n')
    return c


def _rise(*args: str):
    return CliRunner().invoke(app, list(args))


def test_sync_search_show_round_trip(corpus: Path, tmp_path: Path) -> None:
    res = _rise("research", "sync", "--corpus", str(corpus))
    assert res.exit_code == 0, res.output
    assert "2 sources" in res.output and (tmp_path / "cache" / "index.sqlite").exists()
    assert research_root() == tmp_path / "cache"  # the corpus never lands in the working tree

    res = _rise("research", "search", "verify completion before accepting the claim", "--json")
    assert res.exit_code == 0, res.output
    rec = json.loads(res.output)
    assert {r["framework"] for r in rec["references"]} == {"alpha", "beta"}
    top = rec["references"][0]
    assert top["path"] == "loop.py" and top["start_line"] == 1 and top["query"].startswith("verify")
    assert "verify completion" in top["excerpt"]

    shown = _rise("research", "show", top["id"], "--json")
    assert shown.exit_code == 0, shown.output
    body = json.loads(shown.output)
    assert body["verification"]["status"] == "match" and body["reference"]["sha256"] == top["sha256"]

    by_locator = _rise("research", "show", f"alpha@{top['version']}:loop.py#L1-L3")
    assert by_locator.exit_code == 0 and "agent.step()" in by_locator.output

    listing = _rise("research", "sources")
    assert listing.exit_code == 0 and "alpha" in listing.output and "beta" in listing.output

    # the source changes under the reference: show says so and exits 1
    (tmp_path / "alpha" / "loop.py").write_text(LOOP.replace("checks_pass()", "claims()"))
    changed = _rise("research", "show", top["id"])
    assert changed.exit_code == 1 and "changed" in changed.output


def test_a_source_dropped_from_the_corpus_leaves_the_index(corpus: Path) -> None:
    assert _rise("research", "sync", "--corpus", str(corpus)).exit_code == 0
    corpus.write_text('version = 1\n[[sources]]\nkind = "local"\nname = "alpha"\npath = "alpha"\n')
    res = _rise("research", "sync", "--corpus", str(corpus))
    assert res.exit_code == 0 and "dropped from the index" in res.output and "beta" in res.output
    assert [s["name"] for s in Research(ResearchSettings(corpus=str(corpus))).sources()] == ["alpha"]
    found = _rise("research", "search", "completion claim", "--json")
    assert {r["source"] for r in json.loads(found.output)["references"]} == {"alpha"}


def test_searches_are_recorded_even_without_hits(corpus: Path, tmp_path: Path) -> None:
    assert _rise("research", "sync", "--corpus", str(corpus)).exit_code == 0
    res = _rise("research", "search", "kubernetes autoscaler")
    assert res.exit_code == 0 and "no references" in res.output
    log = (tmp_path / "cache" / "searches.jsonl").read_text().splitlines()
    assert json.loads(log[-1])["query"] == "kubernetes autoscaler" and json.loads(log[-1])["references"] == []


@pytest.mark.parametrize("args, what", [
    (("research", "show", "nonsense"), "neither a reference id"),
    (("research", "show", "abcdefabcdef"), "no recorded search found reference abcdefabcdef"),
    (("research", "search", "the of"), "has no searchable words"),
    (("research", "show", "alpha@x:loop.py#L5-L2"), "line range L5-L2 is empty"),
])
def test_bad_input_exits_2_with_a_named_error(corpus: Path, args: tuple[str, ...], what: str) -> None:
    assert _rise("research", "sync", "--corpus", str(corpus)).exit_code == 0
    res = _rise(*args)
    assert res.exit_code == 2 and what in res.output


def test_search_before_sync_and_bad_corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RISE_RESEARCH_DIR", str(tmp_path / "empty"))
    res = _rise("research", "search", "completion")
    assert res.exit_code == 2 and "run `rise research sync`" in res.output
    bad = tmp_path / "bad.toml"
    bad.write_text('version = 1\n[[sources]]\nkind = "dist"\nname = "h"\nrequirement = "h"\n')
    res = _rise("research", "sync", "--corpus", str(bad))
    assert res.exit_code == 2 and str(bad) in res.output and "requirement" in res.output


def test_ablation_switches_external_research_off(corpus: Path) -> None:
    on = Research(ResearchSettings.from_flag(False, corpus=str(corpus)))
    on.sync(log=lambda m: None)
    ref = on.search("completion claim").references[0]
    off = Research(ResearchSettings.from_flag(True, corpus=str(corpus)))
    assert not off.enabled
    with pytest.raises(ResearchDisabled, match="--no-external-research"):
        off.search("completion claim")
    with pytest.raises(ResearchDisabled):
        off.sync(log=lambda m: None)
    assert off.verify(ref).ok  # checking a recorded reference reads only the cache
