"""Which tests run on the same pytest-xdist worker (scripts/test.sh: ``-n 2 --dist loadgroup``).

A test goes, with the others of its group, to one worker, where they run one after another:

* the tests of one heavy shared part: ``model`` (the bundled llama-server uses every core, and its tests' turn
  limits are sized for a machine it has to itself), ``docker`` (one engine; image builds of the same tags) and
  ``ray`` (a local cluster of several processes). The first of these markers a test carries names its group.
* the tests of a module with a module-scoped fixture (a started server, a real round): split over two workers,
  the fixture would be set up twice.
* the tests that carry an ``xdist_group`` mark: those that build one thing once under a lock (the Harbor venv,
  ``tests/test_harbor_diff_support.HARBOR_VENV_GROUP``), where a second worker would only wait for the first.

Every other test is a unit of its own; it has its own ``tmp_path``, free ports, sandbox and ``TMUX_TMPDIR``.

xdist's own ``loadgroup`` reads the ``xdist_group`` mark into the node id, which pytest 9's structured node ids
no longer allow (the mark is silently lost). So the workers write ``{node id: group}`` to a folder the
controller made, right after collecting, and the controller's scheduler reads it before it splits the work.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import pytest

SERIAL_PARTS = ("model", "docker", "ray")
_DIR_KEY = "rise_xdist_groups"
_folder_key = pytest.StashKey[Path]()


def group_of(item: pytest.Item) -> str | None:
    """The group ``item`` runs in, or None where it may run anywhere."""
    part = next((name for name in SERIAL_PARTS if item.get_closest_marker(name)), None)
    if part:
        return part
    mark = item.get_closest_marker("xdist_group")
    if mark:
        return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    if any(d.scope in ("module", "class", "package") for chain in defs for d in chain):
        return f"module:{item.nodeid.split('::', 1)[0]}"
    return None


def _scheduler(config: pytest.Config, log, folder: Path):
    """LoadScope with the workers' groups as scopes; an ungrouped test is a scope of its own."""
    from xdist.scheduler import LoadScopeScheduling  # only here: the suite also runs without xdist

    class GroupScheduling(LoadScopeScheduling):
        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                self._groups = read_groups(folder)
                if not self._groups and not any(folder.glob("*.json")):  # lost without a word: refuse instead
                    raise pytest.UsageError(f"no worker wrote its test groups to {folder}")
            return self._groups.get(nodeid, nodeid)

    return GroupScheduling(config, log)


def read_groups(folder: Path) -> dict[str, str]:
    """``{node id: group}`` as the workers wrote it (the grouped tests only)."""
    return {k: v for path in sorted(folder.glob("*.json")) for k, v in json.loads(path.read_text()).items()}


class GroupTimes:
    """Controller: where the suite's minutes went, per group and per worker (issue 42: the CI log says which
    groups make the longest worker's share, so the next cut is chosen from a measurement)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.started = time.monotonic()
        self.groups: dict[str, str] | None = None
        self.seconds: dict[str, float] = defaultdict(float)  # group -> seconds (setup + call + teardown)
        self.tests: dict[str, set[str]] = defaultdict(set)
        self.workers: dict[str, set[str]] = defaultdict(set)  # group -> workers it ran on
        self.busy: dict[str, float] = defaultdict(float)  # worker -> seconds
        self.per_test: dict[str, float] = defaultdict(float)  # node id -> seconds (its three phases)
        self.ran_on: dict[str, str] = {}  # node id -> worker

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:  # each phase a worker reports
        node = getattr(report, "node", None)
        worker = getattr(getattr(node, "gateway", None), "id", None) or "controller"
        if self.groups is None:
            self.groups = read_groups(self.folder)
        group = self.groups.get(report.nodeid, "ungrouped")
        self.seconds[group] += report.duration
        self.tests[group].add(report.nodeid)
        self.workers[group].add(worker)
        self.busy[worker] += report.duration
        self.per_test[report.nodeid] += report.duration
        self.ran_on[report.nodeid] = worker

    def write_times(self, path: Path) -> None:
        """Every test's seconds, its group and worker, slowest first, as JSON at ``path`` (``RISE_TEST_TIMES``):
        the whole distribution, where ``--durations`` prints only the top of it."""
        groups = self.groups or {}
        rows = [{"test": node, "seconds": round(sec, 2), "group": groups.get(node, "ungrouped"),
                 "worker": self.ran_on.get(node)}
                for node, sec in sorted(self.per_test.items(), key=lambda kv: -kv[1])]
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"wall_s": round(time.monotonic() - self.started, 1),
                                   "busy_s": {w: round(b, 1) for w, b in sorted(self.busy.items())},
                                   "tests": rows}, indent=1))
        os.replace(tmp, path)

    def lines(self, top: int = 8) -> list[str]:
        if not self.busy:
            return []
        wall = time.monotonic() - self.started
        head = f"[test groups] wall {wall:.0f} s; " + ", ".join(
            f"{w} busy {s:.0f} s" for w, s in sorted(self.busy.items()))
        ranked = sorted(self.seconds.items(), key=lambda kv: -kv[1])
        shown = [f"{g} {s:.0f} s ({len(self.tests[g])} tests, {'+'.join(sorted(self.workers[g]))})"
                 for g, s in ranked[:top]]
        rest = ranked[top:]
        if rest:
            shown.append(f"{len(rest)} more groups {sum(s for _, s in rest):.0f} s")
        return [head, "[test groups] " + "; ".join(shown)]

    def pytest_terminal_summary(self, terminalreporter) -> None:
        for line in self.lines():
            terminalreporter.write_line(line)
        if (where := os.environ.get("RISE_TEST_TIMES", "").strip()) and self.per_test:
            self.write_times(Path(where))
            terminalreporter.write_line(f"[test groups] every test's time: {where}")


def configure(config: pytest.Config) -> None:
    """Controller: the folder the workers write their groups to, and the tally of their times."""
    if (hasattr(config, "workerinput") or not config.pluginmanager.hasplugin("xdist")
            or config.getvalue("dist") != "loadgroup"):
        return
    config.stash[_folder_key] = folder = Path(tempfile.mkdtemp(prefix="rise-xdist-groups-"))
    config.pluginmanager.register(GroupTimes(folder), "rise-group-times")


def unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(_folder_key, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def configure_node(node) -> None:
    folder = node.config.stash.get(_folder_key, None)
    if folder is not None:
        node.workerinput[_DIR_KEY] = str(folder)


def make_scheduler(config: pytest.Config, log):
    folder = config.stash.get(_folder_key, None)
    return _scheduler(config, log, folder) if folder is not None else None


def write_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Worker: write the groups of the collected tests for the controller."""
    folder = getattr(config, "workerinput", {}).get(_DIR_KEY)
    if not folder:
        return
    groups = {item.nodeid: group for item in items if (group := group_of(item))}
    path = Path(folder) / f"{config.workerinput['workerid']}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(groups))
    os.replace(tmp, path)

