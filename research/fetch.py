"""Bring each source into the cache and read it at its pinned version.

git: a bare ``--mirror`` clone (GitPython) read straight from the object store at the pinned commit, so moving a
branch or adding commits never changes what a pin reads. dist: ``pip download`` of the exact wheel or sdist, unpacked
once into a folder keyed by name and version. local: the folder as it is, versioned by a hash of its files.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import git

from .sources import DistSource, GitSource, LocalSource, ResearchError

Wanted = Callable[[str, int], bool]  # (relative path, size) -> index it?
_SKIP_DIRS = {".git", "__pycache__", "node_modules", ".venv", ".tox"}


class SourceTree:
    """One source at one version: list its files, read one, hash one."""

    kind = ""

    def __init__(self, name: str, origin: str, version: str):
        self.name, self.origin, self.version = name, origin, version

    def files(self, wanted: Wanted) -> Iterator[tuple[str, int]]:
        raise NotImplementedError

    def read(self, path: str) -> bytes | None:
        """The file's bytes at this version, or None when it has no such file."""
        raise NotImplementedError

    def digest(self, path: str) -> str:
        data = self.read(path)
        return hashlib.sha256(data or b"").hexdigest()


class GitTree(SourceTree):
    kind = "git"

    def __init__(self, name: str, origin: str, repo: git.Repo, commit: git.Commit):
        super().__init__(name, origin, commit.hexsha)
        self.repo, self.commit = repo, commit

    def files(self, wanted: Wanted) -> Iterator[tuple[str, int]]:
        for item in self.commit.tree.traverse():
            # regular files only: symlinks (0o120000) and submodules are not content of this commit
            if item.type == "blob" and item.mode in (0o100644, 0o100755) and wanted(item.path, item.size) \
                    and not any(part in _SKIP_DIRS for part in item.path.split("/")[:-1]):
                yield item.path, item.size

    def read(self, path: str) -> bytes | None:
        try:
            return (self.commit.tree / path).data_stream.read()
        except KeyError:
            return None

    def digest(self, path: str) -> str:
        return (self.commit.tree / path).hexsha  # git's own content hash: no need to read the blob


class DirTree(SourceTree):
    def __init__(self, name: str, origin: str, version: str, root: Path, kind: str):
        super().__init__(name, origin, version)
        self.root, self.kind = root, kind

    def files(self, wanted: Wanted) -> Iterator[tuple[str, int]]:
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
            for fn in sorted(filenames):
                full = Path(dirpath) / fn
                if full.is_symlink() or not full.is_file():
                    continue
                rel = full.relative_to(self.root).as_posix()
                size = full.stat().st_size
                if wanted(rel, size):
                    yield rel, size

    def read(self, path: str) -> bytes | None:
        full = (self.root / path).resolve()
        if not full.is_relative_to(self.root.resolve()) or not full.is_file():
            return None  # a path escaping the source is not part of it
        return full.read_bytes()


# ---------------------------------------------------------------- git


def mirror_path(root: Path, name: str, url: str) -> Path:
    return root / "git" / f"{name}-{hashlib.sha1(url.encode()).hexdigest()[:8]}.git"


def _resolve_commit(repo: git.Repo, commit: str) -> git.Commit | None:
    try:
        return repo.commit(commit)
    except (ValueError, git.BadName, git.BadObject, git.GitCommandError):
        return None


def sync_git(src: GitSource, root: Path, update: bool = False, log: Callable[[str], None] = print) -> GitTree:
    """Mirror ``src.url`` (clone once, fetch on ``update`` or when the pin is missing) and open the pin."""
    where = f"sources.{src.name}"
    path = mirror_path(root, src.name, src.url)
    if not path.exists():
        log(f"{src.name}: cloning {src.url} (mirror)")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=".clone-"))
        try:
            git.Repo.clone_from(src.url, tmp / "m.git", mirror=True)
            (tmp / "m.git").rename(path)  # atomic: an interrupted clone leaves no half mirror behind
        except git.GitCommandError as exc:
            raise ResearchError(where, f"cannot clone {src.url}: {exc.stderr.strip() or exc}") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        fetched = True
    else:
        fetched = False
    repo = git.Repo(path)
    if not fetched and (update or _resolve_commit(repo, src.commit) is None):
        log(f"{src.name}: fetching {src.url}")
        try:
            repo.git.fetch("--prune", "origin")
        except git.GitCommandError as exc:
            raise ResearchError(where, f"cannot fetch {src.url}: {exc.stderr.strip() or exc}") from None
    commit = _resolve_commit(repo, src.commit)
    if commit is None:
        raise ResearchError(where + ".commit", f"{src.commit} is not a commit of {src.url}")
    return GitTree(src.name, src.url, repo, commit)


def open_git(root: Path, name: str, url: str, commit: str) -> GitTree | None:
    """The mirror at ``commit`` if it is in the cache (no network), else None."""
    path = mirror_path(root, name, url)
    if not path.exists():
        return None
    repo = git.Repo(path)
    c = _resolve_commit(repo, commit)
    return GitTree(name, url, repo, c) if c is not None else None


