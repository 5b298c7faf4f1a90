"""What experiment.toml's ``[agents.claude]`` sets for the Claude Agent SDK backend (read by the config and the
backend, so neither imports the other)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from trials.endpoints.spec import PriceTable


class ClaudeSettings(BaseModel):
    """The Claude Agent SDK backend: a model, and optionally an Anthropic-style server other than Anthropic's."""

    model_config = ConfigDict(extra="forbid")
    model: str | None = Field(default=None, description="model id; None lets the CLI choose")
    base_url: str | None = Field(default=None, description="an Anthropic-style /v1/messages server")
    api_key_env: str = Field(default="ANTHROPIC_API_KEY", description="name of the variable holding the key")
    price: PriceTable = Field(default_factory=PriceTable)
    cli_path: str | None = Field(default=None, description="a claude CLI other than the SDK's bundled one")
