"""The ``ray`` executor: each trial attempt is one Ray task on a cluster node that offers its resources.

Driver side of the contract in :mod:`trials.executors.base`:
- a task asks for ``ExecutorConfig.trial_resources(env_kind)`` (``{"rise_trial": 1}``, plus docker capacity for
  docker trials) and no CPUs, so nodes offer exactly the slots they declare; no more tasks are in flight than
  the alive nodes offer slots, so a trial's wall-clock limit starts when it can start;
- Ray's own retries are off (``max_retries=0``): a task never runs a second time behind the driver's back;
- the trial folder is delivered into the driver's job folder by an atomic rename (see ``delivery``); before
  that the cell has no folder at all, so a killed driver leaves nothing that looks finished;
- a node (or worker process) that dies takes its attempt with it: the driver writes that attempt as ⊥
  (``node_lost``) and :meth:`rerun_cause` tells the grid runner to run it once more, on the nodes still alive;
- a task that runs past its limit plus a grace period is cancelled (force) and becomes ⊥ ``trial_timeout``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from ..errors import RiseError
from ..results import TrialResult
from .base import Executor, TrialCall
from .config import ExecutorConfig
from .delivery import deliver_dir, deliver_tar, ship
from .ray_worker import run_on_worker, trial_limit

log = logging.getLogger(__name__)

GRACE_SEC = 120.0  # on top of the worker's own limit before the driver cancels the task
NO_NODE_WAIT_SEC = 120.0  # how long a grid waits for a node offering the resources to (re)appear
LOST_CAUSE = "node_lost"


class ExecutorError(RiseError):
    """The executor cannot run trials: Ray missing, cluster unreachable, no node offers the resources."""


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ExecutorError("the ray executor needs Ray on the driver and every node: "
                            "pip install 'riseharness[ray]'") from exc
    return ray


def _ray_trial(spec: dict[str, Any], task_ship: Any, harness_ship: Any, env_factory: Any) -> dict[str, Any]:
    """The Ray task body (module level, so workers import it by name)."""
    import ray

    return run_on_worker(spec, task_ship, harness_ship, env_factory, ray.get_runtime_context().get_node_id())


def _reap_here(env_kind: str, job_id: str) -> int:
    """Ray task body: reap this node's leftover sandboxes of ``job_id`` (none when the part is absent)."""
    from ..environments.factory import reap_leftovers

    try:
        return reap_leftovers(env_kind, job_id)
    except Exception as exc:  # noqa: BLE001 - e.g. no docker engine on this node: nothing to reap
        log.debug("reaping %s sandboxes of %s failed: %s", env_kind, job_id, exc)
        return 0


def _same_port(connected: str, wanted: str) -> bool:
    """Whether two ``host:port`` cluster addresses name the same GCS (hosts may be spelt differently)."""
    return connected == wanted or connected.rpartition(":")[2] == wanted.rpartition(":")[2]


def slots_offered(nodes: list[dict[str, Any]], need: dict[str, float]) -> int:
    """How many trials needing ``need`` the alive ``nodes`` (``ray.nodes()`` rows) can hold at once."""
    total = 0
    for node in nodes:
        if not node.get("Alive"):
            continue
        have = node.get("Resources") or {}
        total += min((math.floor(have.get(k, 0.0) / v + 1e-9) for k, v in need.items()), default=0)
    return total


