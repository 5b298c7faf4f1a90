"""A real Ray cluster of several nodes on this machine, for tests and benchmarks (``ray start`` processes).

Every process of the cluster carries ``RISE_RAY_CLUSTER=<id>`` and ``RISE_RAY_NODE=<name>`` in its
environment (Ray's workers, and the trials and sandboxes they start, inherit it), so :meth:`kill_node` can
``kill -9`` exactly one node's processes and :meth:`stop` exactly this cluster's, by pid, never by name.
Worker nodes run trials in their own scratch folder (``RISE_RAY_SCRATCH``), which tests watch.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Self

# Node death is noticed after health_check_period_ms × failure_threshold; seconds here, not the default 15+.
HEAD_SYSTEM_CONFIG = {"health_check_period_ms": 500, "health_check_timeout_ms": 1000,
                      "health_check_failure_threshold": 3}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def marked_pids(cluster: str, node: str | None = None) -> list[int]:
    """Pids whose environment carries this cluster's (and node's) marker."""
    want = {f"RISE_RAY_CLUSTER={cluster}".encode()}
    if node is not None:
        want.add(f"RISE_RAY_NODE={node}".encode())
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = set((entry / "environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        if want <= env:
            pids.append(int(entry.name))
    return pids


class LocalRayCluster:
    """A head (no trial slots) plus worker nodes with the resources given per name."""

    def __init__(self, root: Path, nodes: dict[str, dict[str, float]], object_store_mb: int = 80) -> None:
        self.root, self.nodes, self.object_store_mb = Path(root), nodes, object_store_mb
        self.id = uuid.uuid4().hex[:10]
        self.port = _free_port()
        self.temp_dir = Path(f"/tmp/rr-{self.id}")  # short: Ray's socket paths must stay under 107 bytes

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def scratch(self, node: str) -> Path:
        return self.root / f"scratch-{node}"

    def _env(self, node: str) -> dict[str, str]:
        return {**os.environ, "RISE_RAY_CLUSTER": self.id, "RISE_RAY_NODE": node, "RAY_USAGE_STATS_ENABLED": "0",
                "RISE_RAY_SCRATCH": str(self.scratch(node))}

    def _ray_start(self, node: str, args: list[str]) -> tuple[subprocess.Popen, Path]:
        log = self.root / f"ray-start-{node}.log"
        with open(log, "w") as out:
            proc = subprocess.Popen(["ray", "start", *args, "--object-store-memory",
                                     str(self.object_store_mb * 1024 * 1024), "--disable-usage-stats"],
                                    env=self._env(node), stdout=out, stderr=subprocess.STDOUT)
        return proc, log

    @staticmethod
    def _wait(node: str, started: tuple[subprocess.Popen, Path]) -> None:
        proc, log = started
        if proc.wait(timeout=180) != 0:
            raise RuntimeError(f"ray start of node {node} failed (exit {proc.returncode}); see {log}:\n"
                               + log.read_text()[-2000:])

    def _start_node(self, node: str, args: list[str], tries: int = 3) -> None:
        """``ray start`` one node; a node that timed out (Ray waits 30 s for a raylet to register, which a
        loaded machine can miss) is killed and started again."""
        for attempt in range(1, tries + 1):
            try:
                self._wait(node, self._ray_start(node, args))
                return
            except RuntimeError:
                self.kill_node(node, timeout=10.0)
                if attempt == tries:
                    raise

    def start(self) -> Self:
        """Start the head, then each worker node (one at a time: parallel starts overload a small machine)."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._start_node("head", ["--head", "--port", str(self.port), "--num-cpus", "0", "--include-dashboard=false",
                                  "--temp-dir", str(self.temp_dir), "--system-config",
                                  json.dumps(HEAD_SYSTEM_CONFIG)])
        for name, resources in self.nodes.items():
            self.scratch(name).mkdir(parents=True, exist_ok=True)
            # CPUs = slots: Ray keeps that many idle workers warm (trial tasks themselves ask for no CPU)
            cpus = str(max(1, int(resources.get("rise_trial", 1))))
            self._start_node(name, ["--address", self.address, "--num-cpus", cpus,
                                    "--resources", json.dumps(resources)])
        return self

    def kill_node(self, node: str, timeout: float = 30.0) -> list[int]:
        """SIGKILL every process of ``node`` (raylet, Ray workers, the trials' agents and sandboxes)."""
        killed: list[int] = []
        deadline = time.monotonic() + timeout
        while (pids := marked_pids(self.id, node)) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        return sorted(set(killed))

    def stop(self) -> None:
        """Disconnect this process and kill the whole cluster (by marker and pid)."""
        try:
            import ray

            if ray.is_initialized():
                ray.shutdown()
        except ImportError:
            pass
        for pid in marked_pids(self.id):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        time.sleep(1.0)
        for node in ("head", *self.nodes):
            self.kill_node(node, timeout=10.0)
        shutil.rmtree(self.temp_dir, ignore_errors=True)  # Ray's session logs and sockets of this cluster

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
