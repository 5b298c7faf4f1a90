"""Alignment check: does a harness's Handbook still describe its code, settings and recording config?

The code is read with ``ast`` (never imported: a broken candidate must not run during a check). Problems:

- ``missing-function``: a behaviour names a function that is not defined (module file + qualname; methods in
  classes, async functions, re-exports through the package's own ``from .x import f`` are followed);
- ``unknown-span`` / ``unrecorded-span``: a behaviour's evidence span is not a function, or is not a boundary of
  ``recording.toml``;
- ``orphan-boundary``: a boundary of ``recording.toml`` no behaviour claims;
- ``ungoverned-setting``: a key of ``settings.toml`` no behaviour governs;
- ``unknown-setting``: a behaviour names a setting ``settings.toml`` does not have;
- ``unreadable-module`` / ``unreadable-config``: a module or a TOML file of the harness cannot be parsed;
- ``handbook``: the Handbook itself is missing or invalid; ``stale-rendering``: HANDBOOK.md is not what the
  TOML renders to.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .model import HANDBOOK_FILE, MONITOR_SPAN, RENDERED_FILE, Handbook, HandbookError
from .source import RECORDING_FILE, SETTINGS_FILE, HarnessSource


@dataclass(frozen=True)
class Problem:
    """One way the Handbook and the code disagree."""

    kind: str
    message: str
    behaviour: str | None = None  # the behaviour id the problem is about, when there is one
    name: str | None = None  # the missing or unclaimed name

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


@dataclass
class CheckReport:
    harness: str
    problems: list[Problem]
    behaviours: int = 0
    functions: int = 0
    boundaries: int = 0
    settings: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        counts = (f"{self.behaviours} behaviours, {self.functions} function references, "
                  f"{self.boundaries} recorded boundaries, {self.settings} settings")
        if self.ok:
            return f"Handbook of {self.harness} is aligned: {counts}"
        return f"Handbook of {self.harness}: {len(self.problems)} problem(s) ({counts})"


def check_source(source: HarnessSource, handbook: Handbook | None = None) -> CheckReport:
    """Check ``handbook`` (default: the one stored in the harness) against the harness ``source``."""
    report = CheckReport(source.name, [])
    problems = report.problems
    if handbook is None:
        try:
            handbook = source.handbook()
        except HandbookError as exc:
            problems.append(Problem("handbook", str(exc)))
            return report
    if handbook is None:
        problems.append(Problem("handbook", f"{source.origin} has no {HANDBOOK_FILE}"))
        return report

    for module in source.modules.values():
        if module.error:
            problems.append(Problem("unreadable-module", f"{module.file}: {module.error}", name=module.file))

    settings = boundaries = None
    unreadable_settings = unreadable_recording = False
    try:
        settings = source.settings()
    except HandbookError as exc:
        problems.append(Problem("unreadable-config", str(exc), name=SETTINGS_FILE))
        unreadable_settings = True
    try:
        boundaries = source.boundaries()
    except HandbookError as exc:
        problems.append(Problem("unreadable-config", str(exc), name=RECORDING_FILE))
        unreadable_recording = True
    report.settings = len(settings or {})
    report.boundaries = len(boundaries or [])

    for _stage, behaviour in handbook.iter_behaviours():
        report.behaviours += 1
        where = f"behaviour {behaviour.id!r} ({behaviour.name})"
        for ref in behaviour.functions:
            report.functions += 1
            res = source.resolve(ref)
            if res.definition is None:
                problems.append(Problem("missing-function", f"{where} names function {ref}: {res.problem}",
                                        behaviour.id, ref))
        for ref in behaviour.spans:
            if MONITOR_SPAN.match(ref):  # opened by the monitor itself, not by a boundary of the code
                continue
            if unreadable_recording:
                continue
            res = source.resolve(ref)
            if res.definition is None:
                problems.append(Problem("unknown-span", f"{where} names span {ref}: {res.problem}",
                                        behaviour.id, ref))
            if boundaries is None:
                problems.append(Problem("unrecorded-span", f"{where} names span {ref} but the harness has no "
                                        f"{RECORDING_FILE}", behaviour.id, ref))
            elif ref not in boundaries:
                problems.append(Problem("unrecorded-span", f"{where} names span {ref}, which {RECORDING_FILE} "
                                        "does not record", behaviour.id, ref))
        for key in behaviour.settings:
            if unreadable_settings:
                break
            if settings is None:
                problems.append(Problem("unknown-setting", f"{where} names setting {key} but the harness has no "
                                        f"{SETTINGS_FILE}", behaviour.id, key))
            elif key.endswith(".*"):
                if not any(k.startswith(key[:-1]) for k in settings):
                    problems.append(Problem("unknown-setting", f"{where} names settings {key}: {SETTINGS_FILE} "
                                            f"has no table [{key[:-2]}]", behaviour.id, key))
            elif key not in settings:
                problems.append(Problem("unknown-setting", f"{where} names setting {key}, which "
                                        f"{SETTINGS_FILE} does not define", behaviour.id, key))

    claimed = {ref for _, b in handbook.iter_behaviours() for ref in b.spans}
    for boundary in boundaries or []:
        if boundary not in claimed:
            problems.append(Problem("orphan-boundary", f"{RECORDING_FILE} records boundary {boundary}, which "
                                    "no behaviour lists among its spans", name=boundary))
    for key in settings or {}:
        if not any(b.governs(key) for _, b in handbook.iter_behaviours()):
            problems.append(Problem("ungoverned-setting", f"{SETTINGS_FILE} defines {key}, which no behaviour "
                                    "lists among its settings", name=key))
    return report


def check_harness(path: str | os.PathLike) -> CheckReport:
    """Check the Handbook stored in the harness directory ``path``, and that its HANDBOOK.md is current."""
    from .render import rendering_is_current  # render imports jinja2; keep check_source light

    root = Path(path)
    report = check_source(HarnessSource.from_dir(root))
    readable = (root / HANDBOOK_FILE).is_file() and not any(p.kind == "handbook" for p in report.problems)
    if readable and not rendering_is_current(root):
        report.problems.append(Problem("stale-rendering", f"{root / RENDERED_FILE} is missing or does not "
                                       "match HANDBOOK.toml; run `rise handbook render`", name=RENDERED_FILE))
    return report
