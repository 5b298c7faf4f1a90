"""Escape suite, issue 44 routes 5 and 6: a hostile harness in a real trial (the real runner, real bubblewrap, the
real local or Docker sandbox, real cgroups).

Route 5: root-only host files in the harness's view (``/etc/shadow``, a mode-600 root file the test puts in the
harness's own package and one it puts under ``/etc``), read directly and, through the sandbox channel, with
``/download`` and ``/exec cat``. None may come back.
Route 6: the harness forks 2000 processes, has its local sandbox hold more memory than the task's limit, then
touches 2 GiB itself. Each limit must hold, and ``result.json`` must name what was hit; the harness killed at
its memory limit is the candidate's failure (``failed``, ``agent_error``, kind ``memory_limit``), not ⊥."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import pytest

from trials import launch
from trials.endpoints.spec import EndpointSpec
from trials.environments.local import bwrap_available

REPO = Path(__file__).resolve().parents[2]
HELLO = REPO / "data" / "starter" / "hello-file"
GREEDY = Path(__file__).resolve().parent / "greedy_harness"
NO_MODEL = EndpointSpec(base_url="http://127.0.0.1:9/v1", model="none")

pytestmark = [pytest.mark.sandbox,
              pytest.mark.skipif(not bwrap_available(), reason="bubblewrap (bwrap) and nsenter are not installed"),
              pytest.mark.skipif(os.geteuid() != 0, reason="the root-only files and cgroups need a root runner")]


def _docker_ready() -> bool:
    from trials.environments.images import BASE_IMAGE, docker_available, docker_client, image_exists

    return docker_available() and image_exists(docker_client(), BASE_IMAGE)


def _env_or_skip(env_kind: str) -> None:
    if env_kind == "docker" and not _docker_ready():
        pytest.skip("no Docker engine or no base image (rise images base)")


@pytest.fixture
def etc_secret():
    """A root-only (0600) file under /etc with a fresh secret, removed afterwards."""
    secret = f"etc-secret-{uuid.uuid4().hex}"
    path = Path(f"/etc/rise-escape-{uuid.uuid4().hex[:8]}.key")
    path.write_text(secret + "\n")
    path.chmod(0o600)
    try:
        yield path, secret
    finally:
        path.unlink(missing_ok=True)


async def _greedy_trial(tmp_path: Path, monkeypatch, env_kind: str, targets: dict, extra=None):
    from monitor.agents import harness_agent
    from trials.runner import run_trial
    from trials.tasks.load import load_task

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("RISE_CACHE_DIR", "RISE_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    harness = tmp_path / "greedy_harness"
    shutil.copytree(GREEDY, harness, ignore=shutil.ignore_patterns("__pycache__"))
    if extra:
        extra(harness)
    (harness / "targets.json").write_text(json.dumps(targets))
    shutil.copytree(HELLO, tmp_path / "tasks" / "hello-file")
    trial = tmp_path / "job" / "hello__r1"
    try:
        res = await run_trial(load_task(tmp_path / "tasks" / "hello-file"), harness_agent(harness), NO_MODEL, trial,
                              env_kind, "escape", agent_timeout_sec=300)
    finally:
        launch._SPARES.close_all()
    record = json.loads((trial / "agent" / "escape.json").read_text())
    return res, record, json.loads((trial / "result.json").read_text())


@pytest.mark.parametrize("env_kind", ["local", pytest.param("docker", marks=pytest.mark.docker)])
async def test_root_only_host_files_stay_unreadable(tmp_path, monkeypatch, env_kind, etc_secret):
    """Route 5: neither the harness nor, through the channel, its sandbox reads a root-only host file."""
    _env_or_skip(env_kind)
    etc_path, etc_value = etc_secret
    own_value = f"own-secret-{uuid.uuid4().hex}"

    def plant(harness: Path) -> None:  # a root-only file inside the harness's own (visible) package
        key = harness / "private.key"
        key.write_text(own_value + "\n")
        key.chmod(0o600)

    files = ["/etc/shadow", str(etc_path), str(tmp_path / "greedy_harness" / "private.key")]
    res, record, _ = await _greedy_trial(tmp_path, monkeypatch, env_kind, {
        "mode": "root", "files": files, "through_sandbox": ["/etc/shadow", str(etc_path)]}, plant)
    # /etc's root-only files are masked (empty) in every view; the package's own is refused: not root
    for i, path in enumerate(files):
        assert record[f"read_{i}"] == "OK " or record[f"read_{i}"].startswith("REFUSED "), (path, record)
    assert record["read_2"].startswith("REFUSED PermissionError"), record
    seen = json.dumps(record)
    assert etc_value not in seen and own_value not in seen, record
    # the host's shadow never comes back (in docker, the sandbox's /etc/shadow is the image's own)
    host_view = [v for k, v in record.items() if k.startswith("read_") or env_kind == "local"]
    assert not any("root:" in str(v) for v in host_view), record
    if env_kind == "local":  # the sandbox (root inside) sees the host's /etc: masked, empty
        assert record["download_0"] == "OK " and record["download_1"] == "OK ", record
        assert record["cat_0"] == "rc=0 " and record["cat_1"] == "rc=0 ", record
    assert res.agent_status == "completed", (res.agent_error, record)
    assert record["uid"] != 0 and res.limits.harness_uid == record["uid"]


@pytest.mark.parametrize("env_kind", ["local", pytest.param("docker", marks=pytest.mark.docker)])
async def test_harness_and_sandbox_limits_hold_and_are_recorded(tmp_path, monkeypatch, env_kind):
    """Route 6: 2000 forks, a sandbox command over the task's memory, 2 GiB in the harness: each limit holds
    (default limits: harness 2048 MiB and 512 pids, sandbox the task's memory_mb) and result.json says so."""
    _env_or_skip(env_kind)
    for name in ("RISE_HARNESS_MEMORY_MB", "RISE_HARNESS_PIDS", "RISE_SANDBOX_PIDS"):
        monkeypatch.delenv(name, raising=False)
    task_mb = 1024  # hello-file's task.toml
    res, record, raw = await _greedy_trial(tmp_path, monkeypatch, env_kind, {
        "mode": "limits", "forks": 2000, "sandbox_mb": task_mb + 512, "alloc_mb": 2048})
    # what the harness managed (escape.json, written step by step): forks refused well short of 2000, the
    # sandbox unable to hold more than the task's memory, the harness's own 2 GiB cut short
    assert record["forks"]["forked"] < 600 and "Resource temporarily unavailable" in record["forks"]["error"]
    assert record["sandbox"]["held_mb"] < task_mb, record["sandbox"]
    assert record.get("allocated_mb", 0) < 2048, record
    # what result.json says: each limit, and which were hit; killed at its memory limit = the candidate's failure
    lim = res.limits
    assert lim.harness.pids == 512 and lim.harness.pids_refused > 0 and "harness_pids" in lim.hit
    if env_kind == "local":
        assert lim.sandbox.memory_mb == task_mb and lim.sandbox.oom_kills > 0 and "sandbox_memory" in lim.hit
    assert lim.harness.memory_mb == 2048 and lim.harness.oom_kills > 0 and "harness_memory" in lim.hit
    assert res.status == "failed" and res.failure_class == "agent_error" and res.agent_error_kind == "memory_limit"
    assert raw["limits"]["hit"] == lim.hit and any("memory limit" in n for n in res.notes)


async def test_where_the_machine_allows_neither_the_trial_says_so(tmp_path, monkeypatch):
    """A runner that cannot switch uid or make cgroups (not root, no delegation) still runs the trial, and the
    record says plainly what was not enforced (the machine's refusals stand in for a non-root runner)."""
    from trials import confine, limits

    confine.harness_identity.cache_clear()
    monkeypatch.setattr(confine, "harness_identity", lambda: "the runner is not root: harnesses run as its own uid 0")
    monkeypatch.setattr(limits, "make_cgroup", lambda *a: "no writable cgroup (test)")
    res, record, raw = await _greedy_trial(tmp_path, monkeypatch, "local", {
        "mode": "root", "files": [], "through_sandbox": []})
    assert res.agent_status == "completed" and record["uid"] == 0
    lim = raw["limits"]
    assert lim["harness_uid"] == 0 and lim["harness_uid_note"].startswith("the runner is not root")
    assert lim["harness"]["note"] == "harness limits not enforced: no writable cgroup (test)"
    assert lim["sandbox"]["note"] == "local sandbox limits not enforced: no writable cgroup (test)"
    assert {lim["harness_uid_note"], lim["harness"]["note"], lim["sandbox"]["note"]} <= set(res.notes)
