"""Escape suite, candidate code: a hostile harness in a real trial (the real runner, real bubblewrap, the real
local or Docker sandbox, real HTTP to a scripted model that requires a key) and a hostile package under the
smoke check. Every attempt must be blocked, recorded in the trial's stdout.log and escape.json, and leave no
file behind; the allowed doors (its model through the channel, its sandbox through the channel) must work."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import uuid
from pathlib import Path

import pytest

from tests.fakes.openai_server import ScriptedServer
from tests.test_seed_support import reply
from trials import confine, launch
from trials.cache import cache_root
from trials.endpoints.spec import EndpointSpec
from trials.environments.local import bwrap_available

REPO = Path(__file__).resolve().parents[2]
HELLO = REPO / "data" / "starter" / "hello-file"
HOSTILE = Path(__file__).resolve().parent / "hostile_harness"
KEY_VAR, SECRET_VAR = "RISE_ESCAPE_MODEL_KEY", "RISE_ESCAPE_SECRET"
ALLOWED_ENV = {"HOME", "LANG", "PATH", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONNOUSERSITE", "PWD",
               "RISE_CHANNEL", "RISE_TRIAL_SPEC", "TMPDIR", *confine.ENV_ALLOW}

pytestmark = [pytest.mark.sandbox,
              pytest.mark.skipif(not bwrap_available(), reason="bubblewrap (bwrap) and nsenter are not installed")]


def _docker_ready() -> bool:
    from trials.environments.images import BASE_IMAGE, docker_available, docker_client, image_exists

    return docker_available() and image_exists(docker_client(), BASE_IMAGE)


@pytest.fixture
def listener():
    """A TCP listener on 127.0.0.1 that is not the model."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


def _setup(tmp_path: Path, monkeypatch, port: int) -> dict:
    """The hostile harness, a copy of hello-file, a temporary HOME with a secret, secrets in the environment."""
    harness = tmp_path / "hostile_harness"
    shutil.copytree(HOSTILE, harness, ignore=shutil.ignore_patterns("__pycache__"))
    tasks = tmp_path / "tasks"
    shutil.copytree(HELLO, tasks / "hello-file")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".netrc").write_text("machine models login me password home-secret-value\n")
    monkeypatch.setenv("HOME", str(home))
    for name in ("RISE_CACHE_DIR", "RISE_CACHE", "XDG_CACHE_HOME"):  # the rise cache (spares) under this HOME too
        monkeypatch.delenv(name, raising=False)
    key, secret = f"sk-escape-{uuid.uuid4().hex}", f"secret-{uuid.uuid4().hex}"
    monkeypatch.setenv(KEY_VAR, key)
    monkeypatch.setenv(SECRET_VAR, secret)
    tag = uuid.uuid4().hex[:8]
    write = [str(tmp_path / "job" / f"escaped-{tag}.txt"), str(harness / f"escaped-{tag}.txt"),
             str(REPO / "trials" / f"escaped-{tag}.txt"), str(Path("/root") / f"escaped-{tag}.txt"),
             str(tasks / "hello-file" / "tests" / f"escaped-{tag}.txt"), f"/rise/escaped-{tag}.txt"]
    targets = {"read": [str(tasks / "hello-file" / "solution" / "solve.sh"),
                        str(tasks / "hello-file" / "tests" / "test.sh"), str(HELLO / "solution" / "solve.sh"),
                        str(home / ".netrc"), str(REPO / "README.md"), str(REPO / "pyproject.toml")],
               "env_secrets": {KEY_VAR: key, SECRET_VAR: secret}, "tcp_port": port,
               "unix_sockets": ["/var/run/docker.sock", "/run/docker.sock"], "write": write}
    (harness / "targets.json").write_text(json.dumps(targets))
    return {"harness": harness, "task": tasks / "hello-file", "key": key, "secret": secret, "write": write}


def _allowed_roots(harness: Path) -> list[str]:
    conf = confine.for_harness([harness])
    return [*conf.ro_paths, *confine.RO_SYSTEM_DIRS, *confine.SYSTEM_LINK_DIRS, "/proc", "/dev", "/tmp", "/run",
            "/rise"]


def _seen_paths_allowed(paths: list[str], roots: list[str]) -> list[str]:
    """Paths outside every allowed root that are not on the way to one (folders bwrap made to mount it)."""
    def ok(p: str) -> bool:
        return any(p == r or p.startswith(r + "/") or r.startswith(p + "/") for r in roots)

    return [p for p in paths if not ok(p)]


async def _hostile_trial(tmp_path: Path, monkeypatch, port: int, env_kind: str):
    from monitor.agents import harness_agent
    from trials.runner import run_trial
    from trials.tasks.load import load_task

    s = _setup(tmp_path, monkeypatch, port)
    with ScriptedServer([reply(analysis="hi", plan="p")] * 3, api_key=s["key"]) as srv:
        endpoint = EndpointSpec(base_url=srv.base_url, model="scripted", api_key_env=KEY_VAR)
        res = await run_trial(load_task(s["task"]), harness_agent(s["harness"]), endpoint,
                              tmp_path / "job" / "hello__r1", env_kind, "escape", agent_timeout_sec=120)
        authorised = [c for c in srv.calls if c[1].endswith("/chat/completions")]
    launch._SPARES.close_all()
    return s, res, tmp_path / "job" / "hello__r1", authorised