class RayExecutor(Executor):
    kind = "ray"

    def __init__(self, config: ExecutorConfig) -> None:
        self.config = config
        self._ray: Any = None
        self._remote: Any = None
        self._shipped: dict[str, Any] = {}
        self._inflight = 0
        self._capacity = (0, 0.0)  # (slots, monotonic time read)

    async def start(self) -> None:
        ray = self._ray = _import_ray()
        wanted = self.config.address
        if ray.is_initialized() and wanted not in (None, "auto") and not _same_port(
                ray.get_runtime_context().gcs_address, wanted):
            ray.shutdown()  # this process talks to another cluster (an earlier grid's); switch
        if not ray.is_initialized():
            address = wanted or "auto"
            try:
                ray.init(address=address, log_to_driver=False, logging_level="WARNING")
            except Exception as exc:  # ConnectionError, RuntimeError...: one clear message
                raise ExecutorError(f"cannot connect to the Ray cluster at {address}: {exc}") from exc
        self._remote = ray.remote(_ray_trial)
        if self._slots(fresh=True) == 0:
            need = self.config.resources
            raise ExecutorError(f"no alive node of the Ray cluster at {self.config.address or 'auto'} offers "
                                f"{need}; start worker nodes with ray start --resources "
                                f"'{{\"{next(iter(need), 'rise_trial')}\": 4}}' (see the README)")

    def _slots(self, fresh: bool = False) -> int:
        slots, when = self._capacity
        if fresh or time.monotonic() - when > 1.0:
            slots = slots_offered(self._ray.nodes(), self.config.resources)
            self._capacity = (slots, time.monotonic())
        return slots

    def slot(self) -> Any:
        return self._slot()

    @asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        since = None
        while self._inflight >= (slots := self._slots()):
            if slots == 0:
                since = since or time.monotonic()
                if time.monotonic() - since > NO_NODE_WAIT_SEC:
                    raise ExecutorError(f"no alive Ray node has offered {self.config.resources} for "
                                        f"{NO_NODE_WAIT_SEC:.0f} s; the grid stops (resume it later)")
            await asyncio.sleep(0.2)
        self._inflight += 1
        try:
            yield
        finally:
            self._inflight -= 1

    async def reap(self, env_kind: str, job_id: str) -> int:
        """Run the sandbox reaper once on every alive node that offers trial slots (a driver killed earlier
        leaves Docker containers on the nodes; local sandboxes die with their Ray worker)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        reaper = self._ray.remote(_reap_here)
        refs = [reaper.options(num_cpus=0, max_retries=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
            node["NodeID"], soft=False)).remote(env_kind, job_id)
            for node in self._ray.nodes() if slots_offered([node], self.config.resources)]
        try:
            counts = await asyncio.wait_for(asyncio.gather(*(asyncio.wrap_future(r.future()) for r in refs)), 120)
        except (TimeoutError, self._ray.exceptions.RayError) as exc:
            log.warning("reaping leftover sandboxes on the Ray nodes failed: %s", exc)
            return 0
        if sum(counts):
            log.warning("reaped %d leftover %s sandbox(es) of job %s on Ray nodes", sum(counts), env_kind, job_id)
        return sum(counts)

    def _ship(self, folder: str | Path) -> Any:
        key = str(Path(folder).resolve())
        if key not in self._shipped:
            self._shipped[key] = self._ray.put(ship(Path(key)))
        return self._shipped[key]

    def rerun_cause(self, result: TrialResult) -> bool:
        return result.is_infra and result.infra_cause == LOST_CAUSE

    async def run(self, call: TrialCall) -> TrialResult:
        ray, cfg = self._ray, self.config
        trial_dir = Path(call.trial_dir).resolve()
        limit = trial_limit(call.task, cfg.trial_timeout_sec)
        spec = {"trial_name": trial_dir.name, "job_dir": str(trial_dir.parent), "job_id": call.job_id,
                "task_path": str(call.task.path), "agent": call.agent.model_dump(mode="json"),
                "endpoint": call.endpoint.model_dump(mode="json") if call.endpoint else None,
                "verifier_endpoint": (call.verifier_endpoint.model_dump(mode="json")
                                      if call.verifier_endpoint else None),
                "env_kind": call.env_kind, "settings": call.settings, "repetition": call.repetition,
                "driver_python": sys.executable, "delivery": cfg.delivery, "trial_timeout_sec": limit}
        task_ref = self._ship(call.task.path) if cfg.ship else None
        harness_ref = self._ship(call.agent.harness_dir) if cfg.ship and call.agent.harness_dir else None
        ref = self._remote.options(num_cpus=0, resources=cfg.trial_resources(call.env_kind), max_retries=0,
                                   retry_exceptions=False, name=f"rise-trial {trial_dir.name}").remote(
            spec, task_ref, harness_ref, call.env_factory)
        try:
            out = await asyncio.wait_for(asyncio.wrap_future(ref.future()), limit + GRACE_SEC)
        except TimeoutError:
            ray.cancel(ref, force=True)
            return self._infra(call, trial_dir, "trial_timeout",
                               f"no answer from the Ray task within {limit + GRACE_SEC:.0f} s; cancelled")
        except asyncio.CancelledError:
            ray.cancel(ref, force=True)  # the grid is stopping: kill the worker (its sandbox dies with it)
            raise
        except ray.exceptions.RayTaskError as exc:  # our code raised on the worker: a runner bug, not a loss
            return self._infra(call, trial_dir, "runner_error", str(exc).strip().splitlines()[-1][:500],
                               traceback=str(exc))
        except ray.exceptions.RayError as exc:  # node died, worker crashed, raylet gone, object lost
            log.warning("trial %s lost with its Ray node or worker: %s", trial_dir.name, type(exc).__name__)
            return self._infra(call, trial_dir, LOST_CAUSE, f"{type(exc).__name__}: {str(exc)[:400]}")
        # unpacking a big trial folder must not stall the other trials' coroutines
        if "tar" in out:
            await asyncio.to_thread(deliver_tar, out["tar"], trial_dir.name, out["worker_dir"], trial_dir,
                                    uuid.uuid4().hex)
        else:
            await asyncio.to_thread(deliver_dir, Path(out["worker_dir"]), out["worker_dir"], trial_dir)
            try:
                Path(out["worker_dir"]).parent.rmdir()  # the per-attempt folder around it, now empty
            except OSError:
                pass
        return TrialResult.load(trial_dir / "result.json")

    @staticmethod
    def _infra(call: TrialCall, trial_dir: Path, cause: str, message: str, traceback: str | None = None
               ) -> TrialResult:
        """Write the attempt the driver lost as ⊥ into the job folder (evidence; moved aside on rerun)."""
        trial_dir.mkdir(parents=True, exist_ok=True)
        res = TrialResult(trial_name=trial_dir.name, run_id=uuid.uuid4().hex, job_id=call.job_id,
                          task_name=call.task.name, repetition=call.repetition, status="infra",
                          infra_cause=cause, infra_message=message, traceback=traceback, env_kind=call.env_kind,
                          agent_name=call.agent.name, harness_version=call.agent.harness_version,
                          model=call.endpoint.model if call.endpoint else None)
        res.write(trial_dir)
        return res

