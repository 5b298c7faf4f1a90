"""The contract between the runtime and a backend: one job in, one validated reply out (or a RoleError)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from evolve.roles.runtime.role import Role, Usage
from evolve.roles.runtime.tools import ToolContext, ToolSpec
from trials.endpoints.spec import PriceTable


@dataclass
class BackendJob:
    """Everything a backend needs for one call; tool calls go through ``tools.invoke`` with ``ctx``."""

    role: Role
    system: str
    prompt: str
    tools: list[ToolSpec]
    ctx: ToolContext
    deadline_s: float
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass
class BackendReply:
    output: BaseModel
    usage: Usage
    cost: float | None = None  # dollars the backend itself reported; None: from the price table


class Backend(Protocol):
    """What the runtime calls. ``name`` goes into transcripts and ``price`` turns tokens into dollars."""

    name: str
    price: PriceTable

    async def run(self, job: BackendJob) -> BackendReply:
        """Run the call to a validated output; raise RoleError otherwise (never return a partial answer)."""
        ...


def error_fields(exc: ValidationError) -> list[str]:
    """Dotted locations of the failing fields (``(root)`` for the answer as a whole)."""
    return sorted({".".join(str(p) for p in e["loc"]) or "(root)" for e in exc.errors()})
