"""Check a grid's harness settings before its first trial.

A misspelt ``--setting`` used to crash every trial of a grid, which then counted as the model's failures. The
check runs the harness's own settings loader (``<package>.settings.load_settings``, and the ``[midharness]``
model where the harness has one) in a confined subprocess (:mod:`trials.confine`), so a candidate's code is
never imported into the evaluator nor run on the host, and turns a rejection into one message naming the key
and the keys that exist.

``python -m trials.settings_check HARNESS_DIR OVERRIDES_JSON`` prints ``{"problems": [...]}``;
``python -m trials.settings_check --schema HARNESS_DIR`` prints the JSON schema of every settings key
(:func:`settings_schema`: what a settings-tier proposal may set, from the harness's own models).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from trials import confine, harness_settings
from trials.errors import RiseError
from trials.validation import error_message

CHECK_TIMEOUT_SEC = 60.0


class SettingsError(RiseError):
    """Harness settings a grid was asked to run with are not valid for that harness."""


def _fields(model: Any, loc: tuple) -> list[str]:
    """The keys that exist at ``loc`` (a tuple of names into ``model``), or [] when unknown."""
    for part in loc:
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        model = field.annotation
    return sorted(getattr(model, "model_fields", {}) or [])


def _describe(exc: Any, model: Any, prefix: tuple = ()) -> list[str]:
    problems = []
    for e in exc.errors():
        loc = prefix + tuple(str(p) for p in e["loc"])
        key = ".".join(loc)
        if e["type"] == "extra_forbidden":
            known = _fields(model, tuple(str(p) for p in e["loc"][:-1]))
            where = ".".join(loc[:-1])
            keys = ", ".join(f"{where}.{k}" if where else k for k in known)
            problems.append(f"unknown setting {key}" + (f" (known: {keys})" if known else ""))
        else:
            problems.append(f"setting {key}: {error_message(e, with_input=True)}")
    return problems


def _module_exists(dotted: str) -> bool:
    """Whether ``dotted`` and each package above it can be found (finding imports the packages above: one that
    exists but fails to import raises, which is an error, never "no such module")."""
    parts = dotted.split(".")
    return all(importlib.util.find_spec(".".join(parts[:i])) is not None for i in range(1, len(parts) + 1))


def check_in_process(harness_dir: Path, overrides: dict[str, Any]) -> list[str]:
    """The problems of ``overrides`` for the harness package at ``harness_dir`` (imports it: run in a child)."""
    sys.path.insert(0, str(harness_dir.parent))
    name = f"{harness_dir.name}.settings"
    if not _module_exists(name):
        return [f"{harness_dir} has no settings module, so it takes no settings (asked: {', '.join(overrides)})"]
    settings_mod = importlib.import_module(name)  # a module that exists but fails to import is an error, not "none"
    from pydantic import ValidationError

    try:
        nested = harness_settings.nest(overrides)
    except TypeError:  # the loader below names it
        nested = {}
    problems: list[str] = []
    try:
        settings_mod.load_settings({k: v for k, v in overrides.items() if not k.startswith("midharness")})
    except ValidationError as exc:
        problems += _describe(exc, getattr(settings_mod, "Settings", None))
    except (TypeError, ValueError) as exc:
        problems.append(str(exc))
    if isinstance(nested.get("midharness"), dict):  # a plain table in Settings; its own model checks it
        config_name = f"{harness_dir.name}.midharness.config"
        if not _module_exists(config_name):
            problems.append(f"{harness_dir} has no midharness.config module, so it takes no midharness settings "
                            f"(asked: {', '.join(k for k in overrides if k.startswith('midharness'))})")
        else:
            config = importlib.import_module(config_name)
            try:
                config.MidHarnessSettings.from_section(nested["midharness"])
            except ValidationError as exc:
                problems += _describe(exc, config.MidHarnessSettings, ("midharness",))
    return problems


def schema_in_process(harness_dir: Path) -> dict[str, Any]:
    """Every settings key of the harness package at ``harness_dir`` with its JSON schema (imports it: run in a
    child). A plain table (``[midharness]`` in the seed) takes its keys from its own model where there is one."""
    sys.path.insert(0, str(harness_dir.parent))
    name = f"{harness_dir.name}.settings"
    if not _module_exists(name):
        return {}
    model = getattr(importlib.import_module(name), "Settings", None)
    if model is None:
        return {}
    out = harness_settings.json_schema_keys(model.model_json_schema())
    config_name = f"{harness_dir.name}.midharness.config"
    if "midharness" in out and _module_exists(config_name):
        out.pop("midharness")
        mid = importlib.import_module(config_name).MidHarnessSettings.model_json_schema()
        out.update(harness_settings.json_schema_keys(mid, "midharness"))
    return out


def _child(args: list[str], harness_dir: Path, what: str) -> dict[str, Any]:
    """Run ``python -m trials.settings_check ARGS`` (the harness imported only there, confined as its trials are:
    trials/confine.py); its JSON answer."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")) if p)}
    try:
        done = confine.run_python(["-m", "trials.settings_check", *args], harness_dir, CHECK_TIMEOUT_SEC,
                                  f"{what} of {harness_dir}", env)
    except subprocess.TimeoutExpired:
        raise SettingsError(f"{what} of {harness_dir} took over {CHECK_TIMEOUT_SEC:.0f} s") from None
    except confine.ConfinementUnavailable as exc:
        raise SettingsError(str(exc)) from None
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise SettingsError(f"could not {what} of {harness_dir} (exit {done.returncode}): "
                            f"{(done.stderr or done.stdout).strip()[-800:]}") from None


def settings_schema(harness_dir: str | Path) -> dict[str, Any]:
    """Dotted settings key -> JSON schema of its value, from the harness's own settings models (in a child
    process, like :func:`check_settings`); {} for a harness without a settings model."""
    harness_dir = Path(harness_dir).resolve()
    return _child(["--schema", str(harness_dir)], harness_dir, "read the settings schema").get("schema", {})


def check_settings(harness_dir: str | Path | None, overrides: dict[str, Any]) -> None:
    """Raise :class:`SettingsError` when ``overrides`` are not valid for the harness at ``harness_dir``."""
    if not overrides:
        return
    if harness_dir is None:
        raise SettingsError(f"this agent takes no harness settings (asked: {', '.join(overrides)})")
    harness_dir = Path(harness_dir).resolve()
    try:
        problems = _child([str(harness_dir), json.dumps(overrides)], harness_dir, "check the settings")["problems"]
    except (KeyError, TypeError):
        raise SettingsError(f"could not check the settings of {harness_dir}: no problem list came back") from None
    if problems:
        raise SettingsError(f"harness {harness_dir.name} ({harness_dir}): " + "; ".join(problems))


if __name__ == "__main__":
    if sys.argv[1] == "--schema":
        print(json.dumps({"schema": schema_in_process(Path(sys.argv[2]))}))
    else:
        print(json.dumps({"problems": check_in_process(Path(sys.argv[1]), json.loads(sys.argv[2]))}))
