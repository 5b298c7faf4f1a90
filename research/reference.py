"""References with provenance: where a design was found (source, pinned version, path, lines, content hash), by
which query and when. A reference re-reads its lines from the cached source at its version and checks the hash."""

from __future__ import annotations

import hashlib
import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from .chunk import content_hash, decode, split_lines
from .fetch import open_tree
from .index import Hit
from .sources import ResearchError

EXCERPT_LINES = 14
_LOCATOR = re.compile(r"^(?P<source>[a-z0-9][a-z0-9._-]*)@(?P<version>[^:]+):(?P<path>.+)#L(?P<a>\d+)-L?(?P<b>\d+)$")


class Reference(BaseModel):
    """One place in one external source, pinned, with the search that found it."""

    id: str = Field(description="12 hex digits of sha256(locator)")
    source: str
    framework: str
    kind: Literal["git", "dist", "local"]
    origin: str = Field(description="clone URL, name==version, or folder")
    version: str = Field(description="full commit id, distribution version, or local tree hash")
    path: str
    start_line: int = Field(ge=1)
    end_line: int = Field(ge=1)
    unit: str = Field("", description="function, class, section or file name")
    unit_kind: str = ""
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    query: str = ""
    found_at: datetime
    score: float = 0.0
    excerpt: str = ""

    @property
    def locator(self) -> str:
        return locator(self.source, self.version, self.path, self.start_line, self.end_line)


class Verification(BaseModel):
    """The outcome of re-reading a reference from its source."""

    ok: bool
    status: Literal["match", "changed", "missing-file", "missing-source", "out-of-range"]
    detail: str
    actual_sha256: str = ""
    text: str = ""


class SearchRecord(BaseModel):
    """One search as it happened: kept even when it found nothing."""

    query: str
    at: datetime
    limit: int
    per_framework: int
    references: list[Reference] = Field(default_factory=list)


def locator(source: str, version: str, path: str, start: int, end: int) -> str:
    return f"{source}@{version}:{path}#L{start}-L{end}"


def ref_id(loc: str) -> str:
    return hashlib.sha256(loc.encode()).hexdigest()[:12]


def _excerpt(text: str, terms: list[str]) -> str:
    """Up to EXCERPT_LINES lines starting just before the first line that holds a query word."""
    lines = text.split("\n")
    first = next((i for i, line in enumerate(lines) if any(t in line.lower() for t in terms)), 0)
    a = max(0, first - 2)
    return "\n".join(lines[a:a + EXCERPT_LINES])


def from_hit(hit: Hit, query: str, when: datetime | None = None) -> Reference:
    loc = locator(hit.source, hit.version, hit.path, hit.start, hit.end)
    terms = [w for w in re.findall(r"\w+", query.lower()) if len(w) > 3]
    return Reference(id=ref_id(loc), source=hit.source, framework=hit.framework, kind=hit.kind,
                     origin=hit.origin, version=hit.version, path=hit.path, start_line=hit.start, end_line=hit.end,
                     unit=hit.name, unit_kind=hit.unit_kind, sha256=hit.hash, query=query,
                     found_at=when or datetime.now(UTC), score=round(hit.score, 4),
                     excerpt=_excerpt(hit.text, terms))


def parse_locator(text: str) -> tuple[str, str, str, int, int]:
    """``source@version:path#L10-L40`` -> its parts; a clear error otherwise."""
    m = _LOCATOR.match(text.strip())
    if not m:
        raise ResearchError("reference", f"{text!r} is neither a reference id (12 hex digits) nor a locator "
                            "SOURCE@VERSION:PATH#LSTART-LEND")
    a, b = int(m["a"]), int(m["b"])
    if a < 1 or b < a:
        raise ResearchError("reference", f"{text!r}: line range L{a}-L{b} is empty")
    return m["source"], m["version"], m["path"], a, b


def verify(ref: Reference, root: Path) -> Verification:
    """Re-read the reference's lines from its source at its version (cache only) and compare the hash."""
    tree = open_tree(root, ref.kind, ref.source, ref.origin, ref.version)
    if tree is None:
        return Verification(ok=False, status="missing-source",
                            detail=f"{ref.source} at {ref.version} is not in the cache: run `rise research sync`")
    data = tree.read(ref.path)
    if data is None:
        return Verification(ok=False, status="missing-file", detail=f"{ref.path} is not in {ref.source}@{ref.version}")
    lines = split_lines(decode(data) or "")
    if ref.end_line > len(lines):
        return Verification(ok=False, status="out-of-range",
                            detail=f"{ref.path} has {len(lines)} lines, the reference ends at {ref.end_line}")
    actual = content_hash(lines, ref.start_line, ref.end_line)
    text = "\n".join(lines[ref.start_line - 1:ref.end_line])
    if actual != ref.sha256:
        return Verification(ok=False, status="changed", actual_sha256=actual, text=text,
                            detail=f"lines changed since the reference was taken: sha256 {actual[:12]} != "
                                   f"{ref.sha256[:12]}")
    return Verification(ok=True, status="match", actual_sha256=actual, text=text, detail="sha256 matches")


# ---------------------------------------------------------------- the search log


class SearchLog:
    """Append-only JSON lines of every search (``searches.jsonl`` in the research cache)."""

    def __init__(self, path: Path):
        self.path = path

    def append(self, record: SearchRecord) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = (record.model_dump_json() + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line)  # one write of one line: concurrent searches never interleave
        finally:
            os.close(fd)

    def records(self) -> list[SearchRecord]:
        if not self.path.exists():
            return []
        out = []
        for n, line in enumerate(self.path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                out.append(SearchRecord.model_validate(json.loads(line)))
            except (json.JSONDecodeError, ValidationError) as exc:
                raise ResearchError(f"{self.path}:{n}", f"not a search record: {exc}") from None
        return out

    def find(self, rid: str) -> Reference | None:
        """The latest recorded reference with this id."""
        hit = None
        for rec in self.records():
            for ref in rec.references:
                if ref.id == rid:
                    hit = ref
        return hit
