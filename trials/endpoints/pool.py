"""A pool of model endpoints: several base URLs serving the same model (vLLM replicas on GPUs or nodes).

The grid runner asks the pool for a replica per trial attempt and gives it back when the attempt ends. Each
trial talks to one replica for its whole life (its requests then share the server's prefix cache), so the
pool spreads *trials* by least outstanding work: the replica with the fewest trials in flight, ties broken by
fewest assigned so far. A trial holds at most a handful of requests at once (one, or N for Mid-Harness
sampling), so this is least-outstanding-requests at the grain the pool can observe without a proxy.

A replica whose trial ended ⊥ for a model cause is suspect at once (no trial is routed to it) and, when it then
fails a health probe (``GET <base>/models``), is taken out of service; the grid runner reruns that trial once on
the replicas left. An out replica is probed again when a trial asks for one and ``recheck_sec`` have passed, and
comes back if it answers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import httpx

from .spec import EndpointSpec

log = logging.getLogger(__name__)

MODEL_CAUSES = frozenset({"model_unreachable", "model_server"})  # ⊥ causes that implicate the replica


@dataclass
class Replica:
    """One base URL of the pool and its bookkeeping."""

    base_url: str
    outstanding: int = 0
    assigned: int = 0
    in_service: bool = True
    out_since: float = 0.0
    lost_trials: int = 0


class EndpointPool:
    """Replicas of one model; see the module docstring."""

    def __init__(self, base_urls: list[str], probe_timeout_sec: float = 5.0, recheck_sec: float = 30.0) -> None:
        urls = list(dict.fromkeys(u.rstrip("/") for u in base_urls))
        if not urls:
            raise ValueError("an endpoint pool needs at least one base URL")
        self.replicas = [Replica(u) for u in urls]
        self.probe_timeout_sec, self.recheck_sec = probe_timeout_sec, recheck_sec
        self._lock = asyncio.Lock()

    @classmethod
    def of(cls, endpoint: EndpointSpec | None, replicas: list[str]) -> EndpointPool | None:
        """A pool of ``endpoint``'s base URL plus ``replicas``; None when there is nothing to spread over."""
        if endpoint is None or not replicas:
            return None
        pool = cls([endpoint.base_url, *replicas])
        return pool if len(pool.replicas) > 1 else None

    async def probe(self, replica: Replica) -> bool:
        """Whether the replica answers ``GET /models`` (any status below 500) within the probe timeout."""
        try:
            async with httpx.AsyncClient(timeout=self.probe_timeout_sec) as http:
                resp = await http.get(f"{replica.base_url}/models")
            return resp.status_code < 500
        except httpx.HTTPError:
            return False

    async def acquire(self) -> Replica:
        """The in-service replica with the fewest trials in flight (it now counts one more)."""
        async with self._lock:
            now = time.monotonic()
            for rep in self.replicas:
                if not rep.in_service and now - rep.out_since >= self.recheck_sec and await self.probe(rep):
                    log.warning("endpoint replica %s answers again; back in service", rep.base_url)
                    rep.in_service = True
            live = [r for r in self.replicas if r.in_service] or self.replicas  # none left: let trials say ⊥
            best = min(live, key=lambda r: (r.outstanding, r.assigned))
            best.outstanding += 1
            best.assigned += 1
            return best

    def release(self, replica: Replica) -> None:
        replica.outstanding -= 1

    async def report(self, replica: Replica, infra_cause: str | None) -> bool:
        """After a trial on ``replica`` ended ⊥ with ``infra_cause``: whether the replica is implicated (and
        then, when it also fails a probe, take it out of service)."""
        if infra_cause not in MODEL_CAUSES:
            return False
        replica.lost_trials += 1
        if replica.in_service:
            # suspect at once, before the probe's first await: a trial that starts while the probe runs must not
            # be routed to it (one was, in CI, and was lost a second time)
            replica.in_service, replica.out_since = False, time.monotonic()
            if await self.probe(replica):
                replica.in_service = True
            else:
                left = sum(r.in_service for r in self.replicas)
                log.warning("endpoint replica %s stopped answering; taken out (%d left)", replica.base_url, left)
        return True

    def status(self) -> list[dict[str, object]]:
        """Per replica: URL, in service, trials in flight, assigned, lost (for logs and tests)."""
        return [{"base_url": r.base_url, "in_service": r.in_service, "outstanding": r.outstanding,
                 "assigned": r.assigned, "lost_trials": r.lost_trials} for r in self.replicas]
