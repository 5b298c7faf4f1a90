"""Freeze an adopted harness version into one file that runs without the experiment.

The file is a gzipped tar holding ``manifest.json`` and ``harness/`` (the package at the version's commit).
The manifest records the experiment, version, commit, the sha256 of every file, the settings, and the model the
version was evolved for. ``rise eval --agent FILE`` runs it (``monitor.agents.resolve_agent`` unpacks it);
:func:`verify_frozen` re-checks every hash (and ``resolve_agent`` does so before every run).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from datetime import UTC, datetime
from pathlib import Path

from evolve.experiment.store import Experiment
from trials.agents import frozen_mismatches

FROZEN_FORMAT = 1


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def freeze(exp: Experiment, version: str, out: Path) -> dict:
    """Write ``out`` for tag ``version`` of ``exp``'s harness; returns the manifest."""
    repo = exp.repo
    if version not in exp.versions():
        raise ValueError(f"{exp.root}: no adopted version {version!r} (have {', '.join(exp.versions())})")
    commit = repo.commit(version)
    files: dict[str, bytes] = {}
    for blob in commit.tree.traverse():
        if blob.type == "blob":
            files[blob.path] = blob.data_stream.read()
    cfg = exp.config
    manifest = {
        "format": FROZEN_FORMAT,
        "name": f"{cfg.name}-{version}",
        "experiment": cfg.name,
        "version": version,
        "commit": commit.hexsha,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "evolved_for": {"model": cfg.endpoint.model, "base_url": cfg.endpoint.base_url},
        "settings": files.get("settings.toml", b"").decode(),
        "files": {p: _sha(d) for p, d in sorted(files.items())},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        def add(name: str, data: bytes, mode: int = 0o644) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, int(commit.committed_date)
            tar.addfile(info, io.BytesIO(data))

        add("manifest.json", json.dumps(manifest, indent=2).encode())
        for path, data in sorted(files.items()):
            add(f"harness/{path}", data)
    os.replace(tmp, out)
    return manifest


def verify_frozen(harness_dir: Path, manifest: dict) -> list[str]:
    """Files of an unpacked frozen harness whose content no longer matches the manifest (changed, missing or
    added); the same check ``rise eval --agent FILE`` makes before it runs a frozen harness."""
    return frozen_mismatches(harness_dir, manifest)
