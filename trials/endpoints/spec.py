"""What a trial receives about its model: an OpenAI-compatible endpoint, never a server process."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, Field


class PriceTable(BaseModel):
    """US dollars per million tokens."""

    input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0
    cached_input_per_mtok: float | None = None

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6


class EndpointSpec(BaseModel):
    """An OpenAI-compatible chat endpoint (vLLM, llama.cpp's server, any hosted API)."""

    base_url: str = Field(description="e.g. http://127.0.0.1:8080/v1")
    model: str = Field(description="model id (served name) sent in each request")
    api_key_env: str | None = Field(default=None, description="name of the variable that holds the key")
    sampling: dict = Field(default_factory=dict, description="defaults such as temperature, top_p, max_tokens")
    context_limit: int | None = Field(default=None, description="tokens; None means ask the server")
    price: PriceTable = Field(default_factory=PriceTable)
    supports_n: bool | None = Field(default=None, description="server honours n>1; None means probe")
    supports_choice: bool | None = Field(default=None, description="vLLM structured_outputs choice")
    timeout_sec: float = 600.0
    max_output_tokens: int | None = Field(
        default=None, ge=1, description="ceiling on max_tokens for every request (slow CPU servers)")
    tool_calls: Literal["auto", "native", "schema"] = Field(
        default="auto", description="how agent roles call tools: native (the server's tool parser), schema (one "
        "JSON schema constrains every reply; for small models on llama.cpp, see "
        "evolve/roles/runtime/backends/schema_tools.py) or auto (schema on a llama.cpp server, else native)")

    def api_key(self) -> str:
        """The key from the named variable; servers without auth get a placeholder."""
        if self.api_key_env:
            return os.environ.get(self.api_key_env, "")
        return "EMPTY"
