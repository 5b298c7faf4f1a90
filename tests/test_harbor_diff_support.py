"""A cached Python 3.12 virtual environment with Harbor, for the differential tests (no tests here).

:func:`atif_errors` validates trajectory files with Harbor's own ATIF model (``harbor.models.trajectories``).

Built once under ``<rise cache>/harbor-venv-<version>`` (``trials.cache.cache_root``) with the standard
``venv`` module and pip (from the configured package index, nothing else), behind a file lock so parallel test
runs build it once; a ``.complete`` marker says the build finished. Skips (with the reason) only where no
Python 3.12 exists.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from filelock import FileLock

from trials.cache import cache_root

HARBOR_VERSION = "0.25.0"
INSTALL_TIMEOUT_SEC = 1200


def _is_python312(path: str) -> bool:
    try:  # a pyenv shim may be on PATH without a 3.12 selected: ask the interpreter itself
        out = subprocess.run([path, "-c", "import sys; print(sys.version_info[:2] == (3, 12))"],
                             check=False, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and out.stdout.strip() == "True"


def find_python312() -> str | None:
    """A working Python 3.12 interpreter: under pyenv, or on PATH."""
    pyenv = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    candidates = sorted(glob.glob(f"{pyenv}/versions/3.12*/bin/python3.12"), reverse=True)
    candidates += [p for p in (shutil.which("python3.12"),) if p]
    return next((c for c in candidates if _is_python312(c)), None)


def venv_dir() -> Path:
    return cache_root() / f"harbor-venv-{HARBOR_VERSION}"


# The xdist group of every test that calls harbor_python: one worker builds the venv and the others find it built.
HARBOR_VENV_GROUP = "harbor-venv"


def harbor_python() -> Path:
    """The venv's interpreter, building the venv first when needed."""
    base = find_python312()
    if base is None:
        pytest.skip("optional: no Python 3.12 on this machine (Harbor needs it); the differential test cannot run")
    venv = venv_dir()
    python, marker = venv / "bin" / "python", venv / ".complete"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(venv) + ".lock"):
        if not marker.exists():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=300)
            result = subprocess.run([str(python), "-m", "pip", "install", "-q", f"harbor=={HARBOR_VERSION}"],
                                    check=False, capture_output=True, text=True,
                                    timeout=INSTALL_TIMEOUT_SEC)
            if result.returncode != 0:
                raise RuntimeError(f"pip install harbor=={HARBOR_VERSION} failed in {venv}:\n"
                                   f"{result.stderr[-3000:]}")
            marker.write_text(HARBOR_VERSION + "\n")
    return python


_VALIDATE = """
import json, sys
from pydantic import ValidationError
from harbor.models.trajectories import Trajectory
out = {}
for path in sys.argv[1:]:
    try:
        Trajectory.model_validate(json.load(open(path)))
        out[path] = []
    except ValidationError as exc:
        out[path] = [".".join(map(str, e["loc"])) + ": " + e["msg"] for e in exc.errors()]
print(json.dumps(out))
"""


def atif_errors(python: Path, *paths: Path) -> dict[str, list[str]]:
    """Harbor's ``Trajectory`` model on each file: its validation errors ("loc: message"; empty: valid)."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}  # no network fetch on import
    out = subprocess.run([str(python), "-c", _VALIDATE, *map(str, paths)], capture_output=True, text=True,
                         env=env, timeout=300, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"validating with Harbor failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout)
