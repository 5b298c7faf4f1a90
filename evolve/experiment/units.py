"""Every paid call is a unit: its result is saved in the round folder the moment the call returns, before the
commit and the ledger event that finish the unit, and a resume that finds the saved result uses it instead of
calling again. So a kill at any point either books the call once or repeats nothing paid: before the result is
saved the call was cut off (its transcript has no ``end`` line; the resume makes it again, as ``rise audit``
shows), after it the call is booked from the file.

A failed call (:class:`RoleError`) is saved too, and raised again on resume: it cost as much as a good one. A call
refused before it started (bad inputs, a spent budget: ``started`` False) cost nothing and is not saved: a resume
tries it again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evolve.roles.runtime import Role, RoleError, RoleResult, Usage
from trials.harness_api import write_json_atomic
from validate.evaluate import kill_point

UNITS_DIR = "units"  # rounds/rNN/units/<unit>.json


def unit_file(round_dir: Path, key: str) -> Path:
    """Where the result of the unit ``key`` (a ledger key) is saved in its round's folder."""
    return round_dir / UNITS_DIR / (key.replace(":", "_").replace("/", "_") + ".json")


def write_unit(path: Path, data: dict[str, Any]) -> None:
    """Write a unit's saved result atomically (its folder made first)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, data)


def save_result(path: Path, res: RoleResult) -> None:
    """Write a call's result (its answer with it: the output is a subclass the model type does not know)."""
    write_unit(path, {"result": {**res.model_dump(mode="json", exclude={"output"}),
                                        "output": res.output.model_dump(mode="json")}})


def save_error(path: Path, exc: RoleError) -> None:
    write_unit(path, {"error": {"role": exc.role, "kind": exc.kind, "message": exc.message,
                                       "fields": exc.fields, "cost": exc.cost, "usage": exc.usage.model_dump(),
                                       "transcript": str(exc.transcript) if exc.transcript else None}})


def load_result(path: Path, role: Role) -> RoleResult:
    """The saved result of a call of ``role``; a saved failure is raised as the RoleError it was."""
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        if "error" in data:
            e = data["error"]
            raise RoleError(e["role"], e["kind"], e["message"], fields=e.get("fields"),
                            transcript=Path(e["transcript"]) if e.get("transcript") else None,
                            usage=Usage.model_validate(e.get("usage") or {}), cost=float(e.get("cost") or 0.0))
        r = data["result"]
        return RoleResult.model_validate({**r, "output": role.output.model_validate(r["output"])})
    except (KeyError, TypeError, ValueError) as exc:  # RoleError is none of these: a saved failure goes up
        raise ValueError(f"{path}: not a saved role result ({exc}); remove it to make the call again") from None


def run_once(path: Path, role: Role, call: Callable[[], RoleResult]) -> RoleResult:
    """``call()`` (a call of ``role``) unless ``path`` holds its result already; the result is saved first."""
    if path.is_file():
        return load_result(path, role)
    try:
        res = call()
    except RoleError as exc:
        if not exc.started:
            raise
        save_error(path, exc)
        kill_point(f"{role.name}-result")
        raise
    save_result(path, res)
    kill_point(f"{role.name}-result")  # the kill tests' point between a call's return and its booking
    return res
