"""The implementer role (the coding agent) and :func:`implement`: one proposal becomes a commit on the
candidate branch ``cand/rNN-slug``, in the candidate's own worktree, which the controller then takes as a
branch candidate (its existing creation stage: switches on, checks, screening, evaluation).

:func:`repair_hook` is the controller's ``repair(candidate_dir, failures) -> bool``: smoke and contract failures go back
to the implementer in the same worktree, at most ``max_repairs`` times (the controller's bound)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import git
from pydantic import BaseModel, Field

from evolve.agents import IMPLEMENTER_TOOLS, Limits, Role, RoleError, RoleResult, register_role, run_role
from evolve.agents.backends import Backend
from evolve.proposals.models import ProposalSpec
from evolve.store import Experiment

log = logging.getLogger(__name__)
IMPLEMENT_MARK = "rise implementer"  # the first word differs from the controller's "rise candidate" commits


class ImplementerInputs(BaseModel):
    proposal: dict[str, Any] = Field(description="the ProposalSpec as JSON")
    failures: str = Field("", description="check failures to repair (empty for the first implementation)")


class ImplementerAnswer(BaseModel):
    """What the implementer reports when it finishes (the worktree itself is the result)."""

    summary: str = Field(min_length=10, description="what you changed and why")
    files: list[str] = Field(default_factory=list, description="files you created or changed")
    setting: str = Field("", description="the settings.toml key that switches the mechanism")
    contract: str = Field("", description="the contract file you wrote")
    check_passed: bool = Field(description="whether your last check() passed")


IMPLEMENTER = register_role(Role(
    name="implementer",
    description="You are a careful coding agent implementing one mechanism in an agent harness's git worktree.",
    template=Path(__file__).with_name("implementer.md.j2"),
    output=ImplementerAnswer,
    inputs=ImplementerInputs,
    tools=IMPLEMENTER_TOOLS,
    limits=Limits(max_turns=40, max_output_tokens=4000, deadline_s=2400, corrective_turns=2,
                  tool_output_chars=6000, run_timeout_s=180, max_repeated_failures=3),
))


def _reset(wt: Path, base: str) -> None:
    """Back to ``base``: a call killed halfway leaves edits nobody recorded."""
    repo = git.Repo(wt)
    repo.git.reset("--hard", base)
    repo.git.clean("-fdx")


def implement(exp: Experiment, round_no: int, spec: ProposalSpec, backend: Backend, *, slug: str,
              incumbent_dir: Path, role: Role = IMPLEMENTER, **run_options: Any) -> tuple[str, str, RoleResult]:
    """Run the implementer in ``cand/rNN-slug``'s worktree (made from the incumbent) and commit what it left.

    Returns (branch, commit, result). A RoleError propagates with the worktree reset to the incumbent."""
    base = exp.commit_of(exp.incumbent())
    branch, wt = exp.create_candidate(round_no, slug, base=base)
    _reset(wt, base)
    inputs = ImplementerInputs(proposal=spec.model_dump(mode="json"))
    try:
        result = run_role(role, inputs, wt, backend, harness=wt,
                          extra=_check_extra(exp, incumbent_dir, wt), **run_options)
    except Exception:
        _reset(wt, base)
        raise
    commit = exp.commit_worktree(wt, f"{IMPLEMENT_MARK}: {spec.mechanism} (round {round_no}, {slug})\n\n"
                                     f"{result.output.summary}")  # type: ignore[attr-defined]
    return branch, commit, result


def _check_extra(exp: Experiment, incumbent_dir: Path, wt: Path) -> dict[str, Any]:
    """What the ``check`` tool needs to run contracts against the incumbent."""
    return {"incumbent": incumbent_dir, "frozen_store": exp.root / "contracts_frozen.json",
            "check_out": exp.root / "checks" / "implementer" / wt.parent.name}


def diff_of(exp: Experiment, base: str, commit: str) -> str:
    """The candidate's change as a unified diff (what the overfitting guard reads)."""
    return exp.repo.git.diff(base, commit)


def repair_hook(exp: Experiment, backend_for: Callable[[str], Backend], specs: dict[str, ProposalSpec],
                incumbent_dir: Path, calls: list[RoleResult], role: Role = IMPLEMENTER,
                **run_options: Any) -> Callable[[Path, list[Any]], bool]:
    """The controller's repair callback: the failures go to the implementer in the candidate's worktree.

    ``specs`` maps a worktree folder name (``rNN-slug``) to its proposal; True when the worktree changed."""

    def repair(candidate_dir: Path, failures: list[Any]) -> bool:
        spec = specs.get(Path(candidate_dir).parent.name)
        if spec is None or spec.tier == "settings":
            return False  # not a candidate the implementer made (a person's patch, a settings-tier candidate)
        repo = git.Repo(candidate_dir)
        before = repo.git.status("--porcelain") + repo.head.commit.hexsha
        text = "\n".join(f"- {f}" for f in failures)[:6000]
        inputs = ImplementerInputs(proposal=spec.model_dump(mode="json"), failures=text)
        try:
            calls.append(run_role(role, inputs, candidate_dir, backend_for(Path(candidate_dir).parent.name),
                                  harness=candidate_dir, extra=_check_extra(exp, incumbent_dir, Path(candidate_dir)),
                                  **run_options))
        except RoleError as exc:  # a failed repair is no repair: the contracts fail as they are (transcript kept)
            log.warning("repair of %s by the implementer failed: %s", candidate_dir, exc)
            return False
        return repo.git.status("--porcelain") + repo.head.commit.hexsha != before

    return repair
