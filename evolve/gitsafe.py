"""Host-side git that nothing in a worktree can steer: every git command the platform runs on the harness
repository or one of its worktrees goes through :func:`open_repo` or :func:`open_worktree`.

A candidate worktree is written by untrusted code (the implementer's commands and files). Git would run code it
finds there or is pointed to from there: hooks, ``core.fsmonitor``, filter/diff drivers, ``include`` files,
and, through a repointed ``.git`` file, all of these from a repository the worktree holds. So:

- the ``.git`` file of a worktree is verified before any command: a plain file naming
  ``<repo>/.git/worktrees/<id>``, whose ``gitdir`` file names this worktree's ``.git`` back (git writes both when
  it adds the worktree; the second lies outside the worktree). Anything else is refused with
  :class:`UnsafeRepository`;
- every command then gets that verified ``GIT_DIR`` and ``GIT_WORK_TREE`` in its environment, so git never reads
  the ``.git`` file again (no window between the check and the command);
- no system or global config (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``), and :data:`FORCED`
  set as command-line config (``GIT_CONFIG_COUNT``, which outranks every file): no hooks, no fsmonitor, no
  attributes file, no submodule recursion (a nested repository's own config would apply in its child git), no
  transport. The repository's own config lives in ``<repo>/.git``, out of every sandbox's reach.
"""

from __future__ import annotations

import os
from pathlib import Path

import git

# Command-line config for every host-side git command (outranks repository, global and system files).
FORCED: dict[str, str] = {
    "core.hooksPath": "/dev/null",        # no hook runs, wherever one was planted
    "core.fsmonitor": "false",            # the reproduced escape: a command run on every index refresh
    "core.attributesFile": "/dev/null",
    "core.pager": "cat",
    "core.sshCommand": "false",
    "submodule.recurse": "false",         # a nested repository would be entered with its own config
    "diff.ignoreSubmodules": "all",
    "status.submoduleSummary": "false",
    "safe.bareRepository": "explicit",    # a bare repository planted in a subfolder is never discovered
    "protocol.allow": "never",            # nothing is fetched or pushed from a worktree's say-so
}


class UnsafeRepository(RuntimeError):
    """A repository or worktree is not what the store made (its ``.git`` was repointed or replaced)."""


def safe_env(git_dir: Path, work_tree: Path) -> dict[str, str]:
    """The environment additions of one hardened git command (see the module docstring)."""
    env = {"GIT_DIR": str(git_dir), "GIT_WORK_TREE": str(work_tree), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_COUNT": str(len(FORCED))}
    for n, (key, value) in enumerate(FORCED.items()):
        env[f"GIT_CONFIG_KEY_{n}"], env[f"GIT_CONFIG_VALUE_{n}"] = key, value
    return env


def _harden(repo: git.Repo, git_dir: Path, work_tree: Path) -> git.Repo:
    if Path(repo.git_dir).resolve() != git_dir:
        raise UnsafeRepository(f"{work_tree}: git resolved its repository to {repo.git_dir}, not the verified "
                               f"{git_dir}; refusing to run git there")
    repo.git.update_environment(**safe_env(git_dir, work_tree))  # on every command of this Repo's ``git``
    return repo


def open_repo(path: Path) -> git.Repo:
    """The store's harness repository at ``path`` (its ``.git`` a folder), every command hardened."""
    path = Path(path).absolute()
    dot = path / ".git"
    if dot.is_symlink() or not dot.is_dir():
        raise UnsafeRepository(f"{path} is not the harness repository the store made: {dot} is not a folder")
    return _harden(git.Repo(path), dot.resolve(), path)


def verified_gitdir(worktree: Path, common_dir: Path) -> Path:
    """The git folder of linked worktree ``worktree`` of the repository whose ``.git`` is ``common_dir``, after
    checking both directions of the link; :class:`UnsafeRepository` names what is wrong."""
    worktree, common = Path(worktree).absolute(), Path(common_dir).resolve()
    dot = worktree / ".git"
    where = f"worktree {worktree}"
    if dot.is_symlink() or not dot.is_file():
        raise UnsafeRepository(f"{where}: {dot} is not the plain file git made (a link or a folder now); "
                               "refusing to run git there")
    text = dot.read_text(encoding="utf-8", errors="replace").strip()
    if not text.startswith("gitdir:") or "\n" in text:
        raise UnsafeRepository(f"{where}: {dot} does not hold one 'gitdir:' line; refusing to run git there")
    gitdir = (worktree / text.removeprefix("gitdir:").strip()).resolve()
    if gitdir.parent != common / "worktrees":
        raise UnsafeRepository(f"{where}: {dot} points at {gitdir}, not into {common / 'worktrees'} where the "
                               "store made it; refusing to run git there")
    back = gitdir / "gitdir"
    named = back.read_text(encoding="utf-8").strip() if back.is_file() else ""
    if not named or (gitdir / named).resolve() != dot.resolve():
        raise UnsafeRepository(f"{where}: {gitdir} belongs to another worktree ({named or 'none named'}); "
                               "refusing to run git there")
    return gitdir


def open_worktree(worktree: Path, common_dir: Path) -> git.Repo:
    """Linked worktree ``worktree`` of the repository at ``common_dir`` (its ``.git`` folder), verified
    (:func:`verified_gitdir`), every command hardened."""
    worktree = Path(worktree).absolute()
    gitdir = verified_gitdir(worktree, common_dir)
    return _harden(git.Repo(worktree), gitdir, worktree)


def nested_repositories(work_tree: Path) -> list[str]:
    """Folders below ``work_tree`` that hold a ``.git`` of their own (a repository planted in a worktree), as
    paths relative to it; their content is not looked into."""
    found: list[str] = []
    for folder, dirs, files in os.walk(work_tree):
        here = Path(folder)
        if here != work_tree and (".git" in dirs or ".git" in files):
            found.append(here.relative_to(work_tree).as_posix())
            dirs.clear()
        elif ".git" in dirs:
            dirs.remove(".git")
    return sorted(found)


def commit_all(repo: git.Repo, message: str) -> str:
    """Stage everything in ``repo``'s work tree but nested repositories and commit it, message verbatim, no hook
    (``--no-verify`` as well as :data:`FORCED`: GitPython's own ``index.commit`` runs hooks itself); returns HEAD
    (unchanged when nothing changed). A nested repository is left out (untracked): as a gitlink it is nothing a
    harness can run, and one without a commit makes ``git add`` fail."""
    work_tree = Path(str(repo.working_tree_dir))
    repo.git.add("-A", "--", ".", *(f":(exclude,literal){p}" for p in nested_repositories(work_tree)))
    if repo.is_dirty(index=True, working_tree=False):  # staged: all but what was left out
        repo.git.commit("--quiet", "--no-verify", "--cleanup=verbatim", "-m", message)
    return repo.head.commit.hexsha
