"""The research corpus: sync time, index build time (full and incremental), query latency p50/p95, size on disk.

    python benchmarks/research_index.py [--corpus research/corpus.toml] [--fresh] [-n 5] [--quick]

Sync fetches the corpus into the research cache (``--fresh``: into a temporary cache, so the download is timed
too; otherwise sources already in the cache are reused). The index is then built from nothing into a temporary
file (full build), updated again with nothing changed (incremental: every file hashed, none re-split), and
queried ``-n`` times per query. Prints the figures and the ratios full/incremental and index/corpus size.
``--quick`` (CI) indexes three folders of this repository as local sources instead: no network, a few seconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _support import quick_flag

from research.api import Research, ResearchSettings
from research.chunk import indexable
from research.index import Index

QUERIES = [
    "verify completion before accepting the claim",
    "confirm task complete double check",
    "truncate long command output",
    "context window summarization when too many tokens",
    "tmux send keys wait for command to finish",
    "parse JSON response from the model retry on error",
    "timeout for a shell command",
    "keystrokes without newline",
    "stuck in a loop repeated action",
    "max turns limit step budget",
    "docker container exec environment",
    "system prompt template jinja",
    "tool call schema validation",
    "cost tracking tokens usage",
    "recover lost session restart",
    "observation shown to the model after each command",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="", help="corpus file (default: the shipped one)")
    ap.add_argument("--fresh", action="store_true", help="sync into an empty temporary cache (times downloads)")
    ap.add_argument("-n", type=int, default=5, help="repetitions per query")
    quick_flag(ap)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="rise-research-bench-") as tmp:
        root = Path(tmp) / "cache" if args.fresh or args.quick else None
        if args.quick:
            args.n = 1
            args.corpus = str(Path(tmp) / "quick.toml")
            Path(args.corpus).write_text("version = 1\n" + "".join(
                f'[[sources]]\nkind = "local"\nname = "{d.replace("_", "-")}"\npath = "{ROOT / d}"\n'
                for d in ("harness_seed", "research", "handbook")))
        r = Research(ResearchSettings(corpus=args.corpus), root=root)
        t0 = time.perf_counter()
        pairs = r.trees(log=lambda m: print("  " + m))
        fetch_s = time.perf_counter() - t0
        corpus_bytes = sum(size for _, tree in pairs for path, size in tree.files(indexable))

        index = Index(Path(tmp) / "bench.sqlite")
        full = index.update(pairs, log=lambda m: None)
        incr = index.update(pairs, log=lambda m: None)
        units = sum(full.per_source.values())

        latencies: list[float] = []
        hits_frameworks: dict[str, int] = {}
        for q in QUERIES:
            for _ in range(args.n):
                t = time.perf_counter()
                hits = index.search(q, limit=8, per_framework=3)
                latencies.append(time.perf_counter() - t)
            hits_frameworks[q] = len({h.framework for h in hits})
        index.close()
        size = index.size_bytes()

    lat = sorted(latencies)
    p50 = statistics.median(lat)
    p95 = lat[min(len(lat) - 1, round(0.95 * (len(lat) - 1)))]
    print(f"sources: {len(pairs)} ({', '.join(t.name + '@' + t.version[:12] for _, t in pairs)})")
    how = "local folders" if args.quick else "fetch + download" if args.fresh else "fetch, cache reused"
    print(f"sync ({how}): {fetch_s:.1f} s")
    print(f"corpus: {full.files_seen} indexable files, {corpus_bytes / 1e6:.1f} MB, {units} units")
    print(f"full build: {full.seconds:.1f} s ({units / full.seconds:.0f} units/s)")
    print(f"incremental rebuild, nothing changed: {incr.seconds:.2f} s, {incr.files_indexed} files re-split "
          f"-> full/incremental = {full.seconds / incr.seconds:.1f}x")
    print(f"query latency over {len(lat)} searches: p50 {p50 * 1e3:.1f} ms, p95 {p95 * 1e3:.1f} ms")
    print(f"index size on disk: {size / 1e6:.1f} MB -> index/corpus = {size / corpus_bytes:.2f}x")
    print(f"frameworks per query (of 8 hits, <= 3 each): min {min(hits_frameworks.values())}, "
          f"median {statistics.median(hits_frameworks.values()):.0f}")


if __name__ == "__main__":
    main()
