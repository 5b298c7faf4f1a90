"""The shipped corpus file against the real package index: two of its smallest pinned distributions (about
300 KB together) are downloaded, unpacked, indexed, and the issue's query finds references into both frameworks,
each re-resolving with a matching hash. Marked ``pypi`` (the only network these tests use; CI has the index)."""

from __future__ import annotations

from pathlib import Path

import pytest

from research.api import Research, ResearchSettings
from research.sources import DEFAULT_CORPUS

pytestmark = pytest.mark.pypi


def test_default_corpus_pins_download_and_answer_the_query(tmp_path: Path) -> None:
    r = Research(ResearchSettings(corpus=str(DEFAULT_CORPUS)), root=tmp_path / "cache")
    rep = r.sync(only=["terminal-bench", "mini-swe-agent"], log=lambda m: None)
    assert set(rep.index.per_source) == {"terminal-bench", "mini-swe-agent"}
    assert all(n > 50 for n in rep.index.per_source.values())
    rec = r.search("verify completion before accepting the claim")
    frameworks = {ref.framework for ref in rec.references}
    assert frameworks == {"terminal-bench", "mini-swe-agent"}
    for ref in rec.references:
        check = r.verify(ref)
        assert check.ok, (ref.locator, check.detail)
        assert ref.version in ("0.2.18", "2.4.6") and ref.kind == "dist"
