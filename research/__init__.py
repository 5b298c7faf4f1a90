"""The external-harness corpus: pinned sources (git commits, Python distributions, local folders) mirrored into
the cache, an SQLite FTS5 index with BM25 ranking, and references that re-resolve and check their hash.

    from research import Research, ResearchSettings
    r = Research()                      # the shipped corpus file, the user's cache
    r.sync()                            # fetch what is missing, re-index what changed
    rec = r.search("verify completion before accepting the claim")
    r.verify(rec.references[0]).ok      # re-read from the pinned source, sha256 compared

``ResearchSettings.from_flag(no_external_research=True)`` is the ablation: search and sync then refuse.
"""

from research.api import NO_EXTERNAL_RESEARCH_HELP, Research, ResearchDisabled, ResearchSettings, SyncReport
from research.reference import Reference, SearchRecord, Verification
from research.sources import Corpus, ResearchError, load_corpus

__all__ = ["NO_EXTERNAL_RESEARCH_HELP", "Corpus", "Reference", "Research", "ResearchDisabled", "ResearchError",
           "ResearchSettings", "SearchRecord", "SyncReport", "Verification", "load_corpus"]
