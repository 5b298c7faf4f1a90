"""``rise snapshot`` / ``rise restore`` (evolve.experiment.snapshot): a whole experiment carried in one file to a
machine or checkout that has lost it, over the synthetic two-round experiment of the report tests (real git, with
candidates' worktrees). No model, no sandbox: what a restored night then does is the resume's own tests."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evolve.experiment.audit import audit
from evolve.experiment.snapshot import MANIFEST, read, restore, save
from evolve.experiment.store import Experiment, StoreError
from rise.cli import app
from tests.test_report_support import build_experiment

runner = CliRunner()


@pytest.fixture(scope="module")
def exp(tmp_path_factory):
    root = tmp_path_factory.mktemp("snap")
    return build_experiment(root / "runs", root)


def _contents(root: Path) -> dict[str, str]:
    """Every file and link under ``root`` by relative path: a file's sha256, a link's target."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if name in ("experiment.lock", "experiment.lock.json") or "__pycache__" in rel:
                continue
            out[rel] = f"-> {os.readlink(p)}" if p.is_symlink() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def test_restore_elsewhere_gives_the_same_experiment(exp, tmp_path):
    before = _contents(exp.root)
    snap = tmp_path / "carry" / "demo.tar.xz"
    info = save(exp, snap)
    assert _contents(exp.root) == before, "saving changed the experiment"
    assert info.name == exp.root.name and info.root == str(exp.root)
    assert info.events == len(exp.ledger.events) > 0 and info.files > 10
    assert info.size < info.bytes_in, "the snapshot is not compressed"

    back, restored = restore(snap, tmp_path / "elsewhere")
    assert restored.root == tmp_path / "elsewhere" / exp.root.name
    after = _contents(restored.root)
    # the worktrees' .git files and the repository's worktree links name the new place; all else is the same
    moved = {k for k in before if k.endswith(("/.git", "/gitdir"))}
    assert moved, "the synthetic experiment has no worktree to carry"
    assert {k: v for k, v in after.items() if k not in moved} == {k: v for k, v in before.items() if k not in moved}
    assert set(after) == set(before)
    for wt in (restored.root / "worktrees").glob("*/harness"):
        repo = restored.worktree_repo(wt)  # verified to point at the restored repository, not the old one
        assert Path(repo.working_tree_dir) == wt
        assert str(exp.root) not in (wt / ".git").read_text()
    assert restored.versions() == exp.versions()
    assert [e.key for e in restored.ledger.events] == [e.key for e in exp.ledger.events]
    assert audit(restored).lines() == [line.replace(str(exp.root), str(restored.root))
                                       for line in audit(exp).lines()]
    assert back.taken == info.taken


def test_restore_never_replaces_an_experiment(exp, tmp_path):
    snap = save(exp, tmp_path / "s.tar.xz").path
    target = tmp_path / "runs" / exp.root.name
    target.mkdir(parents=True)
    (target / "mine.txt").write_text("keep")
    with pytest.raises(StoreError, match="exists"):
        restore(snap, tmp_path / "runs")
    assert [p.name for p in target.iterdir()] == ["mine.txt"]


def test_save_refuses_inside_the_experiment_and_while_held(exp, tmp_path):
    with pytest.raises(StoreError, match="inside the experiment"):
        save(exp, exp.root / "grids" / "x.tar.xz")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from evolve.experiment.lock import experiment_lock\n"
        "with experiment_lock(sys.argv[1]):\n    print('held', flush=True); time.sleep(60)"), str(exp.root)],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
    try:
        assert holder.stdout.readline().strip() == "held"
        res = runner.invoke(app, ["snapshot", str(exp.root), "-o", str(tmp_path / "busy.tar.xz")])
        assert res.exit_code == 1 and "in use by pid" in res.output, res.output
        assert not list(tmp_path.glob("*busy*")), "a refused snapshot left a file"
    finally:
        holder.kill()
        holder.wait()


def _tar(path: Path, members: dict[str, bytes], manifest: dict | None) -> Path:
    with tarfile.open(path, "w:xz") as tar:
        items = ([(MANIFEST, json.dumps(manifest).encode())] if manifest is not None else []) + list(members.items())
        for name, data in items:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return path


MAN = {"format": 1, "name": "demo", "root": "/x/demo", "taken": "2026-12-06T00:00:00+00:00", "events": 0,
       "files": 1, "bytes_in": 1}


def test_bad_snapshots_are_named_and_write_nothing(tmp_path):
    runs = tmp_path / "runs"
    (tmp_path / "junk.tar.xz").write_bytes(b"not a tar")
    cases = {
        "junk.tar.xz": "cannot read the snapshot",
        "nomanifest.tar.xz": _tar(tmp_path / "nomanifest.tar.xz", {"demo/experiment.toml": b""}, None) and
        "not a rise snapshot",
        "future.tar.xz": _tar(tmp_path / "future.tar.xz", {}, {**MAN, "format": 9}) and "format 9",
        "escape.tar.xz": _tar(tmp_path / "escape.tar.xz", {"demo/experiment.toml": b"", "other/x": b"1"}, MAN)
        and "outside the experiment",
        "dotdot.tar.xz": _tar(tmp_path / "dotdot.tar.xz", {"demo/../../evil": b"1"}, MAN) and "cannot unpack",
        "empty.tar.xz": _tar(tmp_path / "empty.tar.xz", {"demo/notes.txt": b""}, MAN) and "no experiment.toml",
    }
    for name, message in cases.items():
        with pytest.raises(StoreError) as err:
            restore(tmp_path / name, runs)
        assert name in str(err.value) and message in str(err.value), (name, str(err.value))
        assert not (runs / "demo").exists() and not (tmp_path / "evil").exists()
        assert not [p for p in runs.iterdir()] if runs.exists() else True, f"{name} left a folder behind"


def test_cli_snapshot_show_restore_and_record(exp, tmp_path):
    snap = tmp_path / "n.tar.xz"
    res = runner.invoke(app, ["snapshot", str(exp.root), "-o", str(snap)])
    assert res.exit_code == 0 and f"wrote {snap}" in res.output, res.output
    res = runner.invoke(app, ["restore", str(snap), "--show"])
    assert res.exit_code == 0 and "ledger events" in res.output and not (Path("runs") / exp.root.name).exists()
    res = runner.invoke(app, ["restore", str(snap), "--runs-dir", str(tmp_path / "r")])
    assert res.exit_code == 0 and "restored" in res.output, res.output
    assert Experiment(tmp_path / "r" / exp.root.name).versions() == exp.versions()
    res = runner.invoke(app, ["restore", str(snap), "--runs-dir", str(tmp_path / "r")])
    assert res.exit_code == 1 and "exists" in res.output

    out = tmp_path / "record"
    res = runner.invoke(app, ["record", str(exp.root), "-o", str(out), "--no-screenshot", "--snapshot"])
    assert res.exit_code == 0 and "snapshot: [snapshot.tar.xz]" in res.output, res.output
    readme = (out / "README.md").read_text()
    assert "snapshot.tar.xz" in readme and "not counted in its size" in readme
    assert read(out / "snapshot.tar.xz").events == len(exp.ledger.events)
    # a later record without --snapshot keeps naming the one there
    res = runner.invoke(app, ["record", str(exp.root), "-o", str(out), "--no-screenshot"])
    assert res.exit_code == 0 and "snapshot.tar.xz" in (out / "README.md").read_text()
