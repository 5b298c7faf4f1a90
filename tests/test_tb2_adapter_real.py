"""Real parts for the offline adapter: wheels fetched by pip from the package index, the adapted image built by the
real Docker engine and the oracle scored by the task's own pytest verifier (which, as written, would fetch uv and
pytest at verification time). Marked ``pypi`` and ``docker``; skipped without an engine or the base image."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trials.tasks.adapt_import import RECORD, import_tasks

REPO = Path(__file__).resolve().parents[1]
SHAPES = REPO / "data" / "tb2-shapes"
pytestmark = [pytest.mark.pypi, pytest.mark.docker]


def _need_docker() -> None:
    from trials.environments.images import BASE_IMAGE, docker_client, image_exists
    from trials.errors import InfraError

    try:
        client = docker_client()
    except InfraError as exc:
        pytest.skip(f"no Docker engine: {exc}")
    if not image_exists(client, BASE_IMAGE):
        pytest.skip(f"{BASE_IMAGE} is not built yet (rise images base)")


def test_adapted_uvx_and_pip_verifiers_pass_the_oracle_in_docker(tmp_path):
    _need_docker()
    src = tmp_path / "src"
    src.mkdir()
    for name in ("sum-column", "word-count", "json-keys"):
        subprocess.run(["cp", "-r", str(SHAPES / name), str(src / name)], check=True)
    manifest = import_tasks(src, tmp_path / "out", lambda _image: False)
    assert [t.status for t in manifest.tasks] == ["adapted", "adapted", "adapted"]
    wheels = json.loads((tmp_path / "out" / "sum-column" / RECORD).read_text())["wheels"]
    assert any(name.startswith("pytest-8.4.1") for name in wheels)
    # the three tasks at once (-c 3): independent trials (each its own image and container), and a cold build
    # spends much of its time fetching from the package archives, not computing
    proc = subprocess.run([sys.executable, "-m", "rise.cli", "eval", "--no-progress", "--tasks", str(tmp_path / "out"),
                           "--agent", "oracle", "--env", "docker", "-r", "1", "-c", "3", "--job-dir",
                           str(tmp_path / "job")],
                          cwd=REPO, capture_output=True, text=True, timeout=1500, check=False,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in ("sum-column", "word-count", "json-keys"):
        trial = tmp_path / "job" / f"{name}__r1"
        assert json.loads((trial / "result.json").read_text())["reward"] == 1.0, name
        ctrf = trial / "verifier" / "logs" / "ctrf.json"
        if name == "sum-column":  # the pytest plugin the verifier asked uvx for ran
            assert json.loads(ctrf.read_text())["results"]["summary"]["passed"] == 2


def test_without_the_adapter_the_same_verifier_fails_here(tmp_path):
    """The check that the adapter is needed: the task as written scores 0 (its verifier cannot fetch uv)."""
    _need_docker()
    src = tmp_path / "set"
    src.mkdir()
    subprocess.run(["cp", "-r", str(SHAPES / "word-count"), str(src / "word-count")], check=True)
    proc = subprocess.run([sys.executable, "-m", "rise.cli", "eval", "--no-progress", "--tasks", str(src),
                           "--task", "word-count", "--agent", "oracle", "--env", "docker", "-r", "1", "-c", "1",
                           "--job-dir", str(tmp_path / "job")],
                          cwd=REPO, capture_output=True, text=True, timeout=900, check=False,
                          env={**os.environ, "COLUMNS": "200"})
    result = json.loads((tmp_path / "job" / "word-count__r1" / "result.json").read_text())
    assert result["reward"] != 1.0, proc.stdout[-2000:]
