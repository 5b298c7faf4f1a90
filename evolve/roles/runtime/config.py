"""The ``[agents]`` section of experiment.toml (``ExperimentConfig.agents``; its loader names file and key in
every error): which backend and endpoint each role uses, limits, budget.

    [agents]
    backend = "openai"            # openai | claude | replay; the default for every role
    max_usd = 5.0                 # role calls of one round together
    [agents.endpoint]             # omit to use the experiment's [endpoint]
    base_url = "http://127.0.0.1:8000/v1"
    model = "qwen3-8b"
    [agents.claude]               # used by roles on the claude backend
    model = "claude-sonnet-4-5"
    api_key_env = "ANTHROPIC_API_KEY"   # the variable's name, never the key
    [agents.roles.implementer]
    backend = "claude"
    limits = { max_turns = 40, deadline_s = 1800 }
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evolve.roles.runtime.backends.settings import ClaudeSettings
from evolve.roles.runtime.role import Limits, Role
from trials.endpoints.spec import EndpointSpec
from trials.validation import problems as validation_problems

BackendKind = Literal["openai", "claude", "replay"]


class RoleOverride(BaseModel):
    model_config = ConfigDict(extra="forbid")
    backend: BackendKind | None = None
    endpoint: EndpointSpec | None = None
    limits: dict[str, Any] = Field(default_factory=dict, description="fields of Limits to change")


class AgentsConfig(BaseModel):
    """``[agents]``: every field has a default, so an experiment without the section still runs roles."""

    model_config = ConfigDict(extra="forbid")
    backend: BackendKind = "openai"
    endpoint: EndpointSpec | None = None
    claude: ClaudeSettings = Field(default_factory=ClaudeSettings)
    max_usd: float | None = Field(default=None, ge=0, description="budget of the role calls of one round")
    recordings: str | None = Field(default=None, description="folder of recordings for the replay backend")
    roles: dict[str, RoleOverride] = Field(default_factory=dict)

    def role_limits(self, role: Role) -> Role:
        """``role`` with the limits this config overrides (an unknown limit is an error naming it)."""
        override = self.roles.get(role.name)
        if override is None or not override.limits:
            return role
        try:
            limits = Limits.model_validate({**role.limits.model_dump(), **override.limits})
        except ValidationError as exc:
            where = f"agents.roles.{role.name}.limits"
            raise ValueError("; ".join(f"[{where}.{field}] {message}" if field else f"[{where}] {message}"
                                       for field, message in validation_problems(exc))) from None
        return role.model_copy(update={"limits": limits})

    def endpoint_for(self, role_name: str, default: EndpointSpec | None = None) -> EndpointSpec | None:
        """The OpenAI-compatible endpoint of a role: its override, then ``[agents.endpoint]``, then ``default``."""
        override = self.roles.get(role_name)
        return (override.endpoint if override else None) or self.endpoint or default

    def backend_for(self, role_name: str, default_endpoint: EndpointSpec | None = None):
        """The backend a role runs on, built from this config (the role's override first)."""
        from evolve.roles.runtime.backends import make_backend

        override = self.roles.get(role_name) or RoleOverride()
        kind = override.backend or self.backend
        endpoint = self.endpoint_for(role_name, default_endpoint)
        if kind == "claude":
            return make_backend("claude", None, settings=self.claude)
        if kind == "replay":
            if not self.recordings:
                raise ValueError("agents.recordings: the replay backend needs a folder of recordings")
            return make_backend("replay", recording=Path(self.recordings) / f"{role_name}.yaml")
        if endpoint is None:
            raise ValueError(f"agents.endpoint: role {role_name} runs on openai but no endpoint is configured")
        return make_backend("openai", endpoint)
