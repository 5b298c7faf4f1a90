"""The search index: SQLite FTS5 with BM25 ranking, rebuilt incrementally by file content hash.

Why FTS5: it ships inside Python's ``sqlite3`` (no new dependency, no native wheel to match), it keeps the index
on disk in one file, it updates row by row (a changed file replaces only its own units, which bm25s cannot: it
re-fits the whole matrix), and its ``bm25()`` ranks with per-column weights (a hit in a function's name counts
more than one in its body). tantivy would do the same with a Rust wheel and a separate segment folder.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from .chunk import decode, indexable, split_file
from .fetch import SourceTree
from .sources import DistSource, GitSource, LocalSource, ResearchError

AnySource = GitSource | DistSource | LocalSource

SCHEMA = 3  # bump when splitting or hashing changes: old rows would no longer verify
# column weights for bm25(): name (qualified name, section title), path, body, source (not indexed)
_WEIGHTS = "4.0, 2.0, 1.0, 0.0"
_CANDIDATES = 2000  # best BM25 matches re-scored by coordination
_STOP = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "before", "by", "do", "does", "for", "from", "has", "have", "how",
    "if", "in", "into", "is", "it", "its", "of", "on", "or", "so", "than", "that", "the", "their", "then",
    "there", "these", "this", "to", "was", "were", "what", "when", "where", "which", "while", "who", "why",
    "will", "with"})

_DDL = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS sources(name TEXT PRIMARY KEY, framework TEXT, kind TEXT, origin TEXT,
    version TEXT, synced_at TEXT);
CREATE TABLE IF NOT EXISTS files(source TEXT, path TEXT, hash TEXT, PRIMARY KEY(source, path));
CREATE TABLE IF NOT EXISTS units(id INTEGER PRIMARY KEY, source TEXT, path TEXT, kind TEXT, name TEXT,
    start INTEGER, "end" INTEGER, hash TEXT);
CREATE INDEX IF NOT EXISTS units_file ON units(source, path);
CREATE VIRTUAL TABLE IF NOT EXISTS units_fts USING fts5(name, path, body, source UNINDEXED,
    tokenize='porter unicode61');
"""


@dataclass
class Hit:
    """One ranked unit, with everything a reference needs."""

    source: str
    framework: str
    kind: str          # the source's kind: git, dist, local
    origin: str
    version: str
    path: str
    start: int
    end: int
    unit_kind: str
    name: str
    hash: str
    score: float
    text: str


@dataclass
class IndexStats:
    files_seen: int = 0
    files_indexed: int = 0
    files_removed: int = 0
    units_added: int = 0
    seconds: float = 0.0
    per_source: dict[str, int] = field(default_factory=dict)


