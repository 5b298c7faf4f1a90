"""The research API the CLI, the researcher's tools and ``rise evolve`` use: sync, search, show, and the
``--no-external-research`` ablation (proposals from local information only)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, Field

from .chunk import content_hash, decode, indexable, split_lines
from .fetch import SourceTree, open_tree, sync_dist, sync_git, sync_local
from .index import Index, IndexStats
from .reference import (
    Reference,
    SearchLog,
    SearchRecord,
    Verification,
    from_hit,
    parse_locator,
    ref_id,
    verify,
)
from .sources import Corpus, DistSource, GitSource, LocalSource, ResearchError, load_corpus
from .store import locked, research_root

NO_EXTERNAL_RESEARCH_HELP = "ablation: no external research; proposals use local information only"


class ResearchSettings(BaseModel):
    """How a run may use the external corpus. ``rise evolve --no-external-research`` sets
    ``external_research = false``; the researcher role is then not run and its tools refuse."""

    external_research: bool = True
    corpus: str = Field("", description="corpus file (default: research/corpus.toml)")
    limit: int = Field(8, ge=1, description="hits per search")
    per_framework: int = Field(3, ge=1, description="at most this many hits from one framework per search")

    @classmethod
    def from_flag(cls, no_external_research: bool, **kw) -> ResearchSettings:
        return cls(external_research=not no_external_research, **kw)


class ResearchDisabled(ResearchError):
    """External research was switched off for this run (the ablation)."""

    def __init__(self) -> None:
        super().__init__("settings.external_research", "external research is off for this run "
                         "(--no-external-research): propose from local information only")


@dataclass
class SyncReport:
    sources: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    fetch_seconds: float = 0.0
    index: IndexStats = field(default_factory=IndexStats)


class Research:
    """The corpus in the cache: ``root`` holds mirrors, unpacked distributions, the index and the search log."""

    def __init__(self, settings: ResearchSettings | None = None, root: Path | None = None):
        self.settings = settings or ResearchSettings()
        self.root = root or research_root()
        self.index_path = self.root / "index.sqlite"
        self.log = SearchLog(self.root / "searches.jsonl")

    @property
    def enabled(self) -> bool:
        return self.settings.external_research

    def _require(self) -> None:
        if not self.enabled:
            raise ResearchDisabled()

    def corpus(self) -> Corpus:
        return load_corpus(self.settings.corpus or None)

    def trees(self, only: list[str] | None = None, update: bool = False,
              log: Callable[[str], None] = print) -> list[tuple[GitSource | DistSource | LocalSource, SourceTree]]:
        """Each chosen source of the corpus file brought into the cache and opened at its pin (no indexing)."""
        self._require()
        corpus = self.corpus()
        chosen = [corpus.source(n) for n in only] if only else list(corpus.sources)
        return [(src, self._tree(src, update, log)) for src in chosen]

    def _tree(self, src: GitSource | DistSource | LocalSource, update: bool,
              log: Callable[[str], None]) -> SourceTree:
        if isinstance(src, GitSource):
            return sync_git(src, self.root, update=update, log=log)
        if isinstance(src, DistSource):
            return sync_dist(src, self.root, log=log)
        return sync_local(src, indexable)

    def sync(self, update: bool = False, only: list[str] | None = None,
             log: Callable[[str], None] = print) -> SyncReport:
        """Fetch every source at its pin (clone or download once; ``update`` fetches git mirrors again), then
        bring the index up to date by content hash. Sources dropped from the corpus leave the index."""
        self._require()
        corpus = self.corpus()
        report = SyncReport()
        with locked(self.root):
            t0 = time.perf_counter()
            pairs = self.trees(only, update, log)
            report.fetch_seconds = time.perf_counter() - t0
            index = Index(self.index_path)
            try:
                report.index = index.update(pairs, log=log)
                if not only:
                    report.removed = index.drop_sources_except({s.name for s in corpus.sources})
            finally:
                index.close()
        report.sources = [s.name for s, _ in pairs]
        return report

    def _index(self) -> Index:
        if not self.index_path.exists():
            raise ResearchError(str(self.index_path), "no research index yet: run `rise research sync`")
        return Index(self.index_path)

    def sources(self) -> list[dict]:
        index = self._index()
        try:
            return index.sources()
        finally:
            index.close()

    def search(self, query: str, limit: int | None = None, per_framework: int | None = None,
               record: bool = True) -> SearchRecord:
        """Ranked references for ``query``; the search is appended to the search log, hits or not."""
        self._require()
        limit = limit or self.settings.limit
        per_framework = per_framework or self.settings.per_framework
        index = self._index()
        try:
            hits = index.search(query, limit=limit, per_framework=per_framework)
        finally:
            index.close()
        now = datetime.now(UTC)
        rec = SearchRecord(query=query, at=now, limit=limit, per_framework=per_framework,
                           references=[from_hit(h, query, now) for h in hits])
        if record:
            self.log.append(rec)
        return rec

    def reference(self, ref: str) -> Reference:
        """A reference by id (from the search log) or by locator ``SOURCE@VERSION:PATH#LA-LB``."""
        self._require()
        if len(ref) == 12 and all(c in "0123456789abcdef" for c in ref):
            found = self.log.find(ref)
            if found is None:
                raise ResearchError("reference", f"no recorded search found reference {ref}")
            return found
        source, version, path, a, b = parse_locator(ref)
        info = self._source_info(source)
        tree = open_tree(self.root, info["kind"], source, info["origin"], version)
        data = tree.read(path) if tree is not None else None
        if data is None:
            raise ResearchError("reference", f"{path} is not in {source}@{version} (cache: {self.root})")
        lines = split_lines(decode(data) or "")
        if b > len(lines):
            raise ResearchError("reference", f"{path} has {len(lines)} lines; L{a}-L{b} is out of range")
        loc = ref.strip()
        return Reference(id=ref_id(loc), source=source, framework=info["framework"], kind=info["kind"],
                         origin=info["origin"], version=version, path=path, start_line=a, end_line=b,
                         sha256=content_hash(lines, a, b), found_at=datetime.now(UTC),
                         excerpt="\n".join(lines[a - 1:min(b, a + 13)]))

    def _source_info(self, name: str) -> dict:
        info = next((s for s in self.sources() if s["name"] == name), None)
        if info is None:
            raise ResearchError("reference", f"source {name!r} is not in the index: run `rise research sync`")
        return info

    def verify(self, ref: Reference) -> Verification:
        """Re-read and check a reference (works with the ablation too: it only reads the cache)."""
        return verify(ref, self.root)
