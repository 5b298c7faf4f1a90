"""The README stays a five-minute read, and every relative link of the docs leads somewhere.

README.md has at most 150 lines (dated runs go to docs/measurements.md, reference to docs/*.md). Every relative
markdown link in README.md, docs/*.md and data/starter/README.md names a file that exists, and a `#fragment` on a
markdown file names one of its headings (GitHub's anchor rule: lower case, punctuation dropped, spaces to hyphens).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 150
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.DOTALL | re.MULTILINE)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "data" / "starter" / "README.md"]


def prose(text: str) -> str:
    """The text without fenced blocks and code spans, where a bracket is code, not a link."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def anchors(markdown: str) -> set[str]:
    """The anchors of a markdown file's headings (fenced blocks left out: a `#` there is a comment)."""
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*\s*$", FENCE.sub("", markdown), re.MULTILINE)}


def slug(heading: str) -> str:
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def relative_links(path: Path) -> list[str]:
    return [target for target in LINK.findall(prose(path.read_text()))
            if not re.match(r"[a-z][a-z0-9+.-]*:", target, re.IGNORECASE)]


def test_readme_is_a_five_minute_read():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): dated runs go to docs/measurements.md, "
        f"reference to a docs/ page")


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path):
    broken = []
    for target in relative_links(path):
        file_part, _, fragment = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest.read_text()):
            broken.append(f"{target}: no heading #{fragment}")
    assert not broken, f"{path.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_slug_rule():
    assert slug("Scale out: a Ray cluster and pools of vLLM replicas") == \
        "scale-out-a-ray-cluster-and-pools-of-vllm-replicas"
    assert slug("The overnight loop: `rise evolve`") == "the-overnight-loop-rise-evolve"
