"""The executor interface behind the grid runner, and the ``local`` executor.

The grid runner (``trials.grid.run_cells``, behind ``run_job`` and ``validate.evaluate.run_grid``) decides
*which* cells run and owns the job folder; an executor decides *where* one attempt of a cell runs. Contract of
:meth:`Executor.run`: when it returns, the attempt's ``result.json`` is in ``call.trial_dir`` (the driver's job
folder), written or delivered atomically, and the returned result is that file's content. The runner holds a
:meth:`Executor.slot` around each call, so it can decide not to start a cell (sequential stopping) after
waiting for room. ``trials.executors.factory.make_executor`` picks the executor of a grid.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..agents import AgentSpec
from ..endpoints.spec import EndpointSpec
from ..results import TrialResult
from ..runner import EnvFactory, run_trial


@dataclass(kw_only=True)
class TrialCall:
    """Everything one attempt of one cell needs (the arguments of ``trials.runner.run_trial``); built by
    keyword only."""

    task: Any
    agent: AgentSpec
    endpoint: EndpointSpec | None
    trial_dir: Path
    env_kind: str
    job_id: str | None
    settings: dict[str, Any] = field(default_factory=dict)
    verifier_endpoint: EndpointSpec | None = None
    repetition: int = 1
    env_factory: EnvFactory | None = None

    def with_endpoint(self, base_url: str) -> TrialCall:
        """The same call against another replica of its model."""
        if self.endpoint is None:
            raise ValueError(f"{self.trial_dir.name}: an oracle trial has no endpoint to move to another replica")
        return replace(self, endpoint=self.endpoint.model_copy(update={"base_url": base_url}))


class Executor(ABC):
    """Runs attempts of trials somewhere; see the module docstring for the contract."""

    kind: str = "?"

    async def start(self) -> None:
        """Connect to whatever runs the trials (nothing for ``local``)."""

    async def close(self) -> None:
        """Release what :meth:`start` took."""

    @abstractmethod
    def slot(self) -> Any:
        """An async context manager that waits until one more trial may run."""

    @abstractmethod
    async def run(self, call: TrialCall) -> TrialResult:
        """Run one attempt; its result is in ``call.trial_dir`` when this returns."""

    async def reap(self, env_kind: str, job_id: str) -> int:
        """Remove sandboxes a crashed run of ``job_id`` left on the machines this executor uses besides this
        one (the runner reaps this machine itself); how many."""
        return 0

    def rerun_cause(self, result: TrialResult) -> bool:
        """Whether ⊥ ``result`` is a loss of this executor's infrastructure that deserves one more attempt."""
        return False


class LocalExecutor(Executor):
    """Trials as asyncio tasks of this process, at most ``concurrency`` at once."""

    kind = "local"

    def __init__(self, concurrency: int = 1) -> None:
        self._sem = asyncio.Semaphore(max(1, concurrency))

    def slot(self) -> Any:
        return self._sem

    async def run(self, call: TrialCall) -> TrialResult:
        return await run_trial(call.task, call.agent, call.endpoint, call.trial_dir, call.env_kind, call.job_id,
                               call.settings, call.verifier_endpoint, repetition=call.repetition,
                               env_factory=call.env_factory)


@asynccontextmanager
async def opened(executor: Executor) -> AsyncIterator[Executor]:
    """``start()`` … ``close()`` around a grid."""
    await executor.start()
    try:
        yield executor
    finally:
        await executor.close()
