"""``explorer``: a read-only role that answers a question about a workspace (a trial folder, a harness) with
evidence; the smallest real role, used to check the runtime end to end."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from evolve.roles.runtime.role import Limits, Role, register_role


class ExplorerInputs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question: str = Field(min_length=1)


class Evidence(BaseModel):
    path: str = Field(description="file the answer rests on, relative to the workspace")
    detail: str = Field(description="what that file shows")


class ExplorerAnswer(BaseModel):
    answer: str = Field(min_length=1, description="the answer to the question")
    evidence: list[Evidence] = Field(min_length=1, description="files read that support the answer")


EXPLORER = register_role(Role(
    name="explorer",
    description="You answer a question about the files in your workspace, citing the files you read.",
    template=Path(__file__).with_name("explorer.md.j2"),
    output=ExplorerAnswer,
    inputs=ExplorerInputs,
    tools=("list_dir", "read_file", "grep", "trajectory_step", "spans"),
    limits=Limits(max_turns=8, max_output_tokens=400, deadline_s=300, corrective_turns=2, min_tool_calls=2,
                  tool_output_chars=3000),  # small local models have small contexts
))
