"""The Handbook format: stages of a harness, their behaviours, and where each behaviour lives in code.

A Handbook is one TOML file (``HANDBOOK.toml``) stored in the harness package it describes. It is read into
the pydantic models below and validated on read; an invalid file raises :class:`HandbookError` naming the file
and the field (``stages[2].behaviours[0] (parse.json).functions[1]``).

References are relative to the harness package so the same Handbook holds for the seed (``harness_seed``) and
for its copy in an experiment (``harness``):

- a function is ``module:qualname`` (``loop:Agent.step``, ``midharness.actor:build_actor``,
  ``midharness.tournament:ring_duels``);
- a setting is a dotted key of the package's ``settings.toml`` (``terminus.max_episodes``), or ``section.*``
  for every key under a table;
- a span is a boundary of the package's ``recording.toml``, written like a function, or a span the monitor
  opens itself, named ``rise.<name>`` (``rise.trial``: the root span of the whole harness process).
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from trials.validation import first_problem

SCHEMA_VERSION = 1
HANDBOOK_FILE = "HANDBOOK.toml"
RENDERED_FILE = "HANDBOOK.md"

_IDENT = r"[A-Za-z_]\w*"
FUNCTION_REF = re.compile(rf"^{_IDENT}(\.{_IDENT})*:{_IDENT}(\.{_IDENT})*$")
SETTING_KEY = re.compile(r"^[\w-]+(\.[\w-]+)*(\.\*)?$")
MONITOR_SPAN = re.compile(r"^rise\.[a-z_][a-z0-9_.]*$")
ITEM_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


class HandbookError(ValueError):
    """A Handbook file is missing or invalid; names the file and the field."""

    def __init__(self, path: str | os.PathLike, field: str | None, message: str):
        self.path, self.field, self.message = str(path), field, message
        where = self.path + (f" [{field}]" if field else "")
        super().__init__(f"{where}: {message}")


class _Strict(BaseModel):
    # A misspelt key ("setting" for "settings") must fail loudly, not vanish.
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


def _check_refs(values: list[str], what: str, *patterns: re.Pattern[str]) -> list[str]:
    for value in values:
        if not any(p.match(value) for p in patterns):
            raise ValueError(f"{value!r} is not a {what}")
    if len(set(values)) != len(values):
        dupes = sorted({v for v in values if values.count(v) > 1})
        raise ValueError(f"listed more than once: {', '.join(dupes)}")
    return values


class Behaviour(_Strict):
    """One thing the harness does, with the code, state, settings and spans that make it up."""

    id: str = Field(description="stable id, unique in the Handbook (e.g. 'parse.json')")
    name: str
    responsibility: str = Field(description="what this behaviour is for, in one or two sentences")
    triggers: list[str] = Field(default_factory=list, description="when it runs")
    functions: list[str] = Field(default_factory=list, description="implementing functions, module:qualname")
    state_read: list[str] = Field(default_factory=list)
    state_written: list[str] = Field(default_factory=list)
    exit_conditions: list[str] = Field(default_factory=list)
    settings: list[str] = Field(default_factory=list, description="dotted keys of settings.toml")
    spans: list[str] = Field(default_factory=list, description="recording.toml boundaries that evidence it")
    notes: str = ""

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not ITEM_ID.match(value):
            raise ValueError(f"{value!r}: ids are lower-case letters, digits, '.', '_' or '-'")
        return value

    @field_validator("functions")
    @classmethod
    def _functions(cls, values: list[str]) -> list[str]:
        return _check_refs(values, "module:qualname reference", FUNCTION_REF)

    @field_validator("spans")
    @classmethod
    def _spans(cls, values: list[str]) -> list[str]:
        return _check_refs(values, "module:qualname boundary or rise.<name> monitor span", FUNCTION_REF,
                           MONITOR_SPAN)

    @field_validator("settings")
    @classmethod
    def _settings(cls, values: list[str]) -> list[str]:
        return _check_refs(values, "dotted settings key", SETTING_KEY)

    def governs(self, key: str) -> bool:
        """Whether this behaviour names setting ``key`` itself or a ``section.*`` above it."""
        for name in self.settings:
            if name == key or (name.endswith(".*") and key.startswith(name[:-1])):
                return True
        return False


class Stage(_Strict):
    """A phase of the harness (main loop, parsing, dispatch...) grouping its behaviours."""

    id: str
    name: str
    summary: str = ""
    behaviours: list[Behaviour] = Field(default_factory=list)

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        return Behaviour._id(value)


class Handbook(_Strict):
    """The whole Handbook of one harness version."""

    schema_version: int = SCHEMA_VERSION
    harness: str = Field(default="", description="the package it describes, for people (references are relative)")
    title: str = "Harness Handbook"
    summary: str = ""
    stages: list[Stage] = Field(default_factory=list)

    @field_validator("schema_version")
    @classmethod
    def _version(cls, value: int) -> int:
        if value != SCHEMA_VERSION:
            raise ValueError(f"schema_version {value} is not supported (this reader knows {SCHEMA_VERSION})")
        return value

    @model_validator(mode="after")
    def _unique_ids(self) -> Handbook:
        seen_stages: set[str] = set()
        seen: dict[str, str] = {}
        for stage in self.stages:
            if stage.id in seen_stages:
                raise ValueError(f"stage id {stage.id!r} is used twice")
            seen_stages.add(stage.id)
            for behaviour in stage.behaviours:
                if behaviour.id in seen:
                    raise ValueError(f"behaviour id {behaviour.id!r} is used in stage {seen[behaviour.id]!r} "
                                     f"and again in stage {stage.id!r}")
                seen[behaviour.id] = stage.id
        return self

    # -- queries ----------------------------------------------------------------------------------------------

    def iter_behaviours(self) -> Iterator[tuple[Stage, Behaviour]]:
        """Every behaviour with its stage, in file order."""
        for stage in self.stages:
            for behaviour in stage.behaviours:
                yield stage, behaviour

    def behaviour(self, behaviour_id: str) -> Behaviour:
        """The behaviour with this id; KeyError naming the known ids otherwise."""
        for _, behaviour in self.iter_behaviours():
            if behaviour.id == behaviour_id:
                return behaviour
        known = ", ".join(b.id for _, b in self.iter_behaviours())
        raise KeyError(f"no behaviour {behaviour_id!r} in the Handbook (known: {known})")

    def stage_of(self, behaviour_id: str) -> Stage:
        for stage, behaviour in self.iter_behaviours():
            if behaviour.id == behaviour_id:
                return stage
        raise KeyError(behaviour_id)

    def behaviours_for_function(self, ref: str) -> list[Behaviour]:
        """Behaviours that list ``ref`` among their implementing functions."""
        return [b for _, b in self.iter_behaviours() if ref in b.functions]

    def behaviours_for_span(self, boundary: str) -> list[Behaviour]:
        """Behaviours evidenced by recorded boundary ``boundary``."""
        return [b for _, b in self.iter_behaviours() if boundary in b.spans]


# -- reading and writing --------------------------------------------------------------------------------------


def handbook_path(path: str | os.PathLike) -> Path:
    """The Handbook file for ``path``: the file itself, or ``HANDBOOK.toml`` inside a harness directory."""
    p = Path(path)
    return p / HANDBOOK_FILE if p.is_dir() else p


def parse_handbook(data: dict[str, Any], path: str | os.PathLike = "<handbook>") -> Handbook:
    """Validate already-parsed TOML data; errors name ``path`` and the first bad field."""
    try:
        return Handbook.model_validate(data)
    except ValidationError as exc:
        field, message = first_problem(exc, data, label_keys=("id",))
        raise HandbookError(path, field, message) from None


def load_handbook(path: str | os.PathLike) -> Handbook:
    """Read and validate the Handbook at ``path`` (a HANDBOOK.toml or the harness directory holding it)."""
    file = handbook_path(path)
    if not file.is_file():
        raise HandbookError(file, None, "no Handbook file here")
    try:
        data = tomllib.loads(file.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise HandbookError(file, None, f"not valid TOML: {exc}") from None
    return parse_handbook(data, file)


def loads_handbook(text: str, path: str = "<handbook>") -> Handbook:
    """Parse a Handbook from TOML text (e.g. a blob read from a git revision)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise HandbookError(path, None, f"not valid TOML: {exc}") from None
    return parse_handbook(data, path)


def dumps_handbook(handbook: Handbook) -> str:
    """TOML text for ``handbook`` (comments of a hand-written file are not kept)."""
    return tomli_w.dumps(handbook.model_dump(mode="json", exclude_defaults=False))


def save_handbook(handbook: Handbook, path: str | os.PathLike) -> Path:
    """Write ``handbook`` as TOML to ``path`` (a file, or a harness directory)."""
    file = handbook_path(path)
    file.write_text(dumps_handbook(handbook))
    return file
