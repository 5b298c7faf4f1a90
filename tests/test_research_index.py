"""Splitting files into units (ast, sections, windows), the FTS5 index rebuilt by content hash, BM25 search."""

from __future__ import annotations

from pathlib import Path

import pytest

from research.chunk import MAX_UNIT, WINDOW, content_hash, indexable, split_file, split_lines
from research.fetch import DirTree
from research.index import Index, fts_query
from research.sources import LocalSource, ResearchError

PY = '''"""Module doc."""
import os

X = 1


@decorator
def top(a):
    return a


class Small:
    def m(self):
        return 1


async def later():
    pass
'''


def test_python_units_follow_ast() -> None:
    units = {u.name: u for u in split_file("m.py", PY)}
    assert units["<module>"].start == 1 and units["<module>"].kind == "module"
    assert (units["top"].start, units["top"].end, units["top"].kind) == (7, 9, "function")  # decorator included
    assert (units["Small"].start, units["Small"].end, units["Small"].kind) == (12, 14, "class")
    assert (units["later"].start, units["later"].end) == (17, 18)
    lines = split_lines(PY)
    assert all(u.hash == content_hash(lines, u.start, u.end) for u in units.values())


def test_big_class_splits_into_methods_and_long_function_into_windows() -> None:
    methods = "".join(f"    def m{i}(self):\n" + "        x = 1\n" * 20 for i in range(10))
    long_fn = "def long():\n" + "    y = 2\n" * (MAX_UNIT + 20)
    units = split_file("big.py", "class Big:\n    '''doc'''\n" + methods + long_fn)
    names = [u.name for u in units]
    assert "Big" in names and "Big.m0" in names and "Big.m9" in names
    assert next(u for u in units if u.name == "Big").end == 2  # the header alone
    assert all(u.kind == "method" for u in units if u.name.startswith("Big.m"))
    longs = [u for u in units if u.name == "long"]
    assert len(longs) == 3 and all(u.end - u.start + 1 <= WINDOW for u in longs)


def test_unparsable_python_falls_back_to_windows() -> None:
    units = split_file("new.py", "def f[T](x: T) -> T:\n    return x\n" + "print(1\n")
    assert [u.kind for u in units] == ["window"]


def test_markdown_sections_skip_fenced_headings_and_crlf_counts_like_ast() -> None:
    md = "intro\r\n# One\r\ntext\r\n```\r\n# not a heading\r\n```\r\n## Two\r\nmore\r\n"
    units = split_file("doc.md", md)
    assert [(u.name, u.start, u.end) for u in units] == [("<preamble>", 1, 1), ("One", 2, 6), ("Two", 7, 8)]
    rst = split_file("doc.rst", "Title\n=====\n\nbody\n\nPart\n----\nx\n")
    assert [(u.name, u.start) for u in rst] == [("Title", 1), ("Part", 6)]


def test_indexable_filters_kinds_and_sizes() -> None:
    assert indexable("a/b.py", 10) and indexable("a/prompt.j2", 10) and indexable("x.dist-info/METADATA", 10)
    assert not indexable("a/bundle.js", 10) and not indexable("a/b.py", 10_000_000)
    assert not indexable("x.dist-info/RECORD", 10) and not indexable("a/empty.py", 0)


def _tree(root: Path) -> tuple[LocalSource, DirTree]:
    return LocalSource(name="toy", path=str(root)), DirTree("toy", str(root), "v", root, "local")