def _camel_words(name: str) -> str:
    """``ToolCallRecord`` -> ``Tool Call Record``: the tokenizer splits on ``_`` and ``.`` but not on case."""
    return " ".join(re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", name))


def fts_query(query: str) -> str:
    """Free text to an FTS5 expression: each remaining word quoted (no operator injection), joined by OR so
    BM25 ranks units by how many of the words they hold and how rare those are."""
    words = [w for w in re.findall(r"\w+", query.lower()) if w not in _STOP]
    if not words:
        raise ResearchError("query", f"{query!r} has no searchable words")
    return " OR ".join(f'"{w}"' for w in dict.fromkeys(words))


class Index:
    """One SQLite file holding every synced source's units."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")  # a cache: losing the last commit on power loss is fine
        row = None
        try:
            row = self.db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        except sqlite3.OperationalError:
            pass
        if row is not None and row[0] != str(SCHEMA):  # an older layout: start over, it is only a cache
            self.db.close()
            for stale in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
                stale.unlink(missing_ok=True)
            self.db = sqlite3.connect(path)
            row = None
        if row is None:
            self.db.executescript(_DDL)
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (str(SCHEMA),))
            self.db.commit()

    def close(self) -> None:
        self.db.close()

    # ------------------------------------------------------------ building

    def _drop_file(self, source: str, path: str) -> None:
        self.db.execute("DELETE FROM units_fts WHERE rowid IN (SELECT id FROM units WHERE source=? AND path=?)",
                        (source, path))
        self.db.execute("DELETE FROM units WHERE source=? AND path=?", (source, path))
        self.db.execute("DELETE FROM files WHERE source=? AND path=?", (source, path))

    def update_source(self, src: AnySource, tree: SourceTree, stats: IndexStats) -> None:
        """Bring one source's rows to ``tree``: only files whose content hash changed are re-split."""
        name = tree.name
        known = dict(self.db.execute("SELECT path, hash FROM files WHERE source=?", (name,)).fetchall())
        seen: set[str] = set()
        for path, _size in tree.files(indexable):
            if not src.wants(path):
                continue
            seen.add(path)
            stats.files_seen += 1
            digest = tree.digest(path)
            if known.get(path) == digest:
                continue
            self._drop_file(name, path)
            text = decode(tree.read(path) or b"")
            units = split_file(path, text) if text is not None else []  # binary: remembered, never split
            for u in units:
                cur = self.db.execute(
                    'INSERT INTO units(source, path, kind, name, start, "end", hash) VALUES (?,?,?,?,?,?,?)',
                    (name, path, u.kind, u.name, u.start, u.end, u.hash))
                self.db.execute("INSERT INTO units_fts(rowid, name, path, body, source) VALUES (?,?,?,?,?)",
                                (cur.lastrowid, f"{u.name} {_camel_words(u.name)}", path, u.text, name))
            self.db.execute("INSERT INTO files VALUES (?,?,?)", (name, path, digest))
            stats.files_indexed += 1
            stats.units_added += len(units)
        for path in set(known) - seen:
            self._drop_file(name, path)
            stats.files_removed += 1
        self.db.execute("INSERT OR REPLACE INTO sources VALUES (?,?,?,?,?,?)",
                        (name, src.framework_name, tree.kind, tree.origin, tree.version,
                         datetime.now(UTC).isoformat(timespec="seconds")))
        self.db.commit()  # per source: an interrupted sync keeps every source already done
        stats.per_source[name] = self.db.execute("SELECT count(*) FROM units WHERE source=?",
                                                 (name,)).fetchone()[0]

    def drop_sources_except(self, keep: set[str]) -> list[str]:
        """Remove sources no longer in the corpus file; returns their names."""
        gone = [r[0] for r in self.db.execute("SELECT name FROM sources") if r[0] not in keep]
        for name in gone:
            self.db.execute("DELETE FROM units_fts WHERE rowid IN (SELECT id FROM units WHERE source=?)", (name,))
            for table in ("units", "files"):
                self.db.execute(f"DELETE FROM {table} WHERE source=?", (name,))
            self.db.execute("DELETE FROM sources WHERE name=?", (name,))
        self.db.commit()
        return gone

    def update(self, pairs: list[tuple[AnySource, SourceTree]], log: Callable[[str], None] = print) -> IndexStats:
        """Index every (source, tree) pair incrementally."""
        stats = IndexStats()
        t0 = time.perf_counter()
        for src, tree in pairs:
            before = stats.files_indexed
            self.update_source(src, tree, stats)
            log(f"{tree.name}: {stats.files_indexed - before} files (re)indexed, "
                f"{stats.per_source[tree.name]} units")
        if stats.files_removed:
            # SQLite keeps freed pages: without this, narrowing a corpus (include/exclude) left the file its size
            self.db.execute("VACUUM")
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # in WAL mode VACUUM writes the new file there
        stats.seconds = time.perf_counter() - t0
        return stats

    # ------------------------------------------------------------ reading

    def sources(self) -> list[dict]:
        cols = ("name", "framework", "kind", "origin", "version", "synced_at")
        rows = self.db.execute(f"SELECT {', '.join(cols)} FROM sources ORDER BY name").fetchall()
        out = []
        for r in rows:
            d = dict(zip(cols, r, strict=True))
            d["units"] = self.db.execute("SELECT count(*) FROM units WHERE source=?", (d["name"],)).fetchone()[0]
            out.append(d)
        return out

    def source(self, name: str) -> dict | None:
        return next((s for s in self.sources() if s["name"] == name), None)

    def search(self, query: str, limit: int = 10, per_framework: int = 3) -> list[Hit]:
        """The ``limit`` best units, at most ``per_framework`` from one framework (so one large framework cannot
        hide how the others do it). Score: BM25 times the squared share of the query's words a unit holds (the
        coordination factor of classic Lucene), so a unit with every word beats one with a single rare word."""
        if limit < 1 or per_framework < 1:
            raise ResearchError("search", "limit and per-framework must be at least 1")
        words = fts_query(query)
        framework = dict(self.db.execute("SELECT name, framework FROM sources").fetchall())
        # the source name sits in the FTS row (unindexed), so ranking needs no join with units
        rows = [(rid, r, framework.get(src, src)) for rid, r, src in self.db.execute(
            f"""SELECT rowid, bm25(units_fts, {_WEIGHTS}) AS r, source FROM units_fts
                WHERE units_fts MATCH ? ORDER BY r LIMIT {_CANDIDATES}""", (words,))]
        terms = words.split(" OR ")
        # one plain MATCH per word (fast); adding "rowid IN (...)" makes FTS5 scan, hundreds of times slower
        holds = [{r[0] for r in self.db.execute("SELECT rowid FROM units_fts WHERE units_fts MATCH ?", (t,))}
                 for t in terms]
        scored = sorted(((-r * (sum(rid in h for h in holds) / len(terms)) ** 2, rid, fw) for rid, r, fw in rows),
                        reverse=True)
        taken: dict[str, int] = {}
        out: list[Hit] = []
        for score, rid, fw in scored:
            if taken.get(fw, 0) >= per_framework:
                continue
            taken[fw] = taken.get(fw, 0) + 1
            row = self.db.execute(
                """SELECT u.source, s.framework, s.kind, s.origin, s.version, u.path, u.start, u."end", u.kind,
                          u.name, u.hash, f.body
                   FROM units u JOIN sources s ON s.name = u.source JOIN units_fts f ON f.rowid = u.id
                   WHERE u.id = ?""", (rid,)).fetchone()
            out.append(Hit(*row[:11], score=score, text=row[11]))
            if len(out) == limit:
                break
        return out

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.path.parent.glob(self.path.name + "*") if p.is_file())
