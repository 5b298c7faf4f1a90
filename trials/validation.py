"""One formatter of pydantic validation errors for every data format of the platform.

Each loader (task.toml, result.json, recording.toml, HANDBOOK.toml, contracts, experiment.toml) reports a
``ValidationError`` the same way: the field as a readable path (``cases[1] (claims).expect[0]``: an index is
followed by the item's name or id when it has one), pydantic's message without its "Value error, " prefix, an
unknown key called so, and optionally the value that was given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError


def field_path(loc: Sequence[Any], data: Any = None, label_keys: Sequence[str] = ("name", "id")) -> str:
    """``('cases', 1, 'expect', 0)`` → ``cases[1] (claims).expect[0]`` (labels read from ``data`` if given)."""
    out, node = "", data
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            node = node[part] if isinstance(node, list) and part < len(node) else None
            label = next((node[k] for k in label_keys if isinstance(node, dict) and isinstance(node.get(k), str)),
                         None)
            if label is not None:
                out += f" ({label})"
        else:
            out += ("." if out else "") + str(part)
            node = node.get(part) if isinstance(node, dict) else None
    return out


def error_message(err: dict[str, Any], with_input: bool = False) -> str:
    """One pydantic error's message as this platform words it."""
    if err["type"] == "extra_forbidden":
        return "unknown key"
    message = str(err["msg"]).removeprefix("Value error, ")
    if with_input and "input" in err and err["type"] != "missing":
        message += f" (got {err['input']!r})"
    return message


def problems(exc: ValidationError, data: Any = None, *, label_keys: Sequence[str] = ("name", "id"),
             with_input: bool = False) -> list[tuple[str | None, str]]:
    """Every error as (field path or None, message)."""
    return [(field_path(e["loc"], data, label_keys) or None, error_message(e, with_input)) for e in exc.errors()]


def first_problem(exc: ValidationError, data: Any = None, *, label_keys: Sequence[str] = ("name", "id")
                  ) -> tuple[str | None, str]:
    """The first error as (field, message), the message noting how many more there are."""
    found = problems(exc, data, label_keys=label_keys)
    field, message = found[0]
    return field, message + (f" (and {len(found) - 1} more)" if len(found) > 1 else "")


def describe(exc: ValidationError, data: Any = None, *, with_input: bool = False) -> str:
    """Every error on one line: ``field: message; field: message``."""
    return "; ".join(f"{field}: {message}" if field else message
                     for field, message in problems(exc, data, with_input=with_input))
