"""Real trials: the oracle agent in the local bubblewrap sandbox on starter tasks, through ``rise eval``.

Marked ``sandbox``; skipped (with the reason) when bubblewrap or the starter suite is missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STARTER = REPO / "data" / "starter"
pytestmark = pytest.mark.sandbox


def _need_parts() -> None:
    from trials.environments.local import bwrap_available

    if not bwrap_available():
        pytest.skip("bubblewrap (bwrap) and nsenter are needed for the local sandbox")
    if not (STARTER / "hello-file" / "task.toml").is_file():
        pytest.skip("the starter suite (data/starter) is not there yet")


def copy_task(src: str, dest_root: Path, name: str, *, solve: str | None = None, solve_prefix: str = "",
              dockerfile_extra: str = "") -> Path:
    """A renamed copy of a starter task, optionally with another solve.sh or extra Dockerfile lines."""
    dest = dest_root / name
    shutil.copytree(STARTER / src, dest)
    toml = dest / "task.toml"
    toml.write_text(re.sub(r'(?m)^name = ".*"$', f'name = "{name}"', toml.read_text(), count=1))
    solve_sh = dest / "solution" / "solve.sh"
    if solve is not None:
        solve_sh.write_text(solve)
    if solve_prefix:
        solve_sh.write_text(solve_sh.read_text().replace("#!/bin/bash\n", f"#!/bin/bash\n{solve_prefix}\n", 1))
    if dockerfile_extra:
        dockerfile = dest / "environment" / "Dockerfile"
        dockerfile.write_text(dockerfile.read_text().rstrip("\n") + "\n" + dockerfile_extra + "\n")
    return dest


def rise_eval(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rise.cli", "eval", "--no-progress", *args],
                          check=False, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200"})


def test_oracle_on_starter_tasks_passes_everything(tmp_path):
    _need_parts()
    out = tmp_path / "res.json"
    proc = rise_eval("--tasks", str(STARTER), "--task", "hello-file", "--task", "csv-to-json", "--task",
                     "fix-python-bug", "--agent", "oracle", "--env", "local", "-r", "2", "-c", "2",
                     "--job-dir", str(tmp_path / "job"), "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert data["complete"] and data["metrics"]["pass_at_1"] == 1.0 and data["metrics"]["pass_hat_r"] == 1.0
    assert len(data["trials"]) == 6 and {t["status"] for t in data["trials"]} == {"passed"}
    assert "Pass@1" in proc.stdout


def test_wrong_solution_fails_and_broken_image_is_infra_and_the_grid_goes_on(tmp_path):
    _need_parts()
    tasks = tmp_path / "tasks"
    copy_task("hello-file", tasks, "good")
    copy_task("hello-file", tasks, "wrong", solve="#!/bin/bash\necho 'Goodbye' > /app/hello.txt\n")
    copy_task("hello-file", tasks, "broken", dockerfile_extra="RUN echo building && exit 7")
    out = tmp_path / "res.json"
    proc = rise_eval("--tasks", str(tasks), "--agent", "oracle", "--env", "local", "-r", "1",
                     "--job-dir", str(tmp_path / "job"), "--json", str(out))
    assert proc.returncode == 2, proc.stdout + proc.stderr  # incomplete: the broken task is ⊥
    status = {t["task_name"]: t for t in json.loads(out.read_text())["trials"]}
    assert status["good"]["status"] == "passed"
    assert status["wrong"]["status"] == "failed" and status["wrong"]["failure_class"] == "task_failure"
    assert status["broken"]["status"] == "infra" and status["broken"]["infra_cause"] == "image_build"
    broken = json.loads((tmp_path / "job" / "broken__r1" / "result.json").read_text())
    log = Path(broken["infra_log_path"])
    assert log.is_file() and "building" in log.read_text()
    assert "broken__r1 (infra:image_build)" in proc.stdout.replace("\n", " ")


def test_agent_timeout_in_the_sandbox(tmp_path):
    _need_parts()
    tasks = tmp_path / "tasks"
    task = copy_task("hello-file", tasks, "slow", solve_prefix="sleep 60")
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("[agent]\ntimeout_sec = 300", "[agent]\ntimeout_sec = 2"))
    out = tmp_path / "res.json"
    proc = rise_eval("--tasks", str(tasks), "--agent", "oracle", "--env", "local", "--job-dir",
                     str(tmp_path / "job"), "--json", str(out), timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads((tmp_path / "job" / "slow__r1" / "result.json").read_text())
    assert res["status"] == "failed" and res["failure_class"] == "agent_timeout"
    assert res["durations"]["agent"] < 15


def _need_docker() -> None:
    from trials.environments.images import BASE_IMAGE, docker_available, docker_client, image_exists

    if not docker_available():
        pytest.skip("no Docker engine reachable")
    if not image_exists(docker_client(), BASE_IMAGE):
        pytest.skip(f"the base image {BASE_IMAGE} is missing (build it with `rise images base`)")
    if not (STARTER / "hello-file" / "task.toml").is_file():
        pytest.skip("the starter suite (data/starter) is not there yet")


@pytest.mark.docker
def test_oracle_in_docker_and_a_broken_image_is_infra(tmp_path):
    _need_docker()
    tasks = tmp_path / "tasks"
    copy_task("hello-file", tasks, "good")
    copy_task("csv-to-json", tasks, "convert")
    copy_task("hello-file", tasks, "broken", dockerfile_extra="RUN echo building && exit 7")
    out = tmp_path / "res.json"
    proc = rise_eval("--tasks", str(tasks), "--agent", "oracle", "--env", "docker", "-r", "1", "-c", "2",
                     "--job-dir", str(tmp_path / "job"), "--json", str(out), timeout=400)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    status = {t["task_name"]: t for t in json.loads(out.read_text())["trials"]}
    assert status["good"]["status"] == status["convert"]["status"] == "passed"
    assert status["broken"]["status"] == "infra" and status["broken"]["infra_cause"] == "image_build"
    log = Path(json.loads((tmp_path / "job" / "broken__r1" / "result.json").read_text())["infra_log_path"])
    assert log.is_file() and "exit" in log.read_text().lower()


def test_rise_eval_refuses_a_dead_model_server_naming_its_url(tmp_path):
    proc = rise_eval("--tasks", str(STARTER), "--task", "hello-file", "--agent", "seed", "--env", "local",
                     "--base-url", "http://127.0.0.1:9/v1", "--model", "nothing", "--job-dir", str(tmp_path / "job"),
                     timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "http://127.0.0.1:9/v1/chat/completions" in proc.stderr and "rise serve bundled" in proc.stderr
    assert not (tmp_path / "job").exists()


@pytest.mark.tmux
def test_seed_harness_against_a_server_that_stops_answering_is_infra(tmp_path):
    """The server passes the pre-flight check, then answers 503 to every chat call: ⊥, never the agent's."""
    _need_parts()
    if shutil.which("tmux") is None:
        pytest.skip("tmux is needed by the seed harness")
    from trials.endpoints.scripted import ScriptedError, ScriptedServer

    out = tmp_path / "res.json"
    with ScriptedServer(lambda body: ScriptedError(503, "no replica is serving this model")) as srv:
        base_url = srv.base_url
        proc = rise_eval("--tasks", str(STARTER), "--task", "hello-file", "--agent", "seed", "--env", "local",
                         "--base-url", srv.base_url, "--model", "scripted", "--job-dir", str(tmp_path / "job"),
                         "--setting", "model.max_attempts=1", "--json", str(out), timeout=200)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    res = json.loads((tmp_path / "job" / "hello-file__r1" / "result.json").read_text())
    assert res["status"] == "infra" and res["infra_cause"] == "model_unreachable"
    assert "\n" not in res["infra_message"] and res["harness_version"].startswith("seed-")
    assert f"tried {base_url}/chat/completions" in res["infra_message"], res["infra_message"]
    assert (tmp_path / "job" / "hello-file__r1" / "agent" / "trajectory.json").is_file()
