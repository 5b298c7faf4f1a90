"""tests/xdist_groups.py: which tests share a pytest-xdist worker, and that two real workers keep to it (xdist's
own ``xdist_group`` mark was silently lost under pytest 9, so this is checked, not assumed)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.xdist_groups import group_of

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def shared():
    return object()


def test_a_marked_part_names_the_group(request):
    assert group_of(request.node) is None
    request.node.add_marker(pytest.mark.sandbox)
    assert group_of(request.node) is None  # a private sandbox: may run anywhere
    request.node.add_marker(pytest.mark.docker)
    request.node.add_marker(pytest.mark.model)
    assert group_of(request.node) == "model"  # the first of model, docker, ray: one group, never a joined one


def test_a_module_scoped_fixture_keeps_its_module_together(request, shared):
    assert group_of(request.node) == "module:tests/test_xdist_groups.py"


SAMPLE = '''
import os, pytest

def log(request):
    with open(os.environ["GROUPS_LOG"], "a") as f:
        print(os.environ["PYTEST_XDIST_WORKER"], request.node.name, file=f)

@pytest.fixture(scope="module")
def once():
    with open(os.environ["GROUPS_LOG"], "a") as f:
        print(os.environ["PYTEST_XDIST_WORKER"], "setup-once", file=f)

@pytest.mark.model
@pytest.mark.parametrize("i", range(4))
def test_model(i, request): log(request)

@pytest.mark.docker
@pytest.mark.parametrize("i", range(4))
def test_docker(i, request): log(request)

@pytest.mark.parametrize("i", range(4))
def test_free(i, request): log(request)
'''


@pytest.mark.skipif(importlib.util.find_spec("xdist") is None, reason="optional: pytest-xdist is not installed")
def test_two_workers_keep_each_group_on_one_of_them(tmp_path):
    (tmp_path / "conftest.py").write_text("from tests.conftest import *  # noqa: F403\n")
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    (tmp_path / "test_module.py").write_text(textwrap.dedent('''
        import os
        from test_sample import log, once  # noqa: F401

        def test_a(once, request): log(request)
        def test_b(once, request): log(request)
        def test_c(once, request): log(request)
    '''))
    log = tmp_path / "groups.log"
    env = {**os.environ, "GROUPS_LOG": str(log), "PYTHONPATH": f"{REPO}{os.pathsep}{tmp_path}",
           "RISE_REQUIRE_PARTS": "0", "RISE_TEST_TIMES": str(tmp_path / "times.json")}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
                          "loadgroup", "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = [line.split() for line in log.read_text().splitlines()]
    workers = {kind: {w for w, name in rows if name.startswith(kind)} for kind in ("test_model", "test_docker")}
    assert all(len(w) == 1 for w in workers.values()), rows
    assert sum(name == "setup-once" for _, name in rows) == 1, rows  # the module fixture ran on one worker only
    assert len({w for w, _ in rows}) == 2, rows  # and the work was shared
    # the run ends by saying where its time went: per worker, then per group with its tests and worker
    head, groups, where = [line for line in out.stdout.splitlines() if line.startswith("[test groups]")]
    assert "gw0 busy" in head and "gw1 busy" in head, out.stdout[-2000:]
    (model_worker,) = workers["test_model"]
    assert "model " in groups and f"(4 tests, {model_worker})" in groups.split("model ", 1)[1], groups
    assert "docker " in groups and "module:test_module.py " in groups and "(3 tests, " in groups, groups
    assert "ungrouped " in groups and "(4 tests, gw" in groups.split("ungrouped ", 1)[1], groups
    # and every test's own time, with its group and worker, goes to RISE_TEST_TIMES (slowest first)
    assert where.endswith(str(tmp_path / "times.json")), where
    times = json.loads((tmp_path / "times.json").read_text())
    by_test = {row["test"].rsplit("::", 1)[1]: row for row in times["tests"]}
    assert len(by_test) == 15 and set(times["busy_s"]) == {"gw0", "gw1"}, times
    assert [r["seconds"] for r in times["tests"]] == sorted((r["seconds"] for r in times["tests"]), reverse=True)
    assert by_test["test_a"]["group"] == "module:test_module.py" and by_test["test_a"]["worker"] in ("gw0", "gw1")
    assert {r["worker"] for r in times["tests"] if r["group"] == "model"} == {model_worker}
