"""Moving folders between the driver and Ray workers.

- *Shipping* (driver → worker): a task folder or a harness directory travels once per content hash as a tar
  in the object store and is unpacked into ``<cache root>/ray-ship/<digest>/<name>`` on each node that needs it.
- *Delivery* (worker → driver): a finished trial folder comes back as a tar (or sits under the job folder on a
  shared filesystem); the driver unpacks it beside the job folder's cells and renames it into place, so the
  cell folder appears complete, with its ``result.json``, in one step — or not at all.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import uuid
from pathlib import Path

from ..agents import tree_hash
from ..cache import cache_root

INCOMING = ".incoming"  # staging folder inside a job folder; never a cell, emptied when a run starts
_SKIP = {"__pycache__", ".git", ".pytest_cache", ".ruff_cache"}


def _skip_caches(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    parts = Path(info.name).parts
    return None if _SKIP.intersection(parts) or info.name.endswith(".pyc") else info


def pack_dir(src: Path, arcname: str, skip_caches: bool = False) -> bytes:
    """A tar of folder ``src`` under the top entry ``arcname``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(str(src), arcname=arcname, filter=_skip_caches if skip_caches else None)
    return buf.getvalue()


def ship(src: Path) -> tuple[str, str, bytes]:
    """(digest, name, tar) of a folder to send to workers."""
    src = Path(src).resolve()
    return tree_hash(src)[:16], src.name, pack_dir(src, src.name, skip_caches=True)


def materialize(digest: str, name: str, data: bytes) -> Path:
    """The worker-side copy of a shipped folder, unpacked once per node and content hash."""
    dest = cache_root() / "ray-ship" / digest / name
    if dest.is_dir():
        return dest
    tmp = dest.parent.with_name(f"{digest}.tmp-{uuid.uuid4().hex[:8]}")
    tmp.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(tmp, filter="data")
    try:
        os.rename(tmp, dest.parent)  # atomic: a concurrent trial on this node may have won; its copy is equal
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    if not dest.is_dir():
        raise FileNotFoundError(f"shipped folder {name} ({digest}) did not unpack to {dest}")
    return dest


def rewrite_paths(trial_dir: Path, old: str, new: str) -> None:
    """Replace the worker's path of a trial folder by the driver's in its ``result.json`` and ``config.json``
    (log paths, messages), keeping the JSON valid."""
    if old == new:
        return
    enc_old, enc_new = json.dumps(old)[1:-1], json.dumps(new)[1:-1]
    for name in ("result.json", "config.json"):
        path = trial_dir / name
        if path.is_file():
            text = path.read_text()
            if enc_old in text:
                tmp = path.with_name(f".{name}.rewrite")
                tmp.write_text(text.replace(enc_old, enc_new))
                os.replace(tmp, path)


def staging_dir(trial_dir: Path, run_id: str) -> Path:
    """Where a delivery is unpacked before its rename: on the job folder's filesystem, never a cell name."""
    return trial_dir.parent / INCOMING / f"{trial_dir.name}.{run_id}"


def deliver_tar(data: bytes, arcname: str, worker_dir: str, trial_dir: Path, run_id: str) -> None:
    """Unpack a worker's trial tar (top entry ``arcname``) and rename it to ``trial_dir`` atomically."""
    stage = staging_dir(trial_dir, run_id)
    stage.mkdir(parents=True)
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(stage, filter="fully_trusted")  # our own worker's output; keeps symlinks as they are
        deliver_dir(stage / arcname, worker_dir, trial_dir)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def deliver_dir(src: Path, worker_dir: str, trial_dir: Path) -> None:
    """Rename a complete trial folder (same filesystem) to ``trial_dir``; refuses to replace a cell."""
    if not (src / "result.json").is_file():
        raise FileNotFoundError(f"{src}: the delivered trial folder has no result.json")
    rewrite_paths(src, worker_dir, str(trial_dir))
    if trial_dir.exists():  # the runner moves an earlier attempt aside first; never overwrite a result
        raise FileExistsError(f"{trial_dir}: a trial folder is already there; delivery refused")
    os.rename(src, trial_dir)


def clear_incoming(job_dir: Path) -> None:
    """Drop half-unpacked deliveries a killed driver left (they were never results)."""
    shutil.rmtree(Path(job_dir) / INCOMING, ignore_errors=True)
