"""``rise tasks import``: copy a Harbor task set (Terminal-Bench 2) from wherever the user keeps it into a task set
this platform runs, each task as it is or through the offline adapter (``adapter.py``), with a record.

Tasks that run as they are are copied byte for byte. An adapted task is copied, its changed files rewritten, the
wheels its changes need downloaded with pip on the host into ``environment/rise-wheels``, and ``rise-adapter.json``
written beside its ``task.toml``: the source tree's hash, every change (file, rule, before, after, why), the hash
of each rewritten file before and after, each wheel's hash, and the hash of the whole transformation. A task that
cannot run here is not copied; ``rise-import.json`` at the top of the destination lists every task's verdict.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

from pydantic import BaseModel, Field

from trials.environments.releases import release_of_image
from trials.errors import TaskError

from .adapter import LOCAL_PYTHON, WHEELS_DIR, Verdict, plan
from .load import inspect_task, task_dirs

RECORD = "rise-adapter.json"
MANIFEST = "rise-import.json"
WHEEL_PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64", "any"]

Downloader = Callable[[list[str], Path], None]


class ImportEntry(BaseModel):
    name: str
    source: str
    source_sha256: str
    status: str  # as-is | adapted | cannot | invalid
    adapter_sha256: str | None = None
    verdict: Verdict | None = None
    problems: list[str] = Field(default_factory=list)


class Manifest(BaseModel):
    source: str
    online: bool
    only: list[str] | None = None  # the task folders asked for (rise tasks import --task); None: all of them
    tasks: list[ImportEntry] = Field(default_factory=list)
    # local base images the imported tasks are built on that the engine does not have yet (rise images base)
    missing_bases: list[str] = Field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(1 for t in self.tasks if t.status == status)


def tree_sha256(root: Path, skip: tuple[str, ...] = ()) -> str:
    """One hash of a folder: every file's relative path and bytes, in sorted order (symlinks by their target)."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() or p.is_symlink()):
        rel = path.relative_to(root).as_posix()
        if rel.split("/")[0] in skip:
            continue
        h.update(rel.encode() + b"\0")
        h.update(path.readlink().as_posix().encode() if path.is_symlink() else path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def _sha(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def pip_download(requirements: list[str], dest: Path, python: str = LOCAL_PYTHON) -> None:
    """Wheels for ``requirements`` and their dependencies, for the image's Python (its release's python3: 3.11 on
    bookworm, 3.12 on noble...), fetched by pip from the package index this machine's pip is configured with."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(dest), "--only-binary=:all:",
           "--python-version", python, "--implementation", "cp"]
    for platform in WHEEL_PLATFORMS:
        cmd += ["--platform", platform]
    proc = subprocess.run([*cmd, *requirements], capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        raise TaskError(str(dest), None, f"pip download {' '.join(requirements)} failed: "
                                         f"{(proc.stderr or proc.stdout).strip()[-600:]}")


def _write_adapted(src: Path, dest: Path, verdict: Verdict, download: Downloader) -> str:
    """Copy ``src`` to ``dest`` with the verdict's rewrites and wheels; returns the transformation's hash."""
    shutil.copytree(src, dest, symlinks=True)
    files: dict[str, dict[str, str]] = {}
    for rel, text in (("environment/Dockerfile", verdict.dockerfile), ("tests/test.sh", verdict.test_sh)):
        if text is None:
            continue
        before = (src / rel).read_bytes()
        (dest / rel).write_text(text)
        files[rel] = {"before_sha256": _sha(before), "after_sha256": _sha(text)}
    wheels: dict[str, str] = {}
    requirements = sorted(set(verdict.verifier_requirements) | set(verdict.build_requirements))
    wheel_dir = dest / "environment" / WHEELS_DIR
    # Apart: the image's packages and the verifier's venv may pin different versions of one package.
    for group in (verdict.build_requirements, verdict.verifier_requirements):
        if group:
            download(group, wheel_dir)
    if wheel_dir.is_dir():
        wheels = {p.name: _sha(p.read_bytes()) for p in sorted(wheel_dir.iterdir())}
    transformation = {"changes": [c.model_dump() for c in verdict.changes], "files": files, "wheels": wheels,
                      "requirements": requirements, "apt": verdict.apt_packages}
    digest = _sha(json.dumps(transformation, sort_keys=True))
    record = {"adapter_sha256": digest, "source": str(src), "source_sha256": tree_sha256(src),
              "notes": verdict.notes, "ignored": verdict.ignored, "base_image": verdict.base_image,
              "python": verdict.python, **transformation}
    (dest / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return digest


def import_tasks(src: Path, dest: Path, present: Callable[[str], bool], online: bool = False,
                 download: Downloader | None = None, only: list[str] | None = None,
                 progress: Callable[[int, int, str], None] | None = None) -> Manifest:
    """Import every task folder under ``src`` (or those named in ``only``) into ``dest`` (created; an existing task
    folder is replaced). ``download`` fetches wheels (default: :func:`pip_download` for the Python of each task's
    base); ``progress(i, n, name)`` is told before each task (a wheel download can take minutes). The local base
    images the imported tasks need and ``present`` does not have are listed in ``missing_bases``. A name in
    ``only`` that is no task folder of ``src`` is a ``TaskError`` before anything is written."""
    src = src.resolve()
    folders = task_dirs(src)
    if only:
        have = {f.name for f in folders}
        if unknown := [name for name in only if name not in have]:
            raise TaskError(str(src), None, f"no task folder {', '.join(unknown)} here; "
                                            f"its task folders: {', '.join(sorted(have)) or 'none'}")
        folders = [f for f in folders if f.name in only]
    dest.mkdir(parents=True, exist_ok=True)
    manifest = Manifest(source=str(src), online=online, only=list(only) if only else None)
    for i, folder in enumerate(folders, 1):
        if progress is not None:
            progress(i, len(folders), folder.name)
        task, problems = inspect_task(folder)
        entry = ImportEntry(name=folder.name, source=str(folder), source_sha256=tree_sha256(folder),
                            status="invalid")
        if task is None:
            entry.problems = [f"{p.file} {p.key or ''}: {p.message}" for p in problems]
            manifest.tasks.append(entry)
            continue
        verdict = plan(task, present, online=online)
        entry.name, entry.status, entry.verdict = task.name, verdict.status, verdict
        target = dest / task.name
        if target.exists():
            shutil.rmtree(target)
        if verdict.status == "as-is":
            shutil.copytree(folder, target, symlinks=True)
        elif verdict.status == "adapted":
            fetch = download or partial(pip_download, python=verdict.python or LOCAL_PYTHON)
            try:
                entry.adapter_sha256 = _write_adapted(folder, target, verdict, fetch)
            except TaskError as exc:
                shutil.rmtree(target, ignore_errors=True)
                entry.status = "cannot"
                verdict.reasons.append(f"the adapter's wheels could not be fetched: {exc.message}")
        manifest.tasks.append(entry)
        base = verdict.base_image if entry.status in ("as-is", "adapted") else None
        if base and release_of_image(base) and not present(base) and base not in manifest.missing_bases:
            manifest.missing_bases.append(base)
    (dest / MANIFEST).write_text(manifest.model_dump_json(indent=2) + "\n")
    return manifest
