"""Corpus sources: the corpus file's validation, a real local git repository mirrored at a pinned commit (moving
its branch changes nothing pinned), distributions from a local folder of real wheel/sdist archives, local folders."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import git
import pytest

from research.api import Research, ResearchSettings
from research.sources import DEFAULT_CORPUS, DistSource, ResearchError, load_corpus, parse_corpus

AGENT_V1 = '''"""A toy agent loop."""


def verify_completion(claim, tests):
    """Run the tests before accepting the completion claim."""
    return claim and all(t() for t in tests)


def run():
    return 1
'''


def _corpus(tmp_path: Path, body: str) -> Path:
    f = tmp_path / "corpus.toml"
    f.write_text("version = 1\n" + body)
    return f


def _research(tmp_path: Path, corpus: Path) -> Research:
    return Research(ResearchSettings(corpus=str(corpus)), root=tmp_path / "cache")


# ---------------------------------------------------------------- the corpus file


def test_default_corpus_pins_every_source() -> None:
    corpus = load_corpus(DEFAULT_CORPUS)
    names = {s.name for s in corpus.sources}
    assert {"harbor", "terminal-bench", "mini-swe-agent", "openhands-sdk", "inspect-ai", "aider-chat"} <= names
    assert all(isinstance(s, DistSource) and "==" in s.requirement for s in corpus.sources)
    assert len({s.framework_name for s in corpus.sources}) >= 5


@pytest.mark.parametrize("body, where, what", [
    ('[[sources]]\nkind = "dist"\nname = "harbor"\nrequirement = "harbor>=0.2"\n',
     "sources[0] (harbor).requirement", "not pinned"),
    ('[[sources]]\nkind = "git"\nname = "x"\nurl = "/r"\ncommit = "main"\n',
     "sources[0] (x).commit", "not a commit id"),
    ('[[sources]]\nkind = "svn"\nname = "x"\n', "sources[0] (x)", "kind"),
    ('[[sources]]\nkind = "local"\nname = "x"\npath = "."\ncolour = 1\n', "sources[0] (x).colour", "unknown key"),
    ('[[sources]]\nkind = "local"\nname = "x"\npath = "."\n[[sources]]\nkind = "local"\nname = "x"\npath = "."\n',
     "sources[1].name", "used twice"),
    ('[[sources]]\nkind = "dist"\nname = "x"\nrequirement = "x==1"\nformat = "sdist"\npython_version = "3.12"\n',
     "sources[0] (x)", "wheels only"),
    ("[[sources]\n", "", "not valid TOML"),
])
def test_bad_corpus_names_file_and_field(tmp_path: Path, body: str, where: str, what: str) -> None:
    f = _corpus(tmp_path, body)
    with pytest.raises(ResearchError) as exc:
        load_corpus(f)
    assert str(f) in str(exc.value) and where in str(exc.value) and what in str(exc.value)


def test_relative_paths_resolve_against_the_corpus_file(tmp_path: Path) -> None:
    c = parse_corpus('[[sources]]\nkind = "local"\nname = "a"\npath = "sub"\n', str(tmp_path / "c.toml"))
    assert c.sources[0].path == str((tmp_path / "sub").resolve())


# ---------------------------------------------------------------- git at a pinned commit


def _repo(tmp_path: Path) -> tuple[git.Repo, str]:
    repo = git.Repo.init(tmp_path / "upstream", initial_branch="main")
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "t")
        cw.set_value("user", "email", "t@example.invalid")
    (tmp_path / "upstream" / "agent.py").write_text(AGENT_V1)
    (tmp_path / "upstream" / "README.md").write_text("# Toy\n\n## Completion\n\nThe agent verifies completion.\n")
    repo.index.add(["agent.py", "README.md"])
    return repo, repo.index.commit("v1").hexsha


def _move_branch(repo: git.Repo) -> str:
    """A new commit that rewrites the pinned function, then force-moves main onto a fresh history."""
    work = Path(repo.working_tree_dir)
    (work / "agent.py").write_text(AGENT_V1.replace("all(t() for t in tests)", "True  # trust the claim"))
    repo.index.add(["agent.py"])
    repo.index.commit("v2: trust every claim")
    orphan = repo.git.commit_tree(repo.head.commit.tree.hexsha, "-m", "rewritten history")
    repo.git.update_ref("refs/heads/main", orphan)
    return orphan


def test_git_source_pinned_commit_survives_branch_moves(tmp_path: Path) -> None:
    repo, v1 = _repo(tmp_path)
    corpus = _corpus(tmp_path, f'[[sources]]\nkind = "git"\nname = "toy"\nurl = "{repo.working_tree_dir}"\n'
                               f'commit = "{v1[:10]}"\n')
    r = _research(tmp_path, corpus)
    r.sync(log=lambda m: None)
    first = r.search("verify completion claim").references
    assert first and first[0].unit == "verify_completion" and first[0].version == v1  # short pin -> full id
    assert (first[0].start_line, first[0].end_line) == (4, 6)
    assert r.verify(first[0]).ok

    _move_branch(repo)
    r.sync(update=True, log=lambda m: None)  # fetches the moved branch into the mirror
    again = r.search("verify completion claim").references
    assert [(x.version, x.path, x.start_line, x.sha256) for x in again] == \
        [(x.version, x.path, x.start_line, x.sha256) for x in first]
    check = r.verify(first[0])
    assert check.ok and "all(t() for t in tests)" in check.text
    assert r.sources()[0]["version"] == v1


def test_git_pin_bump_keeps_old_references_valid(tmp_path: Path) -> None:
    repo, v1 = _repo(tmp_path)
    src = f'[[sources]]\nkind = "git"\nname = "toy"\nurl = "{repo.working_tree_dir}"\n'
    corpus = _corpus(tmp_path, src + f'commit = "{v1}"\n')
    r = _research(tmp_path, corpus)
    r.sync(log=lambda m: None)
    old = r.search("verify completion").references[0]
    v2 = _move_branch(repo)
    corpus.write_text("version = 1\n" + src + f'commit = "{v2}"\n')
    rep = r.sync(log=lambda m: None)  # the new pin is missing from the mirror: fetched without --update
    assert rep.index.files_indexed == 1  # README.md kept its blob hash; only agent.py was split again
    new = r.search("verify completion").references[0]
    assert new.version == v2 and new.sha256 != old.sha256 and "trust the claim" in r.verify(new).text
    assert r.verify(old).ok  # the old commit is still in the mirror's object store


def test_git_unknown_commit_is_named(tmp_path: Path) -> None:
    repo, _ = _repo(tmp_path)
    corpus = _corpus(tmp_path, f'[[sources]]\nkind = "git"\nname = "toy"\nurl = "{repo.working_tree_dir}"\n'
                               'commit = "deadbeefdeadbeef"\n')
    with pytest.raises(ResearchError, match=r"sources\.toy\.commit: deadbeefdeadbeef is not a commit"):
        _research(tmp_path, corpus).sync(log=lambda m: None)


# ---------------------------------------------------------------- distributions


def _wheel(folder: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A real (pure-Python) wheel archive: the package files plus its dist-info."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as zf:
        for rel, text in files.items():
            zf.writestr(rel, text)
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{info}/RECORD", "")
    return path


def _sdist(folder: Path, name: str, version: str, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for rel, text in files.items():
            data = text.encode()
            ti = tarfile.TarInfo(f"{name}-{version}/{rel}")
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return path


def test_dist_sources_unpack_wheel_and_sdist_once(tmp_path: Path) -> None:
    links = tmp_path / "links"
    _wheel(links, "toy_agent", "1.2", {"toy_agent/loop.py": AGENT_V1})
    _sdist(links, "toy_other", "0.3", {"other/verify.py": AGENT_V1.replace("verify_completion", "check_done"),
                                       "PKG-INFO": "Name: toy-other\n"})
    corpus = _corpus(tmp_path, f'''
[[sources]]
kind = "dist"
name = "toy-agent"
requirement = "toy-agent==1.2"
find_links = "{links}"

[[sources]]
kind = "dist"
name = "toy-other"
framework = "other"
requirement = "toy-other==0.3"
format = "sdist"
find_links = "{links}"
''')
    r = _research(tmp_path, corpus)
    r.sync(log=lambda m: None)
    refs = r.search("verify completion claim tests").references
    assert {x.framework for x in refs} == {"toy-agent", "other"}
    paths = {x.path for x in refs}
    assert "toy_agent/loop.py" in paths and "toy_other-0.3/other/verify.py" in paths
    assert all(r.verify(x).ok for x in refs)
    assert not any(x.path.endswith("RECORD") for x in refs)
    # a second sync reads the unpacked trees: the archives are no longer needed
    for p in links.iterdir():
        p.unlink()
    rep = r.sync(log=lambda m: None)
    assert rep.index.files_indexed == 0 and rep.index.files_seen >= 2


def test_dist_missing_archive_is_named(tmp_path: Path) -> None:
    (tmp_path / "links").mkdir()
    corpus = _corpus(tmp_path, '[[sources]]\nkind = "dist"\nname = "x"\nrequirement = "x==9"\n'
                               'find_links = "links"\n')
    with pytest.raises(ResearchError, match=r"sources\.x: no wheel of x==9 in"):
        _research(tmp_path, corpus).sync(log=lambda m: None)


# ---------------------------------------------------------------- local folders


def test_local_source_version_follows_content(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "agent.py").write_text(AGENT_V1)
    corpus = _corpus(tmp_path, '[[sources]]\nkind = "local"\nname = "mine"\npath = "mine"\n')
    r = _research(tmp_path, corpus)
    r.sync(log=lambda m: None)
    ref = r.search("verify completion").references[0]
    v1 = r.sources()[0]["version"]
    assert r.verify(ref).ok
    (folder / "agent.py").write_text(AGENT_V1.replace("tests)", "tests) and claim != 'maybe'"))
    check = r.verify(ref)
    assert not check.ok and check.status == "changed"  # a local folder is not pinned: the hash tells
    r.sync(log=lambda m: None)
    assert r.sources()[0]["version"] != v1
