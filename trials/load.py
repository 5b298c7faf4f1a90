"""The machine's load over one trial (``result.json`` ``load``): how busy the host was while the trial ran.

On a small CPU box the model server, the sandboxes and other trials share a few cores, so the same harness gets
fewer turns when the machine is busy; a grid's pass rate is read next to its load. Recorded (through psutil):
the load average (1, 5 and 15 minutes) at the trial's start and end, the CPU count, and over the trial the
share of CPU time the CPUs were busy and, where the kernel counts it (Linux ``/proc/stat``), the share the
hypervisor gave to other guests (steal).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psutil
from pydantic import BaseModel, Field

# CPU-time fields that make up the whole: guest time is already inside user time (Linux), so it is left out.
_TOTAL = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
_IDLE = ("idle", "iowait")


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in psutil.getloadavg()]
    except (OSError, AttributeError):  # a platform without one
        return None


def _cpu_times() -> Any | None:
    try:
        return psutil.cpu_times()
    except (OSError, RuntimeError):
        return None


class MachineLoad(BaseModel):
    """The host's load over one trial."""

    cpus: int | None = None
    loadavg_start: list[float] | None = Field(default=None, description="1, 5, 15 min load average at start")
    loadavg_end: list[float] | None = None
    steal: float | None = Field(default=None, description="share of CPU time stolen by the hypervisor over the "
                                "trial (None: the kernel does not count it)")
    busy: float | None = Field(default=None, description="share of CPU time not idle over the trial")

    @property
    def load_per_cpu(self) -> float | None:
        """The 1-minute load average at the end over the CPU count (above 1: runnable work waits for a CPU)."""
        if not self.loadavg_end or not self.cpus:
            return None
        return self.loadavg_end[0] / self.cpus


def cpu_shares(before: Any | None, after: Any | None) -> tuple[float | None, float | None]:
    """(steal, busy): shares of the CPU time between two ``psutil.cpu_times()`` readings; None where unknown."""
    if before is None or after is None:
        return None, None
    delta = {f: getattr(after, f) - getattr(before, f) for f in _TOTAL if hasattr(after, f) and hasattr(before, f)}
    total = sum(delta.values())
    if total <= 0:
        return None, None
    steal = round(delta["steal"] / total, 4) if "steal" in delta else None
    busy = round(1 - sum(delta.get(f, 0.0) for f in _IDLE) / total, 4)
    return steal, busy


@dataclass
class LoadProbe:
    """Read at a trial's start; :meth:`finish` at its end gives its :class:`MachineLoad`."""

    loadavg: list[float] | None
    times: Any | None

    @classmethod
    def start(cls) -> LoadProbe:
        return cls(_loadavg(), _cpu_times())

    def finish(self) -> MachineLoad:
        steal, busy = cpu_shares(self.times, _cpu_times())
        return MachineLoad(cpus=psutil.cpu_count(), loadavg_start=self.loadavg, loadavg_end=_loadavg(),
                           steal=steal, busy=busy)