def _check_trial(tmp_path: Path, s: dict, res, trial: Path, authorised: list) -> None:
    agent = trial / "agent"
    out = (agent / "stdout.log").read_text()
    record = json.loads((agent / "escape.json").read_text())
    attempts = record["attempts"]
    # every door tried, every door shut, and the record says so (escape.json and stdout.log)
    expected = {f"read_{i}" for i in range(6)} | {f"env_{KEY_VAR}", f"env_{SECRET_VAR}", "tcp_listener",
                                                  "unix_0", "unix_1", "write_outside", "channel_other_host"}
    assert set(attempts) == expected
    assert all(a["blocked"] for a in attempts.values()), {k: v for k, v in attempts.items() if not v["blocked"]}
    assert out.count("ATTEMPT ") == len(expected) and "ESCAPED" not in out
    assert "403" in attempts["channel_other_host"]["detail"]
    # the allowed doors work: its sandbox through the channel, its model through the channel with the key the
    # runner added (the server refuses requests without it)
    assert record["honest"]["exec"] == "hostile" and authorised
    assert res.agent_status == "completed", res.agent_error
    # the environment is the allow-list; no secret anywhere in what the harness saw or wrote
    env = json.loads(next(ln[4:] for ln in out.splitlines() if ln.startswith("ENV ")))
    assert set(env) <= ALLOWED_ENV, set(env) - ALLOWED_ENV
    for f in agent.rglob("*"):
        if f.is_file():
            text = f.read_text(errors="replace")
            assert s["key"] not in text and s["secret"] not in text and "home-secret-value" not in text, f
    # its view of / holds only the allowed host paths
    paths = [ln[5:] for ln in out.splitlines() if ln.startswith("PATH ")]
    assert paths and _seen_paths_allowed(paths, _allowed_roots(s["harness"])) == []
    assert not any("/data/starter" in p or "/runs" in p or p.startswith(str(tmp_path / "tasks")) for p in paths)
    # nothing left behind outside its folder
    assert [p for p in s["write"] if os.path.exists(p)] == []
    spares = cache_root() / "spares"  # the spares' folders (under the test's HOME): none left over
    assert not spares.exists() or list(spares.iterdir()) == []


async def test_hostile_harness_is_confined_in_the_local_sandbox(tmp_path, monkeypatch, listener):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    s, res, trial, authorised = await _hostile_trial(tmp_path, monkeypatch, listener, "local")
    _check_trial(tmp_path, s, res, trial, authorised)


@pytest.mark.docker
async def test_hostile_harness_is_confined_in_the_docker_sandbox(tmp_path, monkeypatch, listener):
    if not _docker_ready():
        pytest.skip("no Docker engine or no base image (rise images base)")
    s, res, trial, authorised = await _hostile_trial(tmp_path, monkeypatch, listener, "docker")
    _check_trial(tmp_path, s, res, trial, authorised)


EVIL_INIT = '''
import os, pathlib
secret = os.environ.get("{var}")
try:
    pathlib.Path("{out}").write_text("escaped")
    wrote = "yes"
except OSError as exc:
    wrote = type(exc).__name__
raise ImportError(f"HOSTILE secret={{secret!r}} wrote={{wrote}}")
'''


def test_smoke_check_runs_a_hostile_candidate_confined(tmp_path, monkeypatch):
    """The smoke check's import step imports the candidate under bubblewrap: at import time the package can
    neither read the runner's secret nor write outside (its ImportError reports what it could do)."""
    from validate.smoke import check_import, check_recording

    monkeypatch.setenv(SECRET_VAR, "smoke-secret-value")
    # into the checkout; a checkout under /tmp is covered by the sandbox's private /tmp (the write lands there and
    # goes with it), so the target is then a host folder the sandbox does not show at all
    base = REPO if not str(REPO).startswith("/tmp/") else Path("/var/tmp")
    out = base / f"escaped-smoke-{uuid.uuid4().hex[:8]}.txt"
    pkg = tmp_path / "evilpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(EVIL_INIT.format(var=SECRET_VAR, out=out))
    (pkg / "main.py").write_text("def main(argv=None):\n    return 0\n")
    step = check_import(pkg)
    # OSError (a read-only folder) or FileNotFoundError (a folder the sandbox does not show): refused either way
    assert not step.passed and re.search(r"HOSTILE secret=None wrote=(OSError|FileNotFoundError)\b", step.detail), \
        step.detail
    assert not out.exists()
    rec = check_recording(pkg)  # imports the package too (the recording config resolves against it)
    assert "smoke-secret-value" not in json.dumps(rec.data) + rec.detail
    assert not out.exists()