def test_index_rebuilds_only_changed_files(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.py").write_text("def verify_completion():\n    return 'claim checked'\n")
    (src / "b.md").write_text("# Notes\n\nnothing here\n")
    (src / "blob.json").write_bytes(b"\0\1\2binary")
    index = Index(tmp_path / "i.sqlite")
    first = index.update([_tree(src)], log=lambda m: None)
    assert (first.files_seen, first.files_indexed) == (3, 3)
    again = index.update([_tree(src)], log=lambda m: None)
    assert (again.files_seen, again.files_indexed, again.units_added) == (3, 0, 0)

    (src / "b.md").write_text("# Notes\n\nverify the completion claim here\n")
    (src / "a.py").unlink()
    third = index.update([_tree(src)], log=lambda m: None)
    assert (third.files_indexed, third.files_removed) == (1, 1)
    hits = index.search("verify completion claim")
    assert [h.path for h in hits] == ["b.md"]
    assert index.db.execute("SELECT count(*) FROM units_fts").fetchone()[0] == \
        index.db.execute("SELECT count(*) FROM units").fetchone()[0] == 1  # no orphan FTS rows
    index.close()


def test_search_ranks_full_coverage_first_and_caps_per_framework(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    # one unit repeats a single rare word; another holds every query word once
    (src / "rare.py").write_text("def zebra():\n    return 'claim claim claim claim'\n")
    (src / "full.py").write_text("def check():\n    '''verify completion before accepting the claim'''\n")
    for i in range(6):
        (src / f"n{i}.py").write_text(f"def verify_{i}():\n    return 'verify'\n")
    index = Index(tmp_path / "i.sqlite")
    index.update([_tree(src)], log=lambda m: None)
    hits = index.search("verify completion before accepting the claim", limit=10, per_framework=10)
    assert hits[0].path == "full.py"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    capped = index.search("verify completion claim", limit=10, per_framework=2)
    assert len(capped) == 2 and {h.framework for h in capped} == {"toy"}
    index.close()


@pytest.mark.parametrize("query", ['"unbalanced', "a AND NOT b*", "col:x ^y (z", "NEAR(a b)"])
def test_queries_cannot_inject_fts_syntax(tmp_path: Path, query: str) -> None:
    index = Index(tmp_path / "i.sqlite")
    assert index.search(query) == []  # no syntax error, just no hits in an empty index
    index.close()


def test_query_without_words_is_an_error() -> None:
    with pytest.raises(ResearchError, match="has no searchable words"):
        fts_query("the of !!")
    assert fts_query('Verify "the" claim-check') == '"verify" OR "claim" OR "check"'


def test_include_prefixes_limit_what_is_indexed(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "agent").mkdir(parents=True)
    (src / "tests").mkdir()
    (src / "agent" / "loop.py").write_text("def verify_completion():\n    pass\n")
    (src / "tests" / "test_loop.py").write_text("def test_verify_completion():\n    pass\n")
    source = LocalSource(name="toy", path=str(src), include=["agent"])
    index = Index(tmp_path / "i.sqlite")
    stats = index.update([(source, DirTree("toy", str(src), "v", src, "local"))], log=lambda m: None)
    assert stats.files_seen == 1 and [h.path for h in index.search("verify completion")] == ["agent/loop.py"]
    index.close()


def test_exclude_prefixes_leave_out_part_of_an_include(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "agent" / "auth").mkdir(parents=True)
    (src / "agent" / "loop.py").write_text("def verify_completion():\n    pass\n")
    (src / "agent" / "auth" / "token.py").write_text("def verify_completion_token():\n    pass\n")
    (src / "agent" / "authoring.py").write_text("def verify_completion_text():\n    pass\n")  # not under auth/
    source = LocalSource(name="toy", path=str(src), include=["agent"], exclude=["agent/auth"])
    index = Index(tmp_path / "i.sqlite")
    stats = index.update([(source, DirTree("toy", str(src), "v", src, "local"))], log=lambda m: None)
    assert stats.files_seen == 2
    assert sorted(h.path for h in index.search("verify completion")) == ["agent/authoring.py", "agent/loop.py"]
    index.close()


def test_narrowing_a_source_shrinks_the_index_file(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    for i in range(200):
        (src / "a" / f"f{i}.py").write_text("".join(f"def f{j}_{i}():\n    return {j}\n" for j in range(30)))
    index = Index(tmp_path / "i.sqlite")
    tree = DirTree("t", str(src), "v", src, "local")
    index.update([(LocalSource(name="t", path=str(src)), tree)], log=lambda m: None)
    full = index.size_bytes()
    stats = index.update([(LocalSource(name="t", path=str(src), include=["a/f1.py"]), tree)], log=lambda m: None)
    assert stats.files_removed == 199 and index.size_bytes() < full / 2  # freed pages are given back
    assert [h.path for h in index.search("f3_1")] == ["a/f1.py"]
    index.close()


def test_a_byte_order_mark_does_not_hide_python_units() -> None:
    from research.chunk import decode

    units = split_file("bom.py", decode(b"\xef\xbb\xbfdef f():\n    pass\n") or "")
    assert [(u.kind, u.name, u.start) for u in units] == [("function", "f", 1)]


def test_an_index_of_another_schema_is_rebuilt(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.py").write_text("def verify_completion():\n    pass\n")
    index = Index(tmp_path / "i.sqlite")
    index.update([_tree(src)], log=lambda m: None)
    index.db.execute("UPDATE meta SET value='0' WHERE key='schema'")
    index.db.commit()
    index.close()
    again = Index(tmp_path / "i.sqlite")
    assert again.sources() == [] and again.update([_tree(src)], log=lambda m: None).files_indexed == 1
    again.close()
