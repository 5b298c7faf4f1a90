"""The analysis roles (analyst: Compare, Wish, Revise per pair; grouper; reviewer) and the ``digest`` tool.

The roles run on the shared runtime (:mod:`evolve.roles.runtime`): a jinja2 template beside this module, a pydantic
answer from :mod:`evolve.roles.analysis.models`, read-only tools, limits. The ablation analyst
(:func:`analyst_role` with ``harness_evidence=False``) is the same role without the ``spans`` and ``handbook``
tools; its ``digest`` tool runs the trajectory-only detectors (``ToolContext.extra["digest_mode"]``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field

from evolve.roles.analysis.digest import DigestError, digest, render_digest
from evolve.roles.analysis.models import (
    AnalystInputs,
    FindingAnswer,
    GrouperInputs,
    GroupingAnswer,
    ReviewAnswer,
    ReviewerInputs,
)
from evolve.roles.runtime import Limits, Role, ToolContext, ToolError, register_role, tool

HERE = Path(__file__).parent


@tool("digest", group="read")
def digest_tool(ctx: ToolContext,
                trial: Annotated[str, Field(description="trial folder relative to the workspace")]) -> str:
    """Detector hits of one trial in episode order: parse errors, unexecuted keystrokes, early claims, loops..."""
    folder = ctx.resolve_trial(trial)
    mode = ctx.extra.get("digest_mode", "full")
    try:
        d = digest(folder, mode)
    except DigestError as exc:
        raise ToolError(str(exc)) from None
    return render_digest(d, behaviours=mode == "full")


FULL_TOOLS = ("digest", "trajectory_step", "spans", "handbook", "read_file", "grep")
ABLATION_TOOLS = ("digest", "trajectory_step", "read_file", "grep")

ANALYST = register_role(Role(
    name="analyst",
    description="You compare a successful and a failed run of the same task by the same harness and model, and "
                "say what the harness should have done differently (Compare, Wish, Revise).",
    template=HERE / "analyst.md.j2",
    output=FindingAnswer,
    inputs=AnalystInputs,
    tools=FULL_TOOLS,
    limits=Limits(max_turns=10, max_output_tokens=1500, deadline_s=1200, corrective_turns=2),
))

GROUPER = register_role(Role(
    name="grouper",
    description="You pool findings from several run pairs into groups that share one wish for the harness.",
    template=HERE / "grouper.md.j2",
    output=GroupingAnswer,
    inputs=GrouperInputs,
    tools=(),
    limits=Limits(max_turns=4, max_output_tokens=1200, deadline_s=900, corrective_turns=2),
))

REVIEWER = register_role(Role(
    name="reviewer",
    description="You independently review groups of findings: does each group's wish apply to every member, and "
                "are the groups distinct needs?",
    template=HERE / "reviewer.md.j2",
    output=ReviewAnswer,
    inputs=ReviewerInputs,
    tools=(),
    limits=Limits(max_turns=4, max_output_tokens=1200, deadline_s=900, corrective_turns=2),
))


def analyst_role(harness_evidence: bool = True) -> Role:
    """The analyst; without the spans and Handbook tools for the ``--no-harness-evidence`` ablation."""
    return ANALYST if harness_evidence else ANALYST.model_copy(update={"tools": ABLATION_TOOLS})


def with_limits(role: Role, **limits: object) -> Role:
    """``role`` with some Limits fields changed (a tiny model on CPU needs other bounds)."""
    return role.model_copy(update={"limits": role.limits.model_copy(update=limits)}) if limits else role
