"""Stage 1 of a round: a candidate's branch and worktree from the incumbent, its patch applied, the switches of
the mechanisms whose contracts it adds or changes turned on in ``settings.toml``, one commit. Repairs later move
a candidate on to another commit; :meth:`CandidateCreation.current_commit` follows them."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import git
import tomlkit
from unidiff import PatchSet, UnidiffParseError

from evolve.experiment.identity import repaired_to
from evolve.experiment.ledger import CandidateCreated
from evolve.round.model import CandidateInput, ControllerError
from validate.contracts import changed_contracts, load_contracts
from validate.evaluate import kill_point

if TYPE_CHECKING:
    from evolve.experiment.store import Experiment

COMMIT_MARK = "rise candidate"


def patch_strip(patch: Path) -> int:
    """The ``-p`` level for a patch: 2 when its paths are under ``harness_seed/`` or ``harness/``."""
    try:
        files = PatchSet(patch.read_text())
    except UnidiffParseError as exc:
        raise ControllerError(f"{patch}: not a unified diff: {exc}") from None
    paths = [p for f in files for p in (f.source_file, f.target_file) if p != "/dev/null"]
    paths = [p.split("/", 1)[1] if p.startswith(("a/", "b/")) else p for p in paths]
    for prefix in ("harness_seed/", "harness/"):
        if paths and all(p.startswith(prefix) for p in paths):
            return 2
    return 1


def set_toml_value(path: Path, dotted: str, value: Any) -> bool:
    """Set one existing ``section.key`` of a TOML file in place (tomlkit keeps comments and layout); True when
    the file changed, False when the key is absent or already has ``value``."""
    doc = tomlkit.parse(path.read_text())
    *sections, name = dotted.split(".")
    node: Any = doc
    for part in sections:
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict) or name not in node or node[name] == value:
        return False
    old = node[name]
    new = tomlkit.item(value)
    if isinstance(old, tomlkit.items.Item) and old.trivia.comment:  # the switch's own comment stays
        new.trivia.comment_ws, new.trivia.comment = old.trivia.comment_ws, old.trivia.comment
    node[name] = new
    text = tomlkit.dumps(doc)
    if tomllib.loads(text) == tomllib.loads(path.read_text()):
        raise ControllerError(f"{path}: could not set {dotted} to {value!r}")
    path.write_text(text)
    return True


def reset_worktree(exp: Experiment, wt: Path, commit: str) -> None:
    """Back to ``commit``, edits and untracked files gone: what a call or step a kill cut off left behind (hardened
    git, evolve.gitsafe: the worktree's ``.git`` verified, no hook or config of the worktree runs)."""
    repo = exp.worktree_repo(wt)
    repo.git.reset("--hard", commit)
    repo.git.clean("-ffdx")  # -ff: a nested repository planted in the worktree goes too


def boundaries_added(candidate: Path, incumbent: Path) -> list[str]:
    """Boundaries of ``recording.toml`` the candidate adds to the incumbent's (screening's last resort)."""
    def targets(d: Path) -> list[str]:
        p = d / "recording.toml"
        return [b["target"] for b in tomllib.loads(p.read_text()).get("boundary", [])] if p.is_file() else []

    old = set(targets(incumbent))
    return [t for t in targets(candidate) if t not in old]


class CandidateCreation:
    """The creation stage of :class:`evolve.round.controller.Controller` (a collaborator: it uses the controller's ``exp``,
    ``led`` and ``version_dir``)."""

    def __init__(self, ctl: Any):
        self.ctl = ctl  # the round's controller: the experiment, the ledger, grids and the other stages

    def create(self, round_no: int, incumbent: str, cand: CandidateInput) -> tuple[str, Path]:
        """Make (or find again, after a kill) the candidate's commit and worktree; returns both."""
        key = f"r{round_no:02d}:{cand.slug}:created"
        found = self.ctl.led.find("candidate_created", key=key)
        branch = f"cand/r{round_no:02d}-{cand.slug}"
        if found:
            wt = self.ctl.exp.root / "worktrees" / f"r{round_no:02d}-{cand.slug}" / "harness"
            if not wt.exists():
                self.ctl.exp.create_candidate(round_no, cand.slug)
            return self.current_commit(found[0].commit), wt
        source = Path(cand.source)
        is_patch = source.is_file()
        base = self.ctl.exp.commit_of(incumbent) if is_patch else self.branch_base(incumbent, cand)
        branch, wt = self.ctl.exp.create_candidate(round_no, cand.slug, base=base)
        repo = self.ctl.exp.worktree_repo(wt)
        head = repo.head.commit
        ours = head.hexsha != base and head.message.startswith(COMMIT_MARK)
        if is_patch and not ours:
            if head.hexsha != base or repo.is_dirty(untracked_files=True):  # a half-made candidate of a kill
                reset_worktree(self.ctl.exp, wt, base)
            repo.git.apply(f"-p{patch_strip(source)}", "--whitespace=nowarn", str(source.resolve()))
        enabled = self.enable_switches(wt, self.ctl.version_dir(incumbent))
        commit = self.ctl.exp.commit_worktree(wt, f"{COMMIT_MARK} {cand.slug} (round {round_no}) from {source.name}")
        self.ctl.led.append(CandidateCreated(key=key, round=round_no, branch=branch, commit=commit, proposal={
            "source": str(source.resolve()) if is_patch else cand.source, "enabled": enabled,
            "proposal": cand.proposal.model_dump(mode="json"),
            # the group an evolve proposal targets, where analysis ranking looks for groups tried and rejected
            **({"group": g} if (g := cand.proposal.model_dump(mode="json").get("group")) else {})}))
        kill_point("created")
        return commit, wt

    def branch_base(self, incumbent: str, cand: CandidateInput) -> str:
        """The commit of a branch (or commit) candidate, refused unless it descends from the incumbent: a branch
        cut from an older version would, once adopted, silently drop every version adopted since."""
        try:
            commit = self.ctl.exp.commit_of(cand.source)
        except (git.BadName, ValueError):
            raise ControllerError(f"candidate {cand.slug}: {cand.source!r} is neither a patch file nor a branch or "
                                  f"commit of {self.ctl.exp.harness_dir}") from None
        head = self.ctl.exp.commit_of(incumbent)
        if not self.ctl.exp.repo.is_ancestor(head, commit):
            raise ControllerError(f"candidate {cand.slug}: {cand.source} ({commit[:12]}) does not descend from the "
                                  f"incumbent {incumbent} ({head[:12]}); adopting it would drop what {incumbent} "
                                  f"holds. Rebase it onto {incumbent} or submit it as a patch")
        return commit

    def check_patch(self, incumbent: str, cand: CandidateInput) -> None:
        """Refuse a patch that does not apply to the incumbent (``git apply --check``), naming the hunks."""
        source = Path(cand.source)
        try:
            self.ctl.exp.worktree_repo(self.ctl.version_dir(incumbent)).git.apply("--check", f"-p{patch_strip(source)}",
                                                            str(source.resolve()))
        except git.GitCommandError as exc:
            raise ControllerError(f"candidate {cand.slug}: {source} does not apply to the incumbent {incumbent}: "
                                  f"{str(exc.stderr).strip()}") from None

    def enable_switches(self, wt: Path, incumbent_dir: Path) -> dict[str, Any]:
        """Turn on the switch of each mechanism whose contract the candidate adds or changes."""
        contracts, _ = load_contracts(wt)
        enabled = {}
        for mech in changed_contracts(wt, incumbent_dir):
            c = contracts.get(mech)
            settings = wt / "settings.toml"
            if c is not None and settings.is_file() and set_toml_value(settings, c.setting.key, c.setting.on):
                enabled[c.setting.key] = c.setting.on
        return enabled

    def current_commit(self, commit: str) -> str:
        """Follow repairs: the commit the candidate created at ``commit`` has now (``C:repair`` events, or the
        ``repaired_to`` of a check in ledgers written before repairs were units of their own)."""
        moved = {e.commit: nxt for e in self.ctl.led.events if (nxt := repaired_to(e))}
        seen = {commit}
        while (nxt := moved.get(commit)) and nxt not in seen:
            commit = nxt
            seen.add(commit)
        return commit
