"""The switches of a harness: the settings its Handbook lists for a behaviour, with their current values and the
values its own settings schema allows. A settings-tier proposal may set only these, only to such values.

Where each part comes from (nothing of the harness is imported into this process):

- which keys: the incumbent's ``HANDBOOK.toml`` (a behaviour's ``settings``; ``section.*`` covers a table);
- current values: its ``settings.toml``;
- allowed values: the JSON schema of its settings models (:func:`trials.settings_check.settings_schema`, a child
  process), and the final word on a value is the harness's own loader (:func:`trials.settings_check.check_settings`).

Free-text settings (names, paths, commands, model ids) are no switches: no schema bounds them, and a value a model
makes up for them changes what the harness talks to, not how it behaves.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from handbook.model import HandbookError, load_handbook
from trials import harness_settings
from trials.settings_check import SettingsError, check_settings, settings_schema

Value = bool | int | float | str


class Switch(BaseModel):
    """One setting a settings-tier proposal may change."""

    key: str
    behaviours: list[str] = Field(description="Handbook behaviour ids that list it")
    current: Value | None
    kind: str = Field(description="boolean | integer | number | choice")
    allowed: str = Field(description="what the schema allows, for people and the proposer")
    choices: list[Value] = Field(default_factory=list)

    def line(self) -> str:
        return f"{self.key} = {_show(self.current)} ({self.allowed})"


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return "unset" if value is None else str(value)


def _describe(schema: dict[str, Any]) -> tuple[str, str, list[Value]] | None:
    """(kind, allowed, choices) of one value's schema; None for free text."""
    options = schema.get("anyOf") or [schema]
    options = [o for o in options if o.get("type") != "null"]
    if len(options) != 1:
        return None
    node = options[0]
    if "enum" in node:
        return "choice", "one of " + ", ".join(_show(v) for v in node["enum"]), list(node["enum"])
    kind = node.get("type")
    if kind == "boolean":
        return "boolean", "true or false", [True, False]
    if kind in ("integer", "number"):
        low = (f"> {node['exclusiveMinimum']}" if "exclusiveMinimum" in node else
               f">= {node['minimum']}" if "minimum" in node else "")
        high = (f"< {node['exclusiveMaximum']}" if "exclusiveMaximum" in node else
                f"<= {node['maximum']}" if "maximum" in node else "")
        bounds = " and ".join(b for b in (low, high) if b)
        return kind, ("an integer" if kind == "integer" else "a number") + (f" {bounds}" if bounds else ""), []
    return None


def harness_switches(harness_dir: str | Path) -> list[Switch]:
    """The switches of the harness at ``harness_dir``, in Handbook order (a key once, with every behaviour that
    lists it). Raises :class:`HandbookError` or :class:`SettingsError` naming what could not be read."""
    root = Path(harness_dir)
    book = load_handbook(root)
    try:
        settings = harness_settings.read(root)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise HandbookError(root / "settings.toml", None, f"cannot read the settings: {exc}") from None
    schema = settings_schema(root)
    listed: dict[str, list[str]] = {}
    for _, b in book.iter_behaviours():
        for key in schema:
            if b.governs(key) and harness_settings.lookup(settings, key) is not None:
                listed.setdefault(key, []).append(b.id)
    out = []
    for key, behaviours in listed.items():
        described = _describe(schema[key])
        if described is not None:
            kind, allowed, choices = described
            out.append(Switch(key=key, behaviours=behaviours, current=harness_settings.lookup(settings, key), kind=kind,
                              allowed=allowed, choices=choices))
    order = {key: i for i, key in enumerate(k for _, b in book.iter_behaviours() for k in b.settings)}
    return sorted(out, key=lambda s: order.get(s.key, order.get(s.key.rsplit(".", 1)[0] + ".*", len(order))))


def coerce(switch: Switch, value: Any) -> Any:
    """``value`` as the switch's type where a model wrote it as text ("true", "3"); else unchanged (the
    harness's loader then names what is wrong with it)."""
    if isinstance(value, str):
        text = value.strip()
        if switch.kind == "boolean" and text.lower() in ("true", "false"):
            return text.lower() == "true"
        try:
            if switch.kind == "integer":
                return int(text)
            if switch.kind == "number":
                return float(text)
        except ValueError:
            return value
    if switch.kind == "number" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if switch.kind == "integer" and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def unchanged(switch: Switch, value: Any) -> bool:
    """Whether ``value`` (as the model wrote it: "4096", "true") is the switch's current value."""
    value = coerce(switch, value)
    return value == switch.current and type(value) is type(switch.current)


def _fits(switch: Switch, value: Any) -> bool:
    """Whether ``value`` has the switch's type (and is one of its choices, where it has them)."""
    if switch.kind == "boolean":
        return isinstance(value, bool)
    if switch.kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if switch.kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return any(value == c and type(value) is type(c) for c in switch.choices)


def check_changes(harness_dir: str | Path, changes: dict[str, Any],
                  switches: list[Switch] | None = None) -> tuple[dict[str, Any], list[str]]:
    """The changes coerced to their switches' types, and the problems that refuse them (each naming its key):
    a key the Handbook lists for no behaviour (or a free-text one), a value equal to the current one, a value
    outside the harness's settings schema (its own loader decides)."""
    switches = harness_switches(harness_dir) if switches is None else switches
    by_key = {s.key: s for s in switches}
    problems: list[str] = []
    values: dict[str, Any] = {}
    if not changes:
        problems.append("a settings-tier proposal must name at least one setting and its new value")
    owners = {b: s.key for s in switches for b in s.behaviours}
    for key, value in changes.items():
        sw = by_key.get(key)
        if sw is None:  # "<behaviour id>.<switch>", as the prompt lists them side by side (the 1.5B wrote that)
            sw = next((by_key[k] for b in owners for k in by_key
                       if key == f"{b}.{k}" and b in by_key[k].behaviours), None)
            if sw is not None:
                key = sw.key
        if sw is None:
            section = key.rsplit(".", 1)[0] + "."
            near = [k for k in by_key if k.startswith(section)]
            known = (f"its switches under {section}: {', '.join(near)}" if near else
                     f"its switches are under {', '.join(sorted({k.rsplit('.', 1)[0] for k in by_key})) or 'none'}")
            problems.append(f"setting {key} is not a switch the incumbent's Handbook lists for a behaviour "
                            f"({known})")
            continue
        value = coerce(sw, value)
        if unchanged(sw, value):
            problems.append(f"setting {key} is {_show(value)} already: a settings-tier proposal must change it")
            continue
        if not _fits(sw, value):  # 1 for true would pass the harness's lax loader and read oddly in the file
            problems.append(f"setting {key}: {_show(value)} is not allowed ({sw.allowed})")
            continue
        values[key] = value
    if values:
        try:
            check_settings(harness_dir, values)
        except SettingsError as exc:  # the harness's own loader names the key and what it expects
            problems.append(str(exc))
    return values, problems
