"""The host's git on a candidate worktree runs nothing the worktree supplies, even when the sandbox has let
something through (these tests write the hostile files on the host directly, as the sandbox before the fix
allowed): a repointed or replaced ``.git`` is refused with an error naming it before any git command; hooks,
fsmonitor (the repository's, a nested repository's, the user's global config), and filter drivers never run.
Real git, real files."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from evolve.experiment.store import StoreError
from evolve.gitsafe import nested_repositories
from evolve.round.candidates import reset_worktree as _reset
from evolve.round.controller import Controller
from tests.escape.scene import Scene, make_scene

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


@pytest.fixture
def scene() -> Iterator[Scene]:
    s = make_scene()
    try:
        yield s
    finally:
        s.close()


def _evil_repo(folder: Path, marker: Path) -> Path:
    """A repository whose config runs ``touch marker`` as fsmonitor and whose hooks do the same."""
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    subprocess.run(["git", "-C", str(folder), "config", "core.fsmonitor", f"touch {marker}; false"], check=True)
    for hook in ("pre-commit", "post-commit", "post-checkout", "reference-transaction"):
        path = folder / ".git" / "hooks" / hook
        path.write_text(f"#!/bin/sh\ntouch {marker}\n")
        path.chmod(0o755)
    return folder / ".git"


def test_a_repointed_git_file_is_refused_before_git_runs(scene: Scene) -> None:
    evil = _evil_repo(scene.wt / "evil", scene.marker)
    (scene.wt / ".git").write_text(f"gitdir: {evil}\n")  # the reproduced escape, as the old sandbox allowed it
    with pytest.raises(StoreError) as info:
        scene.exp.commit_worktree(scene.wt, "the host commits the candidate")
    assert ".git" in str(info.value) and "refusing to run git" in str(info.value)
    assert "evil" in str(info.value)
    with pytest.raises(StoreError):
        _reset(scene.exp, scene.wt, "v0")
    assert not scene.marker.exists()


@pytest.mark.parametrize("how", ["symlink", "folder", "another worktree", "two lines"])
def test_a_replaced_git_is_refused(scene: Scene, how: str) -> None:
    dot = scene.wt / ".git"
    if how == "symlink":
        target = _evil_repo(scene.root / "evil", scene.marker)
        dot.unlink()
        dot.symlink_to(target)
    elif how == "folder":
        dot.unlink()
        _evil_repo(scene.root / "evil", scene.marker)
        shutil.copytree(scene.root / "evil" / ".git", dot)
    elif how == "another worktree":  # an adopted version's checkout: its git folder names that worktree back
        other = Controller(scene.exp).version_dir("v0")
        dot.write_text((other / ".git").read_text())
    else:
        dot.write_text(f"{dot.read_text().strip()}\ngitdir: {scene.root}/evil/.git\n")
    with pytest.raises(StoreError) as info:
        scene.exp.commit_worktree(scene.wt, "m")
    assert str(scene.wt) in str(info.value) and "refusing to run git" in str(info.value)
    assert not scene.marker.exists()


def test_hooks_fsmonitor_filters_and_global_config_never_run(scene: Scene,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    mark = f"touch {scene.marker}"
    for folder in (scene.common / "hooks", scene.gitdir / "hooks"):  # both places git looks for hooks
        folder.mkdir(exist_ok=True)
        for hook in ("pre-commit", "commit-msg", "post-commit", "post-checkout", "reference-transaction",
                     "post-index-change"):
            (folder / hook).write_text(f"#!/bin/sh\n{mark}\n")
            (folder / hook).chmod(0o755)
    _evil_repo(scene.wt / "nested", scene.marker)       # a nested repository, no commit (git add would fail)
    home = scene.root / "home"
    (home / ".gitconfig").write_text(f"[core]\n\tfsmonitor = {mark}; false\n\thooksPath = {scene.common}/hooks\n"
                                     f"[filter \"evil\"]\n\tclean = {mark}; cat\n\tsmudge = {mark}; cat\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))  # from here on, a plain git would run the marker
    (scene.wt / ".gitattributes").write_text("* filter=evil diff=evil\n")
    (scene.wt / "added.py").write_text("x = 1\n")

    commit = scene.exp.commit_worktree(scene.wt, "the host commits the candidate\n\n#  kept verbatim\n")
    repo = scene.exp.worktree_repo(scene.wt)
    assert repo.head.commit.hexsha == commit and repo.head.commit.message.endswith("#  kept verbatim\n")
    assert {"added.py", ".gitattributes"} <= set(repo.git.ls_files().splitlines())
    # left out of the commit, then removed with everything else the commit left out (Experiment.commit_worktree)
    assert "nested" not in repo.git.ls_files() and nested_repositories(scene.wt) == []
    repo.git.status("--porcelain")
    scene.exp.repo.git.diff("v0", commit)
    Controller(scene.exp).version_dir("v0")               # git worktree add: post-checkout would run here
    _reset(scene.exp, scene.wt, "v0")                     # reset --hard + clean -ffdx: the nested one goes too
    assert not (scene.wt / "nested").exists() and not (scene.wt / "added.py").exists()
    assert not scene.marker.exists(), "a hook, fsmonitor or filter planted for the host's git ran"


def test_the_unhardened_git_would_have_run_them(scene: Scene) -> None:
    """The control: a hook planted the same way runs under plain git, so the test above would see it if the
    hardening were gone."""
    hook = scene.common / "hooks" / "pre-commit"
    hook.write_text(f"#!/bin/sh\ntouch {scene.marker}\n")
    hook.chmod(0o755)
    subprocess.run(["git", "-C", str(scene.wt), "commit", "-q", "--allow-empty", "-m", "plain"], check=True)
    assert scene.marker.exists()


def test_an_ignored_bytecode_file_does_not_survive_the_commit(scene: Scene) -> None:
    """An unchecked-hash .pyc is loaded without its source being looked at, and the harness repository ignores
    __pycache__: planted in the worktree it would run in every check and trial while no diff shows it."""
    import py_compile

    src = scene.wt / "harness_evil.py"
    src.write_text("VALUE = 'innocent'\n")
    cache = scene.wt / "__pycache__"
    cache.mkdir(exist_ok=True)
    pyc = cache / "planted.cpython-311.pyc"
    py_compile.compile(str(src), cfile=str(pyc), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    assert pyc.is_file()
    commit = scene.exp.commit_worktree(scene.wt, "the host commits the candidate")
    assert not pyc.exists() and not cache.exists()
    tree = scene.exp.repo.git.ls_tree("-r", "--name-only", commit).split()
    assert "harness_evil.py" in tree and not any(".pyc" in t or "__pycache__" in t for t in tree)
