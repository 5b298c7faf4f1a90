"""The runtime every LLM role of a round shares (analyst, grouper, reviewer, researcher, proposer, implementer,
contract observer).

A **role** is a jinja2 prompt + a pydantic output model + a tool set + limits. :func:`run_role` renders the
prompt, runs it on a backend (``openai``, ``claude`` or ``replay``), validates the answer (an invalid one gets
``limits.corrective_turns`` corrective turns naming the failing fields, then a :class:`RoleError` naming them;
inputs that do not fit the role's input model are a :class:`RoleInputError` before anything is sent or paid),
writes one JSONL transcript per call and returns a :class:`RoleResult` (output, transcript, usage, cost, seconds).

Declare a role (the template sits beside the module; it renders the inputs, which its input model validates
before the call: every path the template reads must be declared there, see :mod:`.template_vars`)::

    from pathlib import Path
    from pydantic import BaseModel, ConfigDict
    from evolve.roles.runtime import Limits, Role, register_role

    class ReviewInputs(BaseModel):
        model_config = ConfigDict(extra="forbid")
        proposal: str

    class Verdict(BaseModel):
        mechanism: str
        tasks_at_risk: list[str]

    REVIEWER = register_role(Role(
        name="reviewer", description="You review one proposal against the traces.",
        template=Path(__file__).with_name("reviewer.md.j2"), output=Verdict, inputs=ReviewInputs,
        tools=("read_file", "grep", "spans", "digest"),
        limits=Limits(max_turns=10, max_output_tokens=800, deadline_s=600, max_usd=0.50),
    ))

Declare a tool (its signature is its JSON schema; its docstring its description; the registry makes it
available to every backend; ``group="write"`` marks implementer-only tools)::

    from typing import Annotated
    from pydantic import Field
    from evolve.roles.runtime import ToolContext, ToolError, tool

    @tool(group="read")
    def digest(ctx: ToolContext, trial: Annotated[str, Field(description="trial folder")]) -> str:
        \"\"\"Detector findings of one trial.\"\"\"
        folder = ctx.resolve(trial)   # confined to the workspace after symlinks, else refused
        ...
        raise ToolError("no spans.jsonl")  # the model sees "error: ..."

Call it::

    from evolve.roles.runtime import Budget, make_backend, run_role
    backend = make_backend("openai", endpoint)          # trials.endpoints.spec.EndpointSpec
    result = run_role(REVIEWER, {"proposal": text}, workspace, backend,
                      transcripts=round_dir / "transcripts", budget=Budget(max_usd=5.0))
    result.output, result.transcript, result.cost

From experiment.toml's ``[agents]``: ``AgentsConfig.backend_for(role_name)`` (see :mod:`evolve.roles.runtime.config`).
Use :func:`arun_role` from async code.
"""

# the built-in tools register themselves on import; importing any module of this package runs this first
from evolve.roles.runtime import fs_tools, implementer_tools, trace_tools  # noqa: F401
from evolve.roles.runtime.backends import BACKENDS, Backend, BackendJob, BackendReply, make_backend
from evolve.roles.runtime.budget import Budget
from evolve.roles.runtime.config import AgentsConfig
from evolve.roles.runtime.role import (
    Limits,
    Role,
    RoleError,
    RoleInputError,
    RoleResult,
    Usage,
    get_role,
    list_roles,
    register_role,
)
from evolve.roles.runtime.runtime import arun_role, run_role
from evolve.roles.runtime.tools import (
    ToolContext,
    ToolError,
    ToolRefused,
    ToolSpec,
    get_tool,
    list_tools,
    tool,
)
from evolve.roles.runtime.transcript import read_transcript

READ_ONLY_TOOLS: tuple[str, ...] = ("read_file", "list_dir", "grep", "trajectory_step", "spans", "handbook")
IMPLEMENTER_TOOLS: tuple[str, ...] = (*READ_ONLY_TOOLS, "write_file", "edit_file", "run", "check")

__all__ = [
    "BACKENDS", "IMPLEMENTER_TOOLS", "READ_ONLY_TOOLS", "AgentsConfig", "Backend", "BackendJob", "BackendReply", "Budget",
    "Limits", "Role", "RoleError", "RoleInputError", "RoleResult", "ToolContext", "ToolError", "ToolRefused", "ToolSpec", "Usage",
    "arun_role", "get_role", "get_tool", "list_roles", "list_tools", "make_backend", "read_transcript",
    "register_role", "run_role", "tool",
]
