"""Suite-wide hooks.

Tests that need a real part (tmux, bubblewrap, Docker, the bundled model) skip with a reason when the part is
missing. With ``RISE_REQUIRE_PARTS=1`` (set by scripts/test.sh under CI, right after scripts/setup.sh installed
every part) such a skip is reported as a failure instead, so a broken set-up cannot pass as green.
A skip whose reason starts with ``optional:`` (e.g. a vLLM-only path) stays a skip.

Under pytest-xdist (scripts/test.sh runs ``-n 2 --dist loadgroup``) tests/xdist_groups.py keeps the tests of one
heavy shared part (the bundled model, Docker, Ray), and those of a module with a module-scoped fixture, together
on one worker.
"""

from __future__ import annotations

import os

import pytest

from tests import xdist_groups


def pytest_configure(config):
    xdist_groups.configure(config)


def pytest_unconfigure(config):
    xdist_groups.unconfigure(config)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hooks: the suite also runs without it
def pytest_configure_node(node):
    xdist_groups.configure_node(node)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return xdist_groups.make_scheduler(config, log)


@pytest.hookimpl(trylast=True)  # after the deselection by -m / -k
def pytest_collection_modifyitems(config, items):
    xdist_groups.write_groups(config, items)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("RISE_REQUIRE_PARTS", "0") in ("", "0", "false"):
        return
    if report.skipped and call.when in ("setup", "call"):
        reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if "optional:" in reason:
            return
        report.outcome = "failed"
        report.longrepr = f"skipped while RISE_REQUIRE_PARTS=1 (a required part is missing): {reason}"


@pytest.fixture
def flaky_server():
    """The ``rise evolve`` tests' agent model: tests/test_evolve_support.py's FlakyClaimer over real HTTP (a
    ScriptedServer); skips, naming the part, where tmux or bubblewrap is missing."""
    from tests.fakes.openai_server import ScriptedServer
    from tests.test_controller_support import parts_missing
    from tests.test_evolve_support import FlakyClaimer

    if (why := parts_missing()):
        pytest.skip(why)
    with ScriptedServer(FlakyClaimer(), model="scripted") as srv:
        yield srv


@pytest.fixture(scope="session")
def seed_trial_on_bundled_model(tmp_path_factory):
    """One real seed trial of hello-file through ``rise eval`` on the bundled 0.5B (local sandbox, tmux, one
    episode, ``SEED_TRIAL_CAP`` tokens a reply, seed 7, temperature 0), run once for the tests that read it
    (tests/test_seed_model.py, tests/test_runner_seed_model.py, tests/test_inference_bundled_model.py): each ran
    the same trial of its own, most of a minute of the model worker apiece. Yields ``(rise eval's process, the
    job folder, its --json file)``; the tests assert its exit. Skips, naming the part, where the sandbox, tmux or
    the model is missing."""
    import shutil

    from tests.fakes.bundled import SEED_TRIAL_CAP, TEST_MODEL, bundled_server
    from tests.test_runner_sandbox import STARTER, _need_parts, rise_eval

    _need_parts()
    if shutil.which("tmux") is None:
        pytest.skip("tmux is needed by the seed harness")
    tmp = tmp_path_factory.mktemp("seed-trial")
    job, out = tmp / "job", tmp / "res.json"
    with bundled_server("test-seed-trial", ctx=8192, parallel=1, model=TEST_MODEL) as (_, spec):
        done = rise_eval("--tasks", str(STARTER), "--task", "hello-file", "--agent", "seed", "--env", "local",
                         "--base-url", spec.base_url, "--model", spec.model, "--setting", "terminus.max_episodes=1",
                         "--setting", f"model.max_tokens={SEED_TRIAL_CAP}", "--setting", "model.seed=7",
                         "--setting", "model.temperature=0", "--job-dir", str(job), "--json", str(out), timeout=450)
    yield done, job, out
