"""Tar payloads for copying files into and out of a sandbox (shared by the local and docker sandboxes)."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
from pathlib import Path


def pack(src: Path, arcname: str) -> bytes:
    """A tar of host path ``src`` whose single top entry is named ``arcname``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(str(src), arcname=arcname)
    return buf.getvalue()


def unpack_single(data: bytes, name: str, dst: Path) -> None:
    """Extract a tar whose top entry is ``name`` so that host path ``dst`` becomes that entry (dirs merge)."""
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dst.parent, prefix=".rise-dl-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(tmp, filter="data")
        item = Path(tmp) / name
        if not item.exists() and not item.is_symlink():
            raise FileNotFoundError(f"{name} missing from the archive")
        if item.is_dir() and not item.is_symlink():
            shutil.copytree(item, dst, symlinks=True, dirs_exist_ok=True)
        else:
            if dst.is_dir() and not dst.is_symlink():
                shutil.rmtree(dst)
            os.replace(item, dst)


def split_sandbox_path(path: str) -> tuple[str, str]:
    """(parent, basename) of an absolute sandbox path; refuses ``/``."""
    p = Path("/") / path
    if str(p) == "/":
        raise ValueError("cannot copy the sandbox root itself")
    return str(p.parent), p.name


def upload_payload(src: Path, dst: str, workdir: str) -> tuple[str, bytes]:
    """(folder to extract into, tar bytes) that put host ``src`` at sandbox path ``dst`` (relative paths are
    under ``workdir``; a folder's contents go into folder ``dst``)."""
    src = Path(src)
    if not src.exists():
        raise FileNotFoundError(src)
    dst = dst if dst.startswith("/") else f"{workdir}/{dst}"
    if src.is_dir():
        return dst, pack(src, ".")
    target, name = split_sandbox_path(dst)
    return target, pack(src, name)
