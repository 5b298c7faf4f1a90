"""What a Ray worker does with one trial: the same ``run_trial`` as the local executor, in a folder of its own.

Plain Python (no Ray import), so the worker side is unit-testable: :func:`run_on_worker` takes the JSON-able
description the driver sent plus the shipped folders, runs the trial under its own wall-clock limit, and
returns the result with the trial folder as a tar (object-store delivery) or left under the job folder
(shared delivery), for the driver to move into place.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from ..agents import AgentSpec
from ..endpoints.spec import EndpointSpec
from ..harness_api import write_json_atomic
from ..results import TrialResult
from ..runner import run_trial
from .delivery import INCOMING, materialize, pack_dir

BUILD_SLACK_SEC = 600.0  # image builds and sandbox start-up on top of the task's own limits


def scratch_root() -> Path:
    """Where a worker runs trials (object-store delivery): ``$RISE_RAY_SCRATCH`` or the temp folder."""
    return Path(os.environ.get("RISE_RAY_SCRATCH") or Path(tempfile.gettempdir()) / "rise-ray")


def trial_limit(task: Any, configured: float | None) -> float:
    """A trial's wall-clock limit: configured, else agent + verifier timeouts + build slack."""
    if configured:
        return float(configured)
    return float(task.config.agent.timeout_sec + task.config.verifier.timeout_sec + BUILD_SLACK_SEC)


def relocate_agent(agent: AgentSpec, driver_python: str, harness_copy: Path | None) -> AgentSpec:
    """The agent's command line on this node: this node's Python, and the shipped harness copy."""
    swaps = [(driver_python, sys.executable)]
    if harness_copy is not None and agent.harness_dir:
        swaps.append((agent.harness_dir, str(harness_copy)))

    def fix(text: str) -> str:
        for old, new in swaps:
            text = text.replace(old, new) if old != new else text
        return text

    return agent.model_copy(update={"argv": [fix(a) for a in agent.argv],
                                    "env": {k: fix(v) for k, v in agent.env.items()},
                                    "harness_dir": str(harness_copy) if harness_copy else agent.harness_dir})


async def _bounded_trial(spec: dict[str, Any], task: Any, agent: AgentSpec, work: Path, limit: float,
                         env_factory: Any) -> TrialResult:
    endpoint = EndpointSpec.model_validate(spec["endpoint"]) if spec.get("endpoint") else None
    verifier = EndpointSpec.model_validate(spec["verifier_endpoint"]) if spec.get("verifier_endpoint") else None
    try:
        return await asyncio.wait_for(
            run_trial(task, agent, endpoint, work, spec["env_kind"], spec["job_id"], spec.get("settings") or {},
                      verifier, repetition=spec["repetition"], env_factory=env_factory), limit)
    except TimeoutError:
        # run_trial was cancelled: its sandbox is stopped, but no result was written. Infrastructure hung
        # (an agent over its own limit is a failed trial, decided inside run_trial): ⊥.
        try:
            run_id = json.loads((work / "config.json").read_text())["run_id"]
        except (OSError, ValueError, KeyError):
            run_id = uuid.uuid4().hex
        res = TrialResult(trial_name=work.name, run_id=run_id, job_id=spec["job_id"], task_name=task.name,
                          repetition=spec["repetition"], status="infra", infra_cause="trial_timeout",
                          infra_message=f"the trial ran past its wall-clock limit of {limit:.0f} s on "
                                        f"{socket.gethostname()}", env_kind=spec["env_kind"],
                          agent_name=agent.name, harness_version=agent.harness_version)
        res.write(work)
        return res


def run_on_worker(spec: dict[str, Any], task_ship: tuple[str, str, bytes] | None,
                  harness_ship: tuple[str, str, bytes] | None, env_factory: Any = None,
                  node_id: str | None = None) -> dict[str, Any]:
    """Run one trial here; returns ``{"result", "worker_dir", "host", "tar"?}`` (see the module docstring).
    The trial folder gets ``executor.json``: which node and process ran it."""
    from ..tasks import load_task

    task_path = materialize(*task_ship) if task_ship else Path(spec["task_path"])
    task = load_task(task_path)
    harness_copy = materialize(*harness_ship) if harness_ship else None
    agent = relocate_agent(AgentSpec.model_validate(spec["agent"]), spec["driver_python"], harness_copy)
    shared = spec["delivery"] == "shared"
    root = Path(spec["job_dir"]) / INCOMING if shared else scratch_root() / str(spec["job_id"])
    work = root / uuid.uuid4().hex / spec["trial_name"]  # the folder's name is the trial's name
    work.mkdir(parents=True)
    limit = trial_limit(task, spec.get("trial_timeout_sec"))
    res = asyncio.run(_bounded_trial(spec, task, agent, work, limit, env_factory))
    where = {"executor": "ray", "node_id": node_id, "host": socket.gethostname(), "pid": os.getpid(),
             "worker_dir": str(work), "limit_sec": limit}
    write_json_atomic(work / "executor.json", where)
    out: dict[str, Any] = {"result": res.model_dump(mode="json"), **where}
    if not shared:
        out["tar"] = pack_dir(work, spec["trial_name"])
        shutil.rmtree(work.parent, ignore_errors=True)
    return out
