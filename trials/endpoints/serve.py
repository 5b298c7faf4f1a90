"""Start, health-check and stop a model server process: the bundled llama.cpp model or ``vllm serve``.

A :class:`ServerProcess` runs in its own process group with its output in a log file; :meth:`start` returns
the :class:`EndpointSpec` a trial receives once ``/health`` answers. A state file per server
(``<cache>/servers/<name>.json``) lets another process find, reuse and stop a detached one
(``rise serve status`` / ``rise serve stop NAME``, and :func:`ensure_bundled_server` for ``rise eval``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, Self

import httpx
import psutil
from pydantic import BaseModel, Field

from ..errors import InfraError
from . import bundled
from .spec import EndpointSpec

Kind = Literal["bundled", "vllm"]
DEFAULT_PORTS = {"bundled": 8080, "vllm": 8000}
READY_TIMEOUT_SEC = {"bundled": 300.0, "vllm": 1200.0}  # vLLM loads weights and compiles graphs
VLLM_INSTALL_HINT = "vllm is not installed; install it with: pip install 'riseharness[vllm]'"
# A CPU model generates ~16-25 tokens/s: a cap of 1024 keeps one runaway reply near a minute, not the whole trial.
BUNDLED_MAX_OUTPUT_TOKENS = 1024


class ServerStartError(InfraError):
    """The server did not become healthy; the message carries the tail of its log."""

    cause = "model_server"


class ServerState(BaseModel):
    """What a detached server leaves behind so other processes can find it (``servers/<name>.json``)."""

    state_version: int = 1
    name: str
    kind: Kind
    pid: int
    port: int
    host: str = "127.0.0.1"
    model: str = Field(description="bundled model name or the vLLM model path/id")
    command: list[str]
    log_path: str
    spec: EndpointSpec
    started_at: str


def servers_dir() -> Path:
    return bundled.cache_root() / "servers"


def state_path(name: str) -> Path:
    return servers_dir() / f"{name}.json"


def load_state(name: str) -> ServerState | None:
    path = state_path(name)
    if not path.exists():
        return None
    try:
        return ServerState.model_validate_json(path.read_text())
    except ValueError:
        return None


def list_states() -> list[ServerState]:
    if not servers_dir().is_dir():
        return []
    states = [load_state(p.stem) for p in sorted(servers_dir().glob("*.json"))]
    return [s for s in states if s is not None]


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pid_is(pid: int, command: list[str]) -> bool:
    """The pid still runs the program we started, not a process that reused the pid.

    A script such as ``vllm`` shows up as ``python …/vllm``, so the first two words are checked.
    """
    try:
        words = psutil.Process(pid).cmdline()[:2]
    except psutil.Error:
        return False
    want = os.path.basename(command[0]) if command else ""
    return bool(want) and any(os.path.basename(w) == want for w in words)


def _health(host: str, port: int, timeout: float = 2.0) -> bool:
    try:
        return httpx.get(f"http://{host}:{port}/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def vllm_command(model: str, *, port: int = 8000, host: str = "127.0.0.1", served_name: str | None = None,
                 max_model_len: int | None = None, seed: int | None = None,
                 lora: dict[str, str] | None = None, extra: list[str] | None = None,
                 executable: str = "vllm") -> list[str]:
    """The ``vllm serve`` command line (LoRA adapters are chosen per request by their name as the model)."""
    cmd = [executable, "serve", model, "--host", host, "--port", str(port)]
    if served_name:
        cmd += ["--served-model-name", served_name]
    if max_model_len:
        cmd += ["--max-model-len", str(max_model_len)]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    if lora:
        cmd += ["--enable-lora", "--lora-modules", *(f"{n}={p}" for n, p in lora.items())]
    return cmd + list(extra or [])


def _warm(server: ServerProcess, head: str, slots: int, progress: Callable[[str], None]) -> None:
    """Warm the slots; a failure costs speed only, so it is reported and the server still starts."""
    progress(f"computing the shared prompt head once for {slots} slots")
    try:
        bundled.warm_slots(f"http://{server.host}:{server.port}", head, slots)
    except httpx.HTTPError as exc:
        progress(f"warming the slots of {server.name} failed ({exc}); first calls prefill the head themselves")


def parse_lora(items: list[str]) -> dict[str, str]:
    """``["verifier=/path"]`` → ``{"verifier": "/path"}``, with a clear error for a malformed item."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--lora takes NAME=PATH, got {item!r}")
        out[name] = path
    return out


