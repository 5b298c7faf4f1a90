"""The settings tier: a candidate made from its proposal alone, with no coding agent and no model call.

:func:`make_settings_candidate` takes a settings-tier :class:`ProposalSpec` (switches and their new values, already
checked against the incumbent's Handbook and settings schema by :func:`evolve.roles.proposals.propose`) and, in
``cand/rNN-slug``'s worktree made from the incumbent:

1. checks the values again (the harness's own loader has the last word);
2. writes each value into ``settings.toml`` with a format-keeping edit (tomlkit: comments and layout stay);
3. resyncs the Handbook: each behaviour governing a changed key (:func:`handbook.resync.affected_behaviours`)
   gets a line in its notes saying the value and where it came from, and ``HANDBOOK.md`` is rendered again;
4. requires ``rise handbook check`` to pass, then commits.

A kill anywhere before the commit leaves edits nobody recorded: the next call starts again from the incumbent. A
kill after the commit, before the loop booked it: the next call finds that commit (its message and its parent) and
returns it, so a candidate is committed once however often its unit is resumed.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import tomlkit

from evolve.experiment.store import Experiment
from evolve.roles.proposals.models import ProposalSpec
from evolve.roles.proposals.switches import check_changes
from evolve.round.candidates import reset_worktree, set_toml_value
from handbook.check import check_harness
from handbook.model import HANDBOOK_FILE
from handbook.render import write_rendered
from handbook.resync import affected_behaviours
from handbook.source import HarnessSource
from trials import harness_settings
from trials.errors import RiseError
from validate.evaluate import kill_point

SETTINGS_MARK = "rise settings tier"
_NOTE = re.compile(r"\s*Evolved value: (?P<key>[\w.-]+) = [^\n]*")


class TierError(RiseError):
    """A settings-tier candidate cannot be made: the proposal's values or the resynced Handbook are not valid."""


def _show(value: Any) -> str:
    return tomlkit.item(value).as_string()


def _set_after_last_key(table: Any, key: str, value: str) -> None:
    """``table[key] = value``; a new key goes right after the table's last key, above the comments and blank
    lines that lead to the next table (tomlkit would append it below them)."""
    if key in table:
        table[key] = value
        return
    body = table.value.body
    last = max((i for i, (k, _) in enumerate(body) if k is not None), default=len(body) - 1)
    try:
        table.value._insert_at(last + 1, key, value)  # tomlkit has no public "insert at"
    except (AttributeError, IndexError, KeyError, ValueError):
        table[key] = value


def resync_handbook(incumbent_dir: Path, wt: Path, origin: str) -> dict[str, list[str]]:
    """Note each changed setting's value in the notes of the behaviours it governs (a format-keeping edit of
    ``HANDBOOK.toml``), render ``HANDBOOK.md`` again; behaviour id -> the keys noted there."""
    report = affected_behaviours(HarnessSource.from_dir(incumbent_dir), HarnessSource.from_dir(wt))
    values = harness_settings.read(wt)
    path = wt / HANDBOOK_FILE
    doc = tomlkit.parse(path.read_text())
    noted: dict[str, list[str]] = {}
    for item in report.affected:
        keys = [r.split()[1] for r in item.reasons if r.startswith("setting ") and r.endswith(" changed")]
        if not keys:
            continue
        for stage in doc.get("stages", []):
            for b in stage.get("behaviours", []):
                if b.get("id") != item.behaviour:
                    continue
                notes = str(b.get("notes", ""))
                for key in keys:  # one line per key: a later round's value replaces an earlier one
                    notes = "".join(part for part in re.split(r"(?=\s*Evolved value: )", notes)
                                    if not ((m := _NOTE.fullmatch(part)) and m["key"] == key))
                    notes = (notes.rstrip() + "\n" if notes.strip() else "") + \
                        f"Evolved value: {key} = {_show(harness_settings.lookup(values, key))} ({origin})"
                _set_after_last_key(b, "notes", notes)
                noted[item.behaviour] = keys
    path.write_text(tomlkit.dumps(doc))
    write_rendered(wt)
    return noted


