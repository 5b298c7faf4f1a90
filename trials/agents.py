"""Which agent a trial runs, and how to start it as a subprocess.

Every agent — the oracle included — is a command line (``AgentSpec.argv``) the runner launches in its own
process group, so one timeout/kill path covers all of them. Placeholders in ``argv``: ``{spec}`` (the trial
spec JSON) and ``{task}`` (the task folder on the host).

A frozen harness file (``.tar.gz``/``.tgz``/``.rhz``: a gzipped tar holding ``harness/`` and ``manifest.json``)
is extracted once per content hash into the cache and checked against the manifest's sha256 of every file each
time it is resolved (:func:`extract_frozen`). A harness package runs under ``monitor.host``, so the agent of a
harness and ``resolve_agent(ref)`` (oracle, seed, a directory or a frozen file) live in :mod:`monitor.agents`:
this package imports nothing of the monitor.

This module is also the oracle's entry point: ``python -m trials.agents oracle --task DIR --spec PATH``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
import tarfile
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from .cache import cache_root

FROZEN_SUFFIXES = (".tar.gz", ".tgz", ".rhz")
_SKIP_PARTS = {"__pycache__", ".git", ".pytest_cache", ".ruff_cache"}


class AgentSpec(BaseModel):
    """An agent as the runner sees it: a command line and a version id."""

    kind: Literal["oracle", "process"]
    name: str
    argv: list[str] = Field(description="command line; {spec} and {task} are substituted per trial")
    env: dict[str, str] = Field(default_factory=dict, description="added to the runner's environment")
    harness_version: str = Field(description="content-derived id recorded in every result")
    harness_dir: str | None = None

    def command(self, spec_path: Path, task_path: Path) -> list[str]:
        return [a.replace("{spec}", str(spec_path)).replace("{task}", str(task_path)) for a in self.argv]


def tree_hash(root: Path) -> str:
    """sha256 over relative paths and contents of every file under ``root`` (caches excluded)."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root)
        if _SKIP_PARTS.intersection(rel.parts) or path.suffix == ".pyc":
            continue
        h.update(str(rel).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def oracle_agent() -> AgentSpec:
    return AgentSpec(kind="oracle", name="oracle", harness_version="oracle",
                     argv=[sys.executable, "-m", "trials.agents", "oracle", "--task", "{task}", "--spec", "{spec}"])


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def frozen_mismatches(harness_dir: Path, manifest: dict) -> list[str]:
    """Files of an unpacked frozen harness that differ from the manifest's hashes: changed, missing, or added
    (caches excluded). An empty list means the harness is exactly the frozen commit."""
    files: dict[str, str] = manifest.get("files") or {}
    bad = [rel for rel, digest in sorted(files.items())
           if not (harness_dir / rel).is_file() or _sha256((harness_dir / rel).read_bytes()) != digest]
    for path in sorted(p for p in harness_dir.rglob("*") if p.is_file()):
        rel = path.relative_to(harness_dir)
        if str(rel.as_posix()) not in files and not (_SKIP_PARTS.intersection(rel.parts) or path.suffix == ".pyc"):
            bad.append(f"{rel.as_posix()} (not in the manifest)")
    return bad


def _archive_manifest(path: Path) -> dict:
    """The manifest as the frozen file itself holds it (never the cached copy, which anyone may edit)."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            member = tar.extractfile("manifest.json")
            if member is None:
                raise KeyError("manifest.json")
            manifest = json.loads(member.read())
    except (tarfile.TarError, KeyError, OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a frozen harness (a gzipped tar with manifest.json): {exc}") from None
    if not isinstance(manifest, dict) or not manifest.get("files"):
        raise ValueError(f"{path}: manifest.json lists no file hashes; cannot verify the frozen harness")
    return manifest


def extract_frozen(path: Path) -> tuple[Path, dict]:
    """Unpack a frozen harness once per content hash and verify every file against the archive's manifest;
    returns (harness dir, manifest). ValueError naming the files when the unpacked copy (fresh or cached)
    differs: an edited cache must never run under the frozen commit's name."""
    digest = _sha256(path.read_bytes())
    manifest = _archive_manifest(path)
    dest = cache_root() / "frozen" / digest[:16]
    if not (dest / "manifest.json").is_file():
        tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        with tarfile.open(path, "r:gz") as tar:
            tar.extractall(tmp, filter="data")  # refuses absolute paths, .. and devices
        if not (tmp / "manifest.json").is_file() or not (tmp / "harness" / "main.py").is_file():
            raise ValueError(f"{path}: a frozen harness holds manifest.json and harness/main.py")
        try:
            os.replace(tmp, dest)
        except OSError:  # another process won the race; its copy is identical
            pass
    bad = frozen_mismatches(dest / "harness", manifest)
    if bad:
        shown = ", ".join(bad[:10]) + (f" and {len(bad) - 10} more" if len(bad) > 10 else "")
        raise ValueError(f"{path}: the unpacked harness in {dest / 'harness'} does not match the frozen "
                         f"manifest (commit {manifest.get('commit')}): {shown}; refusing to run it. Remove {dest} "
                         "to unpack afresh")
    return dest / "harness", manifest


# ---------------------------------------------------------------------------------------------- the oracle
async def run_oracle(task_dir: Path, spec_path: Path) -> int:
    """Upload ``solution/`` to ``/solution`` and run ``solve.sh`` in the trial's sandbox."""
    from .harness_api import AgentOutcome, TrialSpec, attach_environment
    from .tasks import load_task

    spec = TrialSpec.load(spec_path)
    task = load_task(task_dir)
    agent_dir = Path(spec.agent_dir)
    outcome = AgentOutcome(status="completed")
    try:
        if task.solution_dir is None:
            raise FileNotFoundError(f"{task.path}: the task has no solution/ folder")
        env = attach_environment(spec.env)
        await env.upload(task.solution_dir, "/solution")
        res = await env.exec("bash /solution/solve.sh", cwd=spec.workdir, env=dict(task.config.solution.env),
                             timeout=spec.timeout_sec, user=task.config.agent.user)
        (agent_dir / "oracle.log").write_text(f"$ bash /solution/solve.sh  (exit {res.returncode})\n"
                                              f"--- stdout\n{res.stdout}\n--- stderr\n{res.stderr}\n")
        outcome.episodes = 1
        outcome.metadata = {"returncode": res.returncode, "timed_out": res.timed_out}
        if res.timed_out:
            outcome.status, outcome.error_kind, outcome.error = "error", "timeout", "solve.sh timed out"
    except Exception as exc:  # noqa: BLE001 - the runner reads the outcome; a crash is an agent error
        outcome.status, outcome.error_kind, outcome.error = "error", "crash", f"{type(exc).__name__}: {exc}"
        infra = getattr(exc, "cause", None)
        if infra == "model_unreachable":
            outcome.error_kind = infra
    outcome.write(agent_dir)
    return 0 if outcome.status == "completed" else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trials.agents")
    sub = parser.add_subparsers(dest="agent", required=True)
    oracle = sub.add_parser("oracle", help="run the task's solution/solve.sh in the trial sandbox")
    oracle.add_argument("--task", required=True, type=Path)
    oracle.add_argument("--spec", required=True, type=Path)
    args = parser.parse_args(argv)
    return asyncio.run(run_oracle(args.task, args.spec))


if __name__ == "__main__":
    sys.exit(main())
