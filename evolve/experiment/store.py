"""The experiment store: ``runs/<name>/`` with its frozen config, ledger and the harness git repository.

The harness repository (``runs/<name>/harness/``) *is* the harness package: its root holds the code copied from
``harness_seed/`` (relative imports only, so it runs unchanged as ``harness``), the Handbook, settings, recording
config and contracts. Tag ``vN`` is adopted version N; a candidate lives on branch ``cand/rNN-x`` and is checked
out as a worktree at ``runs/<name>/worktrees/rNN-x/harness`` (the last path part stays ``harness`` so the package
imports under the same name). All git work goes through GitPython, hardened by :mod:`evolve.gitsafe`: a worktree's
``.git`` is verified first, and no hook, fsmonitor or worktree-supplied config runs.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import git

from evolve.experiment.config import ExperimentConfig
from evolve.experiment.ledger import Ledger
from evolve.gitsafe import UnsafeRepository, commit_all, open_repo, open_worktree
from trials.errors import RiseError

SEED_DIR = Path(__file__).resolve().parents[2] / "harness_seed"
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")


class ControllerError(RiseError):
    """A round cannot go on: the experiment, its ledger or its harness repository is not as it must be."""


class StoreError(RuntimeError):
    pass


@dataclass
class Experiment:
    root: Path

    def __post_init__(self) -> None:
        # absolute: git runs inside the harness repository, where a relative worktree path lands in the wrong
        # place (runs/demo/harness/runs/demo/worktrees/... when the experiment was opened as runs/demo)
        self.root = Path(self.root).absolute()

    @property
    def config_path(self) -> Path:
        return self.root / "experiment.toml"

    @property
    def harness_dir(self) -> Path:
        return self.root / "harness"

    @property
    def ledger(self) -> Ledger:
        return Ledger(self.root / "ledger.jsonl")

    @property
    def config(self) -> ExperimentConfig:
        return ExperimentConfig.load(self.config_path)

    @property
    def repo(self) -> git.Repo:
        """The harness repository, every git command hardened (:func:`evolve.gitsafe.open_repo`)."""
        try:
            return open_repo(self.harness_dir)
        except UnsafeRepository as exc:
            raise StoreError(str(exc)) from None

    def worktree_repo(self, path: Path) -> git.Repo:
        """A worktree of the harness repository (a candidate's or a version's), its ``.git`` verified to point
        where the store made it and every git command hardened; :class:`StoreError` otherwise."""
        try:
            return open_worktree(path, self.harness_dir / ".git")
        except UnsafeRepository as exc:
            raise StoreError(str(exc)) from None

    def versions(self) -> list[str]:
        """Adopted versions, oldest first (v0, v1, ...)."""
        tags = [t.name for t in self.repo.tags if t.name.startswith("v") and t.name[1:].isdigit()]
        return sorted(tags, key=lambda t: int(t[1:]))

    def incumbent(self) -> str:
        return self.versions()[-1]

    def commit_of(self, rev: str) -> str:
        return self.repo.commit(rev).hexsha

    def create_candidate(self, round_no: int, slug: str, base: str | None = None) -> tuple[str, Path]:
        """Make branch ``cand/rNN-slug`` from ``base`` (the incumbent) and its worktree; returns both."""
        branch = f"cand/r{round_no:02d}-{slug}"
        path = self.root / "worktrees" / f"r{round_no:02d}-{slug}" / "harness"
        repo = self.repo
        if branch not in [h.name for h in repo.heads]:
            repo.create_head(branch, repo.commit(base or self.incumbent()))
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            repo.git.worktree("add", str(path), branch)
        return branch, path

    def commit_worktree(self, path: Path, message: str) -> str:
        """Commit everything in a candidate worktree; returns the commit. The worktree's ``.git`` is verified first
        and no hook, fsmonitor or worktree-supplied config runs (:mod:`evolve.gitsafe`). What the commit leaves out
        (ignored files such as ``__pycache__``, nested repositories) is then removed: the candidate's checks and
        trials run from this worktree, and an ignored bytecode file (an unchecked-hash ``.pyc`` is loaded without
        looking at its source) would run code that no diff, guard or reviewer sees."""
        repo = self.worktree_repo(path)
        commit = commit_all(repo, message)
        repo.git.clean("-ffdx")
        return commit

    def tag_version(self, commit: str, message: str) -> str:
        """Publish ``commit`` as the next version tag; idempotent if that commit is already tagged."""
        for t in self.repo.tags:
            if t.commit.hexsha == commit and t.name in self.versions():
                return t.name
        name = f"v{int(self.incumbent()[1:]) + 1}"
        self.repo.create_tag(name, ref=commit, message=message)
        return name


def init_experiment(name: str, config: ExperimentConfig, runs_dir: Path = Path("runs"),
                    seed_dir: Path = SEED_DIR) -> Experiment:
    """Create ``runs/<name>/``: frozen config, empty ledger, harness repo from the seed tagged v0."""
    root = runs_dir / name
    if (root / "experiment.toml").exists():
        raise StoreError(f"{root} already holds an experiment; pick another name or remove it")
    if not (seed_dir / "main.py").exists():
        raise StoreError(f"{seed_dir} is not a harness package (no main.py)")
    root.mkdir(parents=True, exist_ok=True)
    config = config.model_copy(update={"name": name})
    tmp = root / "experiment.toml.tmp"
    tmp.write_text(config.to_toml())
    hdir = root / "harness"
    if hdir.exists():
        shutil.rmtree(hdir)  # a half-made repo of a crashed init
    shutil.copytree(seed_dir, hdir, ignore=_IGNORE)
    (hdir / ".gitignore").write_text("__pycache__/\n*.pyc\n")
    repo = git.Repo.init(hdir, initial_branch="main")
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "rise")
        cw.set_value("user", "email", "rise@localhost")
    commit_all(open_repo(hdir), "v0: the seed harness (Terminus-2 + Mid-Harness)")
    repo.create_tag("v0", message="seed")
    (root / "ledger.jsonl").touch()
    tmp.replace(root / "experiment.toml")  # last: its presence means the experiment exists
    return Experiment(root)


def open_experiment(name_or_path: str, runs_dir: Path = Path("runs")) -> Experiment:
    root = Path(name_or_path)
    if not (root / "experiment.toml").exists():
        root = runs_dir / name_or_path
    if not (root / "experiment.toml").exists():
        raise StoreError(f"no experiment {name_or_path!r} (looked for {root}/experiment.toml)")
    exp = Experiment(root)
    try:  # read both once now, so every command reports a bad config or ledger as an error naming file and line
        exp.config  # noqa: B018
        exp.ledger  # noqa: B018
    except ValueError as exc:  # ExperimentConfig.load and LedgerError name the file (and the line or field)
        raise StoreError(str(exc)) from None
    return exp