# ---------------------------------------------------------------- distributions


def dist_dir(root: Path, name: str, version: str) -> Path:
    return root / "dists" / f"{name}-{version}"


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _archive_name_version(filename: str) -> tuple[str, str] | None:
    """(name, version) from a wheel or sdist file name, or None for other files."""
    if filename.endswith(".whl"):
        parts = filename[:-4].split("-")
        return (parts[0], parts[1]) if len(parts) >= 5 else None
    for ext in (".tar.gz", ".tgz", ".zip"):
        if filename.endswith(ext):
            name, sep, version = filename[: -len(ext)].rpartition("-")
            return (name, version) if sep else None
    return None


def _find_archive(src: DistSource) -> Path:
    """The archive of ``src`` in its ``find_links`` folder, by file name alone (no index, no metadata build)."""
    folder = Path(src.find_links)
    if not folder.is_dir():
        raise ResearchError(f"sources.{src.name}.find_links", f"{folder} is not a folder")
    want = ".whl" if src.format == "wheel" else (".tar.gz", ".tgz", ".zip")
    for p in sorted(folder.iterdir()):
        nv = _archive_name_version(p.name)
        if nv and p.name.endswith(want) and _canonical(nv[0]) == _canonical(src.dist_name) \
                and nv[1] == src.version:
            return p
    raise ResearchError(f"sources.{src.name}", f"no {src.format} of {src.requirement} in {folder}")


def _pip_download(src: DistSource, dest: Path) -> Path:
    """``pip download`` the exact pin from the configured package index (pip's own settings apply)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
           "-d", str(dest), src.requirement]
    if src.format == "wheel":
        cmd.append("--only-binary=:all:")
        if src.python_version:
            cmd += ["--python-version", src.python_version]
    else:
        cmd.append("--no-binary=:all:")  # pip builds the sdist's metadata with a backend from the index
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-4:])
        raise ResearchError(f"sources.{src.name}", f"pip download {src.requirement} failed: {tail}")
    archives = [p for p in dest.iterdir() if _archive_name_version(p.name)]
    if len(archives) != 1:
        raise ResearchError(f"sources.{src.name}", f"pip download left {len(archives)} archives in {dest}")
    return archives[0]


def _unpack(archive: Path, into: Path) -> None:
    if archive.name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(archive) as zf:
            for member in zf.namelist():
                if member.startswith("/") or ".." in Path(member).parts:
                    raise ResearchError(str(archive), f"unsafe member path {member!r}")
            zf.extractall(into)
    else:
        with tarfile.open(archive) as tf:
            tf.extractall(into, filter="data")  # refuses absolute paths, links out of the tree, devices


def sync_dist(src: DistSource, root: Path, log: Callable[[str], None] = print) -> DirTree:
    """Download and unpack ``src`` once; later syncs reuse the unpacked tree (no index access)."""
    base = dist_dir(root, src.dist_name, src.version)
    marker = base / "archive.json"
    if not marker.exists():
        log(f"{src.name}: downloading {src.requirement} ({src.format})")
        base.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=base.parent, prefix=".dl-"))
        try:
            archive = _find_archive(src) if src.find_links else _pip_download(src, tmp / "download")
            _unpack(archive, tmp / "tree")
            digest = hashlib.sha256(archive.read_bytes()).hexdigest()
            (tmp / "archive.json").write_text(json.dumps({"archive": archive.name, "sha256": digest,
                                                          "requirement": src.requirement}))
            shutil.rmtree(base, ignore_errors=True)
            tmp.rename(base)  # the marker appears only with a complete tree
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return DirTree(src.name, src.requirement, src.version, base / "tree", "dist")


def open_dist(root: Path, name: str, requirement: str, version: str) -> DirTree | None:
    dist_name = requirement.split("==", 1)[0]
    base = dist_dir(root, dist_name, version)
    if not (base / "archive.json").exists():
        return None
    return DirTree(name, requirement, version, base / "tree", "dist")


# ---------------------------------------------------------------- local folders


def sync_local(src: LocalSource, wanted: Wanted) -> DirTree:
    """The folder as it is now; its version hashes the indexed files' paths and contents."""
    root = Path(src.path)
    if not root.is_dir():
        raise ResearchError(f"sources.{src.name}.path", f"{src.path} is not a folder")
    tree = DirTree(src.name, src.path, "", root, "local")
    h = hashlib.sha256()
    for path, _size in tree.files(wanted):
        h.update(f"{path}\0{tree.digest(path)}\n".encode())
    tree.version = "tree-" + h.hexdigest()[:16]
    return tree


def open_tree(root: Path, kind: str, name: str, origin: str, version: str) -> SourceTree | None:
    """Re-open a source at a recorded version from the cache alone, or None when it is not there."""
    if kind == "git":
        return open_git(root, name, origin, version)
    if kind == "dist":
        return open_dist(root, name, origin, version)
    if kind == "local":
        return DirTree(name, origin, version, Path(origin), "local") if Path(origin).is_dir() else None
    raise ResearchError("reference.kind", f"unknown source kind {kind!r}")
