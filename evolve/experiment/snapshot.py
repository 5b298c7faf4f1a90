"""A whole experiment in one file, to carry a night over a machine that is lost between its stretches.

``rise record`` keeps the compact evidence of a night (no traces); it cannot resume one. When the machine that ran
a stretch may not be there for the next (a fresh machine has no ``runs/`` and no cache), the experiment itself must
travel: :func:`save` packs its folder (ledger, frozen config, harness repository with its candidates' worktrees,
every grid and trial folder with its traces) into one xz-compressed tar with a manifest first, and :func:`restore`
unpacks it into a runs folder where no experiment of that name exists, so that ``rise evolve --resume`` goes on
from where the stretch stopped (the trial that was in flight has no result: the resume moves it aside and runs it
again, as after any kill).

Saving holds the experiment lock (:mod:`evolve.experiment.lock`): a running round is refused, never copied half
written. The file is written beside its final name and renamed, so a kill leaves the previous snapshot whole.
Restoring extracts with tarfile's ``data`` filter (no absolute or escaping names or links, no devices) into a
temporary folder beside the target and renames it; a restore into another absolute path re-points the candidates'
git worktrees, whose links are absolute.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from evolve.experiment.lock import HOLDER_NAME, LOCK_NAME, experiment_lock
from evolve.experiment.store import Experiment, StoreError

MANIFEST = "rise-snapshot.json"
FORMAT = 1
_SKIP_NAMES = {"__pycache__", ".pytest_cache", LOCK_NAME, HOLDER_NAME}
_SKIP_SUFFIXES = (".pyc",)


@dataclass(frozen=True)
class SnapshotInfo:
    """What a snapshot holds, from its manifest."""

    path: Path
    name: str  # the experiment's name (its folder under the runs folder)
    root: str  # the absolute folder it was taken from
    taken: str  # UTC, ISO 8601
    events: int  # ledger events at the time
    last_event: str  # the newest event's kind and key, or ""
    files: int
    bytes_in: int  # the experiment's bytes packed (before compression)
    code: str  # the platform's commit that took it, when known

    @property
    def size(self) -> int:
        return self.path.stat().st_size

    def line(self) -> str:
        return (f"{self.path}: experiment {self.name!r} taken {self.taken} from {self.root}, {self.events} ledger "
                f"events (last: {self.last_event or 'none'}), {self.files} files, {self.bytes_in / 2**20:.1f} MiB "
                f"packed into {self.size / 2**20:.1f} MiB")


def _code_commit() -> str:
    here = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "--short=12", "HEAD"], check=False, capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def _skip(path: Path) -> bool:
    return path.name in _SKIP_NAMES or path.name.endswith(_SKIP_SUFFIXES)


def _members(root: Path) -> list[Path]:
    """Every path under ``root`` to pack, parents before children, sorted (the same experiment packs the same)."""
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if not _skip(base / d))
        out.extend(base / d for d in dirnames)  # a link to a folder is packed as the link (walk does not follow)
        out.extend(base / f for f in sorted(filenames) if not _skip(base / f))
    return out


def save(exp: Experiment, out: Path) -> SnapshotInfo:
    """Pack the experiment into ``out`` (an ``.tar.xz``); refused while another process holds the experiment, and
    when ``out`` would lie inside it."""
    root = exp.root
    if not (root / "experiment.toml").is_file():
        raise StoreError(f"{root}: no experiment here (no experiment.toml)")
    out = Path(out).absolute()
    if out.resolve().is_relative_to(root.resolve()):
        raise StoreError(f"{out}: a snapshot may not be written inside the experiment it packs ({root})")
    out.parent.mkdir(parents=True, exist_ok=True)
    with experiment_lock(root):
        events = exp.ledger.events
        last = f"{events[-1].kind} {events[-1].key}" if events else ""
        members = _members(root)
        bytes_in = sum(p.lstat().st_size for p in members if p.is_file() and not p.is_symlink())
        manifest = {"format": FORMAT, "name": root.name, "root": str(root),
                    "taken": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "events": len(events),
                    "last_event": last, "files": len(members), "bytes_in": bytes_in, "code": _code_commit()}
        fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".part", dir=out.parent)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            with tarfile.open(tmp, "w:xz", preset=6) as tar:
                data = json.dumps(manifest, indent=1).encode()
                info = tarfile.TarInfo(MANIFEST)
                info.size, info.mtime, info.mode = len(data), int(dt.datetime.now().timestamp()), 0o644
                tar.addfile(info, io.BytesIO(data))
                for path in members:
                    tar.add(path, arcname=f"{root.name}/{path.relative_to(root)}", recursive=False)
            os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)
    return read(out)


def read(path: Path) -> SnapshotInfo:
    """The manifest of a snapshot (the first member; the rest is not read)."""
    path = Path(path)
    try:
        with tarfile.open(path, "r:xz") as tar:
            first = tar.next()
            if first is None or first.name != MANIFEST:
                raise StoreError(f"{path}: not a rise snapshot (its first member is not {MANIFEST})")
            fh = tar.extractfile(first)
            man = json.loads(fh.read()) if fh else {}
    except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
        raise StoreError(f"{path}: cannot read the snapshot: {exc}") from None
    if man.get("format") != FORMAT:
        raise StoreError(f"{path}: snapshot format {man.get('format')!r}, this version reads {FORMAT}")
    try:
        return SnapshotInfo(path=path, name=str(man["name"]), root=str(man["root"]), taken=str(man["taken"]),
                            events=int(man["events"]), last_event=str(man.get("last_event", "")),
                            files=int(man["files"]), bytes_in=int(man["bytes_in"]), code=str(man.get("code", "")))
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"{path}: the snapshot's manifest lacks {exc}") from None


def restore(path: Path, runs_dir: Path) -> tuple[SnapshotInfo, Experiment]:
    """Unpack the snapshot at ``path`` into ``runs_dir/<its name>``; refused when that folder exists (an
    experiment is never overwritten). Returns the manifest and the restored experiment."""
    info = read(path)
    runs_dir = Path(runs_dir).absolute()
    dest = runs_dir / info.name
    if dest.exists():
        raise StoreError(f"{dest} exists: a snapshot is restored only where no experiment of that name is "
                         f"(move it away, or pick another --runs-dir)")
    runs_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{info.name}.restoring-", dir=runs_dir) as tmp:
        try:
            with tarfile.open(path, "r:xz") as tar:
                for member in tar:
                    if member.name == MANIFEST:
                        continue
                    if member.name != info.name and not member.name.startswith(info.name + "/"):
                        raise StoreError(f"{path}: member {member.name!r} lies outside the experiment's folder")
                    tar.extract(member, tmp, filter="data")
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise StoreError(f"{path}: cannot unpack the snapshot: {exc}") from None
        unpacked = Path(tmp) / info.name
        if not (unpacked / "experiment.toml").is_file():
            raise StoreError(f"{path}: the snapshot holds no experiment.toml under {info.name}/")
        os.rename(unpacked, dest)
    exp = Experiment(dest)
    if str(dest) != info.root:
        _repair_worktrees(exp, info.root)
    return info, exp


def _repair_worktrees(exp: Experiment, old_root: str) -> None:
    """Re-point the harness repository and its worktrees at each other after a move: their links (a worktree's
    ``.git`` file, the repository's ``worktrees/<id>/gitdir``) are absolute and name the old folder. Only a link
    that lies under the old folder is rewritten (``git worktree repair`` would keep a link whose old target still
    exists, as where the experiment was restored beside itself)."""
    old, new = old_root.rstrip("/") + "/", str(exp.root) + "/"
    links = [*(exp.root / "worktrees").glob("*/harness/.git"), *(exp.harness_dir / ".git" / "worktrees").glob(
        "*/gitdir")]
    for link in links:
        if not link.is_file() or link.is_symlink():
            continue
        text = link.read_text()
        prefix = "gitdir: " if link.name == ".git" else ""
        target = text.removeprefix(prefix).strip()
        if text.startswith(prefix) and target.startswith(old):
            link.write_text(f"{prefix}{new}{target[len(old):]}\n")
