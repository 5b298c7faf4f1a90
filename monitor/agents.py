"""The agent a harness package runs as: its process under ``monitor.host``, which records its dual trace.

``resolve_agent(ref)`` understands: ``oracle``; ``seed`` (the ``harness_seed`` package of this project); a
harness package directory; a frozen harness file (``.tar.gz``/``.tgz``/``.rhz``, unpacked and verified by
:func:`trials.agents.extract_frozen`).

These live here, not in ``trials.agents``, because a harness's command line is the monitor's host: the trials
package (below the monitor) imports nothing of it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from trials.agents import FROZEN_SUFFIXES, AgentSpec, extract_frozen, oracle_agent, tree_hash


def harness_agent(harness_dir: Path, name: str | None = None, version: str | None = None) -> AgentSpec:
    """A harness package directory, run through ``monitor.host`` (which records its dual trace)."""
    harness_dir = harness_dir.resolve()
    if not (harness_dir / "main.py").is_file():
        raise ValueError(f"{harness_dir}: not a harness package (no main.py)")
    name = name or harness_dir.name
    version = version or f"{name}-{tree_hash(harness_dir)[:12]}"
    from . import host  # the recording host is part of the platform: a broken import is an error

    argv = [sys.executable, "-m", host.__name__, "--harness", str(harness_dir), "--spec", "{spec}"]
    return AgentSpec(kind="process", name=name, argv=argv, harness_version=version, harness_dir=str(harness_dir))


def resolve_agent(ref: str) -> AgentSpec:
    """``oracle``, ``seed``, a harness directory or a frozen harness file → :class:`AgentSpec`."""
    if ref == "oracle":
        return oracle_agent()
    if ref == "seed":
        spec = importlib.util.find_spec("harness_seed")
        if spec is None or not spec.submodule_search_locations:
            raise ValueError("the harness_seed package is not installed")
        return harness_agent(Path(next(iter(spec.submodule_search_locations))), name="seed")
    path = Path(ref)
    if path.is_dir():
        return harness_agent(path)
    if path.is_file() and path.name.endswith(FROZEN_SUFFIXES):
        hdir, manifest = extract_frozen(path)
        name = str(manifest.get("name") or path.name.split(".")[0])
        commit = manifest.get("commit")
        version = f"{name}@{str(commit)[:12]}" if commit else manifest.get("version")
        return harness_agent(hdir, name=name, version=str(version) if version else None)
    raise ValueError(f"unknown agent {ref!r}: use oracle, seed, a harness directory or a frozen harness file")
