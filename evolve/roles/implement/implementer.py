"""The implementer role (the coding agent) and :func:`implement`: one proposal becomes a commit on the
candidate branch ``cand/rNN-slug``, in the candidate's own worktree, which the controller then takes as a
branch candidate (its existing creation stage: switches on, checks, screening, evaluation).

:func:`repair_hook` is the controller's ``repair(candidate_dir, failures)``: smoke and contract failures go back
to the implementer in the same worktree, at most ``max_repairs`` times per candidate (the controller's bound; each
repair is a booked unit, ``C:repair``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evolve.experiment.store import Experiment
from evolve.experiment.units import run_once
from evolve.roles.proposals.models import SLUG, ProposalSpec
from evolve.roles.runtime import (
    IMPLEMENTER_TOOLS,
    Limits,
    Role,
    RoleError,
    RoleResult,
    register_role,
    run_role,
)
from evolve.roles.runtime.backends import Backend
from evolve.roles.runtime.role import validate_inputs
from evolve.round.candidates import reset_worktree

log = logging.getLogger(__name__)
IMPLEMENT_MARK = "rise implementer"  # the first word differs from the controller's "rise candidate" commits


class ImplementedProposal(ProposalSpec):
    """The proposal as the implementer reads it: a :class:`ProposalSpec` (a missing tier is ``code``, the
    default) that names its mechanism and says what it does, and nothing the spec does not know."""

    model_config = ConfigDict(extra="forbid")
    mechanism: str = Field(pattern=SLUG, description="the mechanism's slug: also its contract file's name")
    summary: str = Field(min_length=10, description="what the harness will do differently")


class ImplementerInputs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    proposal: ImplementedProposal = Field(description="the proposal to implement")
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


def implement(exp: Experiment, round_no: int, spec: ProposalSpec, backend: Backend, *, slug: str,
              incumbent_dir: Path, role: Role = IMPLEMENTER, saved: Path | None = None,
              **run_options: Any) -> tuple[str, str, RoleResult]:
    """Run the implementer in ``cand/rNN-slug``'s worktree (made from the incumbent) and commit what it left.

    ``saved``: where the call's result is written before the commit (:func:`evolve.experiment.units.run_once`); when it is
    there already (a kill came after the call), the call is not made again: the worktree's edits are committed.
    Returns (branch, commit, result). A RoleError propagates with the worktree reset to the incumbent."""
    # a spec the implementer cannot take is a RoleInputError before any branch, worktree or call is made
    inputs = validate_inputs(role, {"proposal": spec.model_dump(mode="json")})
    base = exp.commit_of(exp.incumbent())
    branch, wt = exp.create_candidate(round_no, slug, base=base)

    def call() -> RoleResult:
        reset_worktree(exp, wt, base)  # a call a kill cut off left edits nobody booked
        return run_role(role, inputs, wt, backend, harness=wt, extra=_check_extra(exp, incumbent_dir, wt),
                        **run_options)

    try:
        result = run_once(saved, role, call) if saved is not None else call()
    except Exception:
        reset_worktree(exp, wt, base)
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
                before: Callable[[Path], None] | None = None,
                **run_options: Any) -> Callable[[Path, list[Any]], dict[str, Any]]:
    """The controller's repair callback: the failures go to the implementer in the candidate's worktree.

    ``specs`` maps a worktree folder name (``rNN-slug``) to its proposal; ``before(worktree)`` runs first (``rise
    evolve`` reserves the call in its budget there, and may refuse it). Returns ``{"changed": bool, "role_call":
    {...}}``: whether the worktree changed, and the call's transcript, usage and cost for the repair event."""
    from evolve.roles.analysis.pipeline import call_info, error_info

    def repair(candidate_dir: Path, failures: list[Any]) -> dict[str, Any]:
        spec = specs.get(Path(candidate_dir).parent.name)
        if spec is None or spec.tier == "settings":
            # not a candidate the implementer made (a person's patch, a settings-tier candidate): nobody to send it to
            return {"changed": False, "role_call": {}}
        if before is not None:
            before(Path(candidate_dir))
        repo = exp.worktree_repo(Path(candidate_dir))
        state = repo.git.status("--porcelain") + repo.head.commit.hexsha
        text = "\n".join(f"- {f}" for f in failures)[:6000]
        inputs = {"proposal": spec.model_dump(mode="json"), "failures": text}
        try:
            res = run_role(role, inputs, candidate_dir, backend_for(Path(candidate_dir).parent.name),
                           harness=candidate_dir, extra=_check_extra(exp, incumbent_dir, Path(candidate_dir)),
                           **run_options)
        except RoleError as exc:  # a failed repair is no repair: the check fails as it is (transcript kept)
            log.warning("repair of %s by the implementer failed: %s", candidate_dir, exc)
            return {"changed": False, "role_call": error_info(exc)}
        calls.append(res)
        changed = repo.git.status("--porcelain") + repo.head.commit.hexsha != state
        return {"changed": changed, "role_call": call_info(res)}

    return repair
