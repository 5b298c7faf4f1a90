"""Harness settings as data: the one place that reads, flattens, nests, merges and parses them.

A harness's mechanism settings live in ``settings.toml`` at the root of its package (``[terminus]
max_episodes = ...``); a trial overrides them with dotted keys (``{"terminus.max_episodes": 50}``) or nested
tables (``{"tmux": {"width": 120}}``), which reach the harness in its trial spec as given. Everything that reads
settings without importing harness code uses this module: the runner (``[tmux]`` for the terminal started with the
sandbox), the settings check, the CLI's ``--setting KEY=VALUE``, the Handbook and the evolver's views. The harness
itself nests and merges the spec's overrides with the same functions (``trials.harness_api`` exports them), so a
key means one thing on both sides of the trial spec.

The schema here (:class:`Defaults`) is the file's own: its keys, their default values and so their types. A
harness's settings models may know more (the seed's ``model.temperature`` has no line in the file) and are the
final word: ``trials.settings_check`` runs them, and names an unknown key with the keys that exist.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SETTINGS_FILE = "settings.toml"


class SettingError(ValueError):
    """A setting that cannot be taken: an unknown key, a value of the wrong type, or a malformed ``KEY=VALUE``
    (the message names the key)."""


def read(harness_dir: str | Path) -> dict[str, Any]:
    """The ``settings.toml`` of the harness at ``harness_dir`` as nested tables. Raises OSError,
    UnicodeDecodeError or tomllib.TOMLDecodeError; each caller says what a missing or bad file means to it."""
    return tomllib.loads((Path(harness_dir) / SETTINGS_FILE).read_text())


def flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` → ``{"a.b": 1}``: leaf keys as dotted names; arrays are values, not tables."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` laid over it, table into table (neither is changed)."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def nest(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``{"a.b": 1, "c": {"d": 2}}`` → ``{"a": {"b": 1}, "c": {"d": 2}}`` (dotted and nested may mix; a later
    key is laid over an earlier one). Raises TypeError for a key that goes below a value that is not a table."""
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        if isinstance(value, dict):
            value = nest(value)
        parts = key.split(".")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise TypeError(f"setting {key!r} goes below a value that is not a table")
        node[parts[-1]] = merge(node[parts[-1]], value) if isinstance(node.get(parts[-1]), dict) else value
    return out


def lookup(table: Mapping[str, Any], key: str, missing: Any = None) -> Any:
    """The value at dotted ``key`` of nested ``table``, or ``missing`` where there is none."""
    node: Any = table
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return missing
        node = node[part]
    return node


def section(overrides: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The overrides of one table (``tmux``), dotted or nested, as a flat dict of its keys; {} where the
    overrides do not nest (the harness's own loader reports that)."""
    try:
        found = nest(overrides).get(name)
    except TypeError:
        return {}
    return found if isinstance(found, dict) else {}


def json_schema_keys(schema: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted key -> the JSON schema of that one value, from a settings model's JSON schema (``$ref`` sections
    followed into ``$defs``)."""
    out: dict[str, Any] = {}

    def walk(node: Mapping[str, Any], name: str) -> None:
        if "$ref" in node:
            node = schema.get("$defs", {}).get(node["$ref"].rsplit("/", 1)[-1], {})
        props = node.get("properties")
        if props is None:
            out[name] = node
            return
        for sub_name, sub in props.items():
            walk(sub, f"{name}.{sub_name}" if name else sub_name)

    walk(schema, prefix)
    return out


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return "text"


def _fits(default: Any, value: Any) -> bool:
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, type(default))


@dataclass(frozen=True)
class Defaults:
    """The schema a ``settings.toml`` gives: each dotted key with its default (whose type is the key's)."""

    values: dict[str, Any]

    @classmethod
    def of(cls, table: Mapping[str, Any]) -> Defaults:
        return cls(flatten(table))

    @classmethod
    def of_harness(cls, harness_dir: str | Path | None) -> Defaults | None:
        """The defaults of the harness at ``harness_dir``; None without a readable ``settings.toml``."""
        if harness_dir is None:
            return None
        try:
            return cls.of(read(harness_dir))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            return None

    def __contains__(self, key: object) -> bool:
        return key in self.values

    def known(self, key: str) -> list[str]:
        """The keys beside ``key`` (its table's), or every key where its table is unknown too."""
        table = key.rpartition(".")[0]
        near = [k for k in self.values if k.rpartition(".")[0] == table]
        return sorted(near or self.values)

    def coerce(self, key: str, text: str) -> Any:
        """``text`` (a command line's VALUE) as the type of ``key``'s default: text keys take it as written
        (or as the JSON string it spells), other keys its JSON value (``null`` passes: the harness's model
        judges it). Raises :class:`SettingError` naming the key when it is unknown or the value does not fit."""
        if key not in self.values:
            raise SettingError(f"unknown setting {key} (known: {', '.join(self.known(key))})")
        default = self.values[key]
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        if isinstance(default, str):
            return value if isinstance(value, str) else text
        if value is None or _fits(default, value):
            return value
        raise SettingError(f"setting {key} wants {_type_name(default)} (default {json.dumps(default)}), "
                           f"got {text!r}")


def split_override(item: str) -> tuple[str, str]:
    """``"KEY=VALUE"`` → (key, value text); raises :class:`SettingError` when there is no ``=`` or no key."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise SettingError(f"--setting wants KEY=VALUE, got {item!r}")
    return key.strip(), value


def parse_overrides(items: Iterable[str], defaults: Defaults | None = None) -> dict[str, Any]:
    """``KEY=VALUE`` pairs as overrides. A key of ``defaults`` takes its default's type (:meth:`Defaults.coerce`);
    any other VALUE that parses as JSON (numbers, true/false, lists) is taken as such, else as text, and is the
    harness's own check's to judge (``trials.settings_check``: its models may know keys the file does not list)."""
    out: dict[str, Any] = {}
    for item in items:
        key, text = split_override(item)
        if defaults is not None and key in defaults:
            out[key] = defaults.coerce(key, text)
            continue
        try:
            out[key] = json.loads(text)
        except ValueError:
            out[key] = text
    return out