def make_settings_candidate(exp: Experiment, round_no: int, spec: ProposalSpec, *, slug: str,
                            incumbent_dir: Path) -> tuple[str, str, dict[str, Any]]:
    """Make the candidate of a settings-tier proposal; returns (branch, commit, report). Raises
    :class:`TierError` naming the key or the Handbook problem when it cannot be made (the worktree is reset)."""
    if spec.tier != "settings" or not spec.settings:
        raise TierError(f"{slug}: not a settings-tier proposal with settings (tier {spec.tier})")
    base = exp.commit_of(exp.incumbent())
    branch, wt = exp.create_candidate(round_no, slug, base=base)
    repo = exp.worktree_repo(wt)  # hardened git (evolve.gitsafe): the worktree's .git verified, no hook runs
    values, problems = check_changes(incumbent_dir, dict(spec.settings))
    before = tomllib.loads(exp.repo.git.show(f"{base}:settings.toml"))
    changes = {key: [harness_settings.lookup(before, key), value] for key, value in values.items()}
    origin = f"round {round_no}, settings tier, {slug}"
    lines = "\n".join(f"{k}: {_show(old)} -> {_show(new)}" for k, (old, new) in changes.items())
    message = f"{SETTINGS_MARK}: {spec.mechanism} (round {round_no}, {slug})\n\n{lines}\n"
    head = repo.head.commit
    if not problems and head.hexsha != base and [p.hexsha for p in head.parents] == [base] \
            and head.message.strip() == message.strip() and not repo.is_dirty(untracked_files=True):
        # a kill after the commit, before its implementation event: the candidate is made, book that one (made
        # again it would be a second commit of the same candidate, the first left dangling)
        repo.git.clean("-ffdx")  # as commit_worktree would have: nothing the commit left out runs in the checks
        check = check_harness(wt)
        if check.ok:
            return branch, head.hexsha, _report(changes, _noted_in(wt, origin), check)
    reset_worktree(exp, wt, base)  # a kill before the commit left edits nobody recorded
    if problems:
        raise TierError(f"{slug}: " + "; ".join(problems))
    for key, value in values.items():
        if not set_toml_value(wt / "settings.toml", key, value):
            raise TierError(f"{slug}: setting {key} is not in {wt / 'settings.toml'} (or holds {value!r} already)")
    kill_point("settings-candidate")
    noted = resync_handbook(incumbent_dir, wt, origin)
    check = check_harness(wt)
    if not check.ok:
        reset_worktree(exp, wt, base)
        raise TierError(f"{slug}: the resynced Handbook does not pass `rise handbook check`: "
                        + "; ".join(str(p) for p in check.problems[:5]))
    commit = exp.commit_worktree(wt, message)
    kill_point("settings-commit")  # the kill tests' point between the commit and its implementation event
    return branch, commit, _report(changes, noted, check)


def _report(changes: dict[str, list[Any]], noted: dict[str, list[str]], check: Any) -> dict[str, Any]:
    return {"tier": "settings", "changes": changes, "handbook": noted, "handbook_check": check.summary(),
            "files": ["settings.toml", HANDBOOK_FILE, "HANDBOOK.md"]}


def _noted_in(wt: Path, origin: str) -> dict[str, list[str]]:
    """Behaviour id -> the keys whose value :func:`resync_handbook` noted there for ``origin`` (read back from a
    committed candidate's ``HANDBOOK.toml``)."""
    doc = tomllib.loads((wt / HANDBOOK_FILE).read_text())
    noted: dict[str, list[str]] = {}
    for stage in doc.get("stages", []):
        for b in stage.get("behaviours", []):
            keys = [m["key"] for part in re.split(r"(?=\s*Evolved value: )", str(b.get("notes", "")))
                    if (m := _NOTE.fullmatch(part)) and part.rstrip().endswith(f"({origin})")]
            if keys:
                noted[b["id"]] = keys
    return noted