class ServerProcess:
    """One model server subprocess. Build with :meth:`bundled` or :meth:`vllm`; then start() / stop()."""

    def __init__(self, kind: Kind, command: list[str], *, name: str, port: int, host: str, served_model: str,
                 model: str, context_limit: int | None = None, ready_timeout: float | None = None,
                 prepare: Callable[[Callable[[str], None]], None] | None = None,
                 env: dict[str, str] | None = None):
        self.kind, self.command, self.name = kind, command, name
        self.env = dict(env or {})  # added to this process's environment (CUDA_VISIBLE_DEVICES of a replica)
        self.port, self.host, self.served_model, self.model = port, host, served_model, model
        self.context_limit = context_limit
        self.ready_timeout = ready_timeout or READY_TIMEOUT_SEC[kind]
        self._prepare = prepare
        self.log_path = servers_dir() / f"{name}.log"
        self.proc: subprocess.Popen | None = None
        self.pid: int | None = None
        self.spec: EndpointSpec | None = None
        self.after_ready: Callable[[Callable[[str], None]], None] | None = None  # e.g. warming the slots

    # -- constructors -------------------------------------------------------------------------------

    @classmethod
    def bundled(cls, model: str = bundled.DEFAULT_MODEL, port: int = DEFAULT_PORTS["bundled"], *,
                host: str = "127.0.0.1", ctx: int = 8192, threads: int | None = None, parallel: int = 2,
                extra: list[str] | None = None, name: str | None = None, warm_head: str | None = None
                ) -> ServerProcess:
        """The bundled llama.cpp server; the binary is built and the model assembled on first start.

        ``warm_head``: a prompt head every trial's first call shares (the seed's); once healthy, the server
        computes it once and copies it to every slot (:func:`bundled.warm_slots`), before it is handed out."""
        bundled._model_spec(model)  # unknown names fail here, before any build
        threads = threads or max(1, min(os.cpu_count() or 2, 8))

        def prepare(progress: Callable[[str], None]) -> None:
            try:
                bundled.ensure_server(progress=progress)
                bundled.ensure_model(model, progress=progress)
            except bundled.BundledSetupError as exc:
                raise ServerStartError(str(exc)) from exc

        if warm_head:
            bundled.slot_dir(port).mkdir(parents=True, exist_ok=True)
            extra = [*(extra or []), "--slot-save-path", str(bundled.slot_dir(port))]
        command = bundled.server_command(model, port, host=host, ctx=ctx, threads=threads, parallel=parallel,
                                         extra=extra)
        server = cls("bundled", command, name=name or f"bundled-{port}", port=port, host=host,
                     served_model=model, model=model, prepare=prepare)
        if warm_head:
            server.after_ready = lambda progress: _warm(server, warm_head, parallel, progress)
        return server

    @classmethod
    def vllm(cls, model: str, port: int = DEFAULT_PORTS["vllm"], *, host: str = "127.0.0.1",
             served_name: str | None = None, max_model_len: int | None = None, seed: int | None = None,
             lora: dict[str, str] | None = None, extra: list[str] | None = None,
             name: str | None = None, ready_timeout: float | None = None, gpu: str | None = None
             ) -> ServerProcess:
        """``vllm serve``; constructing it needs no vLLM, starting it does. ``gpu`` pins the server to that
        device (``CUDA_VISIBLE_DEVICES``), one replica of an endpoint pool."""
        command = vllm_command(model, port=port, host=host, served_name=served_name, max_model_len=max_model_len,
                               seed=seed, lora=lora, extra=extra)

        def prepare(progress: Callable[[str], None]) -> None:
            exe = shutil.which("vllm")
            if exe is None:
                raise ServerStartError(VLLM_INSTALL_HINT, cause="model_server")
            command[0] = exe

        return cls("vllm", command, name=name or f"vllm-{port}", port=port, host=host,
                   served_model=served_name or model, model=model, context_limit=max_model_len,
                   ready_timeout=ready_timeout, prepare=prepare,
                   env={"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else None)

    # -- lifecycle ----------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self, *, progress: Callable[[str], None] = print, detach: bool = False) -> EndpointSpec:
        """Prepare (build/check), spawn, wait for ``/health``; return the endpoint.

        ``detach`` leaves the server running after this process exits (the state file finds it again).
        """
        self._check_port()  # before a possibly long build, and again after it
        if self._prepare is not None:
            self._prepare(progress)
        self._check_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        progress(f"starting {self.kind} server {self.name} on {self.base_url} (log: {self.log_path})")
        with self.log_path.open("ab") as log_fh:
            log_fh.write(f"\n--- {datetime.now(UTC).isoformat()} $ {' '.join(self.command)}\n".encode())
            log_fh.flush()
            # Its own session: a Ctrl-C in the terminal reaches us, not the server, and stop() signals the
            # whole group (vLLM forks engine workers).
            self.proc = subprocess.Popen(self.command, stdout=log_fh, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         env={**os.environ, **self.env} if self.env else None)
        self.pid = self.proc.pid
        try:
            self._wait_ready(progress)
            if self.after_ready is not None:
                self.after_ready(progress)
        except BaseException:
            self.stop()
            raise
        self.spec = EndpointSpec(base_url=self.base_url, model=self.served_model,
                                 context_limit=self._probe_context_limit() or self.context_limit,
                                 supports_n=True, supports_choice=self.kind == "vllm",
                                 max_output_tokens=BUNDLED_MAX_OUTPUT_TOKENS if self.kind == "bundled" else None,
                                 # llama.cpp's tool grammar lets small models write text instead of a call
                                 tool_calls="schema" if self.kind == "bundled" else "native")
        self._write_state(detach)
        progress(f"{self.name} ready: {self.base_url} model={self.served_model} "
                 f"context={self.spec.context_limit}")
        return self.spec

    def _check_port(self) -> None:
        if port_in_use(self.port, self.host):
            raise ServerStartError(f"port {self.port} on {self.host} is already in use; choose --port or stop "
                                   f"the server there (rise serve status)")

    def _wait_ready(self, progress: Callable[[str], None]) -> None:
        deadline = time.monotonic() + self.ready_timeout
        next_note = time.monotonic() + 15
        while True:
            code = self.proc.poll() if self.proc is not None else None
            if code is not None:
                raise ServerStartError(
                    f"{self.kind} server exited with code {code} before becoming healthy; last log lines:\n"
                    f"{_tail(self.log_path)}", log_path=str(self.log_path))
            if _health(self.host, self.port):
                return
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"{self.kind} server not healthy after {self.ready_timeout:.0f}s; last log lines:\n"
                    f"{_tail(self.log_path)}", log_path=str(self.log_path))
            if time.monotonic() > next_note:
                progress(f"waiting for {self.name} to load the model…")
                next_note = time.monotonic() + 15
            time.sleep(0.25)

    def _probe_context_limit(self) -> int | None:
        """The per-request limit the server reports (llama.cpp splits -c across its slots)."""
        root = f"http://{self.host}:{self.port}"
        with contextlib.suppress(httpx.HTTPError, ValueError, TypeError, AttributeError, KeyError, IndexError):
            if self.kind == "bundled":
                props = httpx.get(f"{root}/props", timeout=5).json()
                return int(props["default_generation_settings"]["n_ctx"])
            cards = httpx.get(f"{root}/v1/models", timeout=5).json()["data"]
            return int(cards[0]["max_model_len"])
        return None

    def _write_state(self, detach: bool) -> None:
        state = ServerState(name=self.name, kind=self.kind, pid=self.pid or 0, port=self.port, host=self.host,
                            model=self.model, command=self.command, log_path=str(self.log_path), spec=self.spec,
                            started_at=datetime.now(UTC).isoformat())
        path = state_path(self.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(state.model_dump_json(indent=2))
        os.replace(tmp, path)
        if detach:
            self.proc = None  # let it outlive us; stop_server(name) finds it through the state file

    def running(self) -> bool:
        if self.pid is None:
            return False
        if self.proc is not None:
            return self.proc.poll() is None
        return _group_alive(self.pid)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the process group, then SIGKILL what is left; remove the state file."""
        if self.pid is not None:
            _terminate_group(self.pid, timeout, self.proc)
        with contextlib.suppress(FileNotFoundError):
            state = load_state(self.name)
            if state is None or state.pid == self.pid:
                state_path(self.name).unlink()
        self.proc = None

    def wait(self) -> int:
        """Block until the server exits (foreground ``rise serve``); its exit code."""
        if self.proc is None:
            raise RuntimeError("not started in this process")
        return self.proc.wait()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def visible_gpus() -> list[str]:
    """The GPUs this node can give replicas: ``CUDA_VISIBLE_DEVICES`` when set, else ``nvidia-smi``'s list."""
    if (listed := os.environ.get("CUDA_VISIBLE_DEVICES")) is not None:
        return [g.strip() for g in listed.split(",") if g.strip()]
    if shutil.which("nvidia-smi") is None:
        return []
    out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                         text=True, timeout=30, check=False)
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def vllm_replicas(model: str, gpus: list[str], first_port: int = DEFAULT_PORTS["vllm"], **kw: object
                  ) -> list[ServerProcess]:
    """One ``vllm serve`` per GPU on consecutive ports (``vllm-<port>``): the replicas of an endpoint pool
    (``rise eval --base-url A --base-url B ...`` or ``[executor] replicas``)."""
    if not gpus:
        raise ServerStartError("no GPU found for one replica per GPU (CUDA_VISIBLE_DEVICES is empty and "
                               "nvidia-smi lists none)", cause="model_server")
    return [ServerProcess.vllm(model, first_port + i, gpu=gpu, **kw) for i, gpu in enumerate(gpus)]  # type: ignore[arg-type]


def _reap(pid: int) -> None:
    """Collect a detached server this very process started (else it lingers as a zombie in its group)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _terminate_group(pgid: int, timeout: float, proc: subprocess.Popen | None = None) -> None:
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if proc is not None:
                proc.poll()  # reap our child so the group can disappear
            else:
                _reap(pgid)
            if not _group_alive(pgid):
                break
            time.sleep(0.1)
        else:
            continue
        break
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1)


# -- servers found through their state files ------------------------------------------------------------


def server_status(state: ServerState) -> str:
    """``healthy``, ``starting`` (alive, not answering) or ``dead`` (a stale state file)."""
    if not (_group_alive(state.pid) and _pid_is(state.pid, state.command)):
        return "dead"
    return "healthy" if _health(state.host, state.port) else "starting"


def stop_server(name: str, timeout: float = 15.0) -> bool:
    """Stop a server by its state-file name; False when there was none. A stale file is just removed."""
    state = load_state(name)
    if state is None:
        return False
    if _group_alive(state.pid) and _pid_is(state.pid, state.command):
        _terminate_group(state.pid, timeout)
    state_path(name).unlink(missing_ok=True)
    return True


def _serves_model(host: str, port: int, model: str) -> bool:
    try:
        cards = httpx.get(f"http://{host}:{port}/v1/models", timeout=3).json().get("data", [])
    except (httpx.HTTPError, ValueError, AttributeError):
        return False
    return any(isinstance(c, dict) and c.get("id") == model for c in cards)


def ensure_bundled_server(model: str = bundled.DEFAULT_MODEL, port: int = DEFAULT_PORTS["bundled"], *,
                          progress: Callable[[str], None] = print, **kwargs) -> EndpointSpec:
    """The endpoint of a healthy bundled server for ``model`` on ``port``, starting a detached one if needed.

    Reuses the server a state file names, or any healthy server on the port that serves the model (one
    started by hand). Stop it with ``rise serve stop bundled-<port>``.
    """
    host = kwargs.get("host", "127.0.0.1")
    name = kwargs.get("name") or f"bundled-{port}"
    state = load_state(name)
    if state is not None and state.model == model and server_status(state) == "healthy":
        return state.spec
    if state is not None and server_status(state) == "dead":
        state_path(name).unlink(missing_ok=True)
    if port_in_use(port, host):
        if _health(host, port) and _serves_model(host, port, model):
            return EndpointSpec(base_url=f"http://{host}:{port}/v1", model=model, supports_n=True,
                                max_output_tokens=BUNDLED_MAX_OUTPUT_TOKENS, tool_calls="schema")
        raise ServerStartError(f"port {port} is taken by something that is not a healthy {model} server; "
                               "pass another port or stop it (rise serve status)")
    server = ServerProcess.bundled(model, port, **kwargs)
    return server.start(progress=progress, detach=True)


def describe(state: ServerState) -> dict:
    """One row of ``rise serve status``."""
    return {"name": state.name, "kind": state.kind, "status": server_status(state), "pid": state.pid,
            "base_url": state.spec.base_url, "model": state.spec.model, "log": state.log_path,
            "started_at": state.started_at}


def dumps_spec(spec: EndpointSpec) -> str:
    return json.dumps(spec.model_dump(mode="json"), indent=2)
