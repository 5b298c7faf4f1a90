"""The prompt templates (``prompts/*.j2``): one jinja2 environment, strict about missing variables."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import jinja2

PROMPTS_DIR = Path(__file__).with_name("prompts")


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(PROMPTS_DIR),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=False,
        trim_blocks=True,
        autoescape=False,
    )


def render(name: str, **variables: object) -> str:
    """Render ``prompts/<name>.j2`` with ``variables`` (a missing variable is an error, not a blank)."""
    return _environment().get_template(f"{name}.j2").render(**variables)


def first_prompt_head(fmt: str = "json", max_duration: float = 60.0) -> str:
    """The part of the first prompt that every task shares (everything before the task's instruction): a model
    server can compute it once for all trials (trials/endpoints/bundled.py ``warm_slots``)."""
    text = render(f"prompt_{fmt}", instruction="\0", terminal_state="", refine_context=None,
                  max_duration=max_duration)
    return text.partition("\0")[0]
