"""The ``docker`` sandbox: one container per trial, built from the task's ``environment/Dockerfile``.

The FROM line goes through the base-image map (``images.BaseImageMap``) so air-gapped machines build on
``rise-base:<release>`` (built when missing); task images are cached by a content hash of the environment folder
and the rewritten Dockerfile; builds of one image are serialised with a file lock (threads and processes alike). Containers run
a bash keeper as pid 1 (the image needs bash, as every exec does), carry ``rise.job`` / ``rise.trial`` labels, get the task's CPU and memory
limits, a pids limit (``RISE_SANDBOX_PIDS``, trials/limits.py) and no network when ``allow_internet = false``. docker-py is synchronous: every call goes through
``asyncio.to_thread``. ``docker exec`` has no timeout, so commands run under ``timeout -s KILL`` inside. The
command that prepares the container's folders also starts the harness's tmux session when the runner asked for
one (``terminal_request``, see ``trials/terminal.py``): the harness adopts it instead of paying round trips.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import io
import logging
import os
import re
import shlex
import tarfile
import time
import uuid
from pathlib import Path
from typing import Any, Self

from .. import terminal
from ..errors import EnvironmentBuildError, InfraError, SandboxError
from ..limits import sandbox_pids
from .archive import split_sandbox_path, unpack_single, upload_payload
from .base import Environment, ExecResult, in_workdir
from .dockerfile import parse, rewrite_from
from .images import BaseImageMap, cache_dir, docker_client, ensure_base_image, image_exists, release_of_image
from .local import KEEPER_SCRIPT, _choose_workdir, owner_alive, owner_tag
from .verifier import sandbox_pid_ok, tools_mode

log = logging.getLogger(__name__)

JOB_LABEL, TRIAL_LABEL, TASK_LABEL, HASH_LABEL = "rise.job", "rise.trial", "rise.task", "rise.hash"
OWNER_LABEL = "rise.owner"  # host:pid:starttime of the process that started the container
TASK_IMAGE_REPO = "rise-task"
TIMEOUT_GRACE = 30.0  # host-side backstop beyond the in-container timeout


def _slug(text: str, limit: int = 40) -> str:
    return re.sub(r"[^a-z0-9_.-]+", "-", text.lower()).strip("-.")[:limit] or "x"


def context_hash(environment_dir: Path, dockerfile_text: str) -> str:
    """Content hash of the build context (paths, modes, bytes) and the Dockerfile as it will be built."""
    h = hashlib.sha256(dockerfile_text.encode())
    if environment_dir.is_dir():
        for p in sorted(environment_dir.rglob("*")):
            rel = p.relative_to(environment_dir).as_posix()
            if rel == "Dockerfile":
                continue
            h.update(f"\0{rel}\0{p.stat().st_mode & 0o777 if not p.is_symlink() else 0}\0".encode())
            if p.is_symlink():
                h.update(os.readlink(p).encode())
            elif p.is_file():
                h.update(p.read_bytes())
    return h.hexdigest()[:16]


def build_context_tar(environment_dir: Path, dockerfile_text: str) -> bytes:
    """The environment folder with the rewritten Dockerfile in place of the task's own (never edited)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        if environment_dir.is_dir():
            for p in sorted(environment_dir.iterdir()):
                if p.name != "Dockerfile":
                    tar.add(str(p), arcname=p.name)
        data = dockerfile_text.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class _FileLock:
    """An exclusive flock on a file under the cache; blocks threads and other processes alike."""

    def __init__(self, name: str):
        self.path = cache_dir().parent / "locks" / f"{name}.lock"

    def __enter__(self) -> Self:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = self.path.open("w")
        fcntl.flock(self._f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self._f, fcntl.LOCK_UN)
        self._f.close()


class DockerEnvironment(Environment):
    """A Docker container for one trial (see the module docstring)."""

    kind = "docker"
    starts_terminal = True

    def __init__(self, task: Any, trial_dir: str | os.PathLike, job_id: str | None = None,
                 base_image_map: BaseImageMap | None = None, client: Any = None):
        self.task = task
        self.trial_dir = Path(trial_dir).resolve()
        self.job_id = job_id
        self.base_image_map = base_image_map or BaseImageMap.from_env()
        self.build_log = self.trial_dir / "build.log"
        cfg = task.config.environment
        self.allow_internet = bool(cfg.allow_internet)
        self.workdir = cfg.workdir or "/app"
        self.env: dict[str, str] = {k: str(v) for k, v in cfg.env.items()}
        self.image: str | None = None
        self.container_id: str | None = None
        self._client = client
        self._container: Any = None
        self._owner = True
        self._labels: dict[str, str] = {}
        self._tools_id: str | None = None  # the verifier's tools container (verifier.tools_mode)

    # ------------------------------------------------------------------ image

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = docker_client()
        return self._client

    def _resolve_from(self, image: str) -> str:
        target = self.base_image_map.resolve(image, present=lambda name: image_exists(self.client, name))
        if (release := release_of_image(target)) and not image_exists(self.client, target):
            with _FileLock(f"rise-base-{release.codename}"):
                ensure_base_image(client=self.client, release=release)
        return target

    def _ensure_image(self) -> str:
        """Build (or reuse) the task image; returns its tag."""
        cfg = self.task.config.environment
        dockerfile = self.task.dockerfile
        if dockerfile is None:
            if not cfg.docker_image:
                raise EnvironmentBuildError(f"task {self.task.name} has neither environment/Dockerfile "
                                            "nor [environment].docker_image")
            return self._resolve_from(cfg.docker_image)
        original = Path(dockerfile).read_text()
        targets: list[str] = []

        def resolve(image: str) -> str:
            targets.append(self._resolve_from(image))
            return targets[-1]

        text, changes = rewrite_from(original, resolve)
        workdirs = [i.args.strip() for i in parse(text) if i.keyword == "WORKDIR"]
        self.workdir = _choose_workdir(cfg.workdir, workdirs[-1] if workdirs else None)
        context = Path(self.task.environment_dir)
        # The ids of the FROM images are part of the key: a rebuilt base image means rebuilt task images.
        base_ids = [self.client.images.get(t).id for t in targets if image_exists(self.client, t)]
        digest = context_hash(context, text + "\n".join(base_ids))
        tag = f"{TASK_IMAGE_REPO}-{_slug(self.task.name)}:{digest}"
        with _FileLock(f"build-{_slug(self.task.name)}-{digest}"):
            if image_exists(self.client, tag):
                self.build_log.parent.mkdir(parents=True, exist_ok=True)
                self.build_log.write_text(f"# cached image {tag} (content hash of {context})\n")
                return tag
            self._build(tag, context, text, changes, float(cfg.build_timeout_sec or 600), digest)
        return tag

    def _build(self, tag: str, context: Path, text: str, changes: list[tuple[str, str]], timeout: float,
               digest: str) -> None:
        self.build_log.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout
        error: str | None = None
        with self.build_log.open("w") as logf:
            for old, new in changes:
                logf.write(f"# FROM {old} -> {new} (base-image map)\n")
            try:
                stream = self.client.api.build(
                    fileobj=io.BytesIO(build_context_tar(context, text)), custom_context=True, tag=tag,
                    rm=True, forcerm=True, pull=False, decode=True, timeout=timeout + 60,
                    labels={TASK_LABEL: self.task.name, HASH_LABEL: digest})
                for chunk in stream:
                    if "stream" in chunk:
                        logf.write(chunk["stream"])
                    if "error" in chunk:
                        error = chunk["error"]
                        logf.write(f"ERROR: {error}\n")
                    if time.monotonic() > deadline:
                        error = f"build timed out after {timeout:.0f}s (build_timeout_sec)"
                        logf.write(f"ERROR: {error}\n")
                        stream.close()
                        break
            except Exception as exc:  # noqa: BLE001 - any engine failure is a build failure, with its log
                error = f"{type(exc).__name__}: {exc}"
                logf.write(f"ERROR: {error}\n")
        if error or not image_exists(self.client, tag):
            raise EnvironmentBuildError(f"building the image of {self.task.name} failed: "
                                        f"{(error or 'no image produced').strip()}; see {self.build_log}",
                                        log_path=str(self.build_log))

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        try:
            await asyncio.to_thread(lambda: self.client)
        except InfraError as exc:
            raise SandboxError(str(exc)) from exc
        self.image = await asyncio.to_thread(self._ensure_image)
        cfg = self.task.config.environment
        name = f"rise-{_slug(self.job_id or 'nojob', 20)}-{_slug(self.trial_dir.name)}-{uuid.uuid4().hex[:6]}"
        labels = self._labels = {JOB_LABEL: self.job_id or "", TRIAL_LABEL: self.trial_dir.name,
                                 TASK_LABEL: self.task.name, OWNER_LABEL: owner_tag()}
        kwargs: dict[str, Any] = {
            # bash as pid 1 (no docker-init): the kernel shields pid 1 from signals sent inside the container, so
            # an agent's `kill -9 -1` cannot end the sandbox; the loop reaps orphans. Same keeper as local.
            "command": ["bash", "-c", KEEPER_SCRIPT], "detach": True, "init": False, "name": name,
            "working_dir": self.workdir, "environment": self.env, "labels": labels,
            "nano_cpus": int(float(cfg.cpus) * 1e9), "mem_limit": f"{int(cfg.memory_mb)}m",
            "pids_limit": sandbox_pids()}  # as the local sandbox's (trials/limits.py)
        if not self.allow_internet:
            kwargs["network_mode"] = "none"
        try:
            self._container = await asyncio.to_thread(self.client.containers.run, self.image, **kwargs)
        except Exception as exc:
            raise SandboxError(f"starting a container of {self.image} failed: {exc}") from exc
        self.container_id = self._container.id
        # One docker exec: the folders, and the harness's terminal when it asked for one (trials/terminal.py).
        script = "mkdir -p /logs/verifier /logs/agent " + shlex.quote(self.workdir) + " || exit 1\n"
        spec = self.terminal_request
        if spec is not None:
            script += terminal.start_script(spec, self.workdir)
        res = await self.exec(script, cwd="/")
        if spec is not None and res.returncode == terminal.NOT_STARTED:  # the harness starts its own
            log.warning("%s: the terminal was not started with the sandbox: %s", self.trial_dir.name,
                        (res.stderr or res.stdout).strip()[:300] or "tmux is missing")
        elif not res.ok:
            await self.stop()
            raise SandboxError(f"the container of {self.image} cannot run bash: {res.stderr or res.stdout}")
        elif spec is not None:
            self.terminal = spec.identity()

    async def stop(self) -> None:
        if not self._owner or self.container_id is None:
            return
        import docker.errors

        ids, self.container_id, self._tools_id = (self.container_id, self._tools_id), None, None
        for c in [c for c in ids if c is not None]:  # the sandbox and the verifier's tools container
            try:
                await asyncio.to_thread(lambda c=c: self.client.containers.get(c).remove(force=True))
            except docker.errors.NotFound:
                pass

    def handle(self) -> dict[str, Any]:
        return {"kind": self.kind, "container_id": self.container_id, "image": self.image,
                "workdir": self.workdir, "env": self.env, "trial_dir": str(self.trial_dir),
                "job_id": self.job_id, "terminal": self.terminal}

    @classmethod
    def attach(cls, handle: dict[str, Any]) -> DockerEnvironment:
        env = cls.__new__(cls)
        env.task = None
        env.trial_dir = Path(handle["trial_dir"])
        env.job_id = handle.get("job_id")
        env.base_image_map = BaseImageMap()
        env.build_log = env.trial_dir / "build.log"
        env.allow_internet = False
        env.workdir = handle.get("workdir") or "/app"
        env.env = dict(handle.get("env") or {})
        env.image = handle.get("image")
        env.container_id = handle["container_id"]
        env.terminal = handle.get("terminal")
        env._client = None
        env._container = None
        env._owner = False
        env._labels, env._tools_id = {}, None
        return env

    async def verifier_target(self) -> dict[str, Any] | str:
        """The container's pid 1 when the engine runs on this machine and we are root (the verifier's private
        run joins its namespaces and cgroups); else why only the shared mode is possible."""
        if os.geteuid() != 0:
            return "the verifier's private view needs root on the host"
        container = await asyncio.to_thread(self._get_container)
        await asyncio.to_thread(container.reload)
        pid = int(container.attrs.get("State", {}).get("Pid") or 0)
        config = container.attrs.get("Config", {})
        if pid <= 0 or not sandbox_pid_ok(pid, container.id):
            return "the Docker engine does not run on this machine (the container's pid 1 is not visible here)"
        env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
        tools = await asyncio.to_thread(self._tools_pid) if tools_mode() == "image" else None
        return {"pid": pid, "cgroups": True, "env": {"HOME": "/root", **env}, "tools_pid": tools}

    def _tools_pid(self) -> int:
        """pid 1 of a fresh, idle container of the task image (started once): the tests' /usr, /etc, /bin... come
        from it, out of the agent's reach (trials/environments/verify_enter.py)."""
        if self._tools_id is None:
            name = f"{self._get_container().name}-tools"
            self._tools_id = self.client.containers.run(
                self.image, command=["bash", "-c", KEEPER_SCRIPT], detach=True, init=False, name=name,
                network_mode="none", labels=self._labels).id
        tools = self.client.containers.get(self._tools_id)
        pid = int(tools.attrs.get("State", {}).get("Pid") or 0)
        if pid <= 0 or not sandbox_pid_ok(pid, tools.id):
            raise SandboxError(f"the verifier's tools container of {self.image} has no pid here")
        return pid

    # ------------------------------------------------------------------ exec and copies

    def _get_container(self) -> Any:
        if self.container_id is None:
            raise SandboxError("the docker sandbox is not started")
        if self._container is None:
            import docker.errors

            try:
                self._container = self.client.containers.get(self.container_id)
            except docker.errors.NotFound as exc:
                raise SandboxError(f"container {self.container_id[:12]} is gone") from exc
        return self._container

    async def exec(self, cmd: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout: float | None = None, user: str | None = None) -> ExecResult:
        argv = ["bash", "-c", in_workdir(cmd, cwd or self.workdir)]
        if timeout is not None:
            argv = ["timeout", "-s", "KILL", f"{max(timeout, 0.01):.3f}", *argv]
        container = await asyncio.to_thread(self._get_container)

        def run() -> tuple[int, bytes | None, bytes | None]:
            res = container.exec_run(argv, workdir="/", environment=env or {},
                                     user=user or "", demux=True)
            out, err = res.output if res.output else (None, None)
            return res.exit_code, out, err

        t0 = time.monotonic()
        backstop = None if timeout is None else timeout + TIMEOUT_GRACE
        try:
            rc, out, err = await asyncio.wait_for(asyncio.to_thread(run), backstop)
        except TimeoutError:  # a background process kept the exec's output open past the kill
            return ExecResult(returncode=124, stderr="exec did not return after its timeout", timed_out=True)
        except Exception as exc:
            raise SandboxError(f"docker exec failed: {exc}") from exc
        timed_out = timeout is not None and rc in (124, 137) and time.monotonic() - t0 >= timeout * 0.95
        return ExecResult(returncode=124 if timed_out else int(rc if rc is not None else -1),
                          stdout=(out or b"").decode(errors="replace"),
                          stderr=(err or b"").decode(errors="replace"), timed_out=timed_out)

    async def upload(self, src: Path, dst: str) -> None:
        """Copy host ``src`` to container path ``dst`` (a folder's contents go into folder ``dst``)."""
        target, data = upload_payload(src, dst, self.workdir)
        res = await self.exec(f"mkdir -p {shlex.quote(target)}", cwd="/")
        if not res.ok:
            raise SandboxError(f"upload {src} -> {dst}: mkdir failed: {res.stderr.strip()}")
        container = await asyncio.to_thread(self._get_container)
        ok = await asyncio.to_thread(container.put_archive, target, data)
        if not ok:
            raise SandboxError(f"upload {src} -> {dst} failed")

    async def download(self, src: str, dst: Path) -> None:
        """Copy container path ``src`` (file or folder) to host path ``dst``."""
        import docker.errors

        src = src if src.startswith("/") else f"{self.workdir}/{src}"
        _, name = split_sandbox_path(src)
        container = await asyncio.to_thread(self._get_container)

        def fetch() -> bytes:
            stream, _ = container.get_archive(src)
            return b"".join(stream)

        try:
            data = await asyncio.to_thread(fetch)
        except docker.errors.NotFound as exc:
            raise FileNotFoundError(f"{src} does not exist in the container") from exc
        await asyncio.to_thread(unpack_single, data, name, Path(dst))


def reap_leftovers(job_id: str | None = None, client: Any = None, include_live: bool = False) -> int:
    """Remove containers of a crashed job (of any job when ``job_id`` is None); returns the count.

    Called by the runner at job start. Only containers whose owning process is gone are removed unless
    ``include_live`` (so a second job on the same engine keeps its sandboxes). No engine: returns 0.
    """
    import docker.errors

    try:
        client = client or docker_client()
    except InfraError:
        return 0
    label = f"{JOB_LABEL}={job_id}" if job_id is not None else JOB_LABEL
    removed = 0
    for c in client.containers.list(all=True, filters={"label": label}):
        if not include_live and owner_alive((c.labels or {}).get(OWNER_LABEL, "")):
            continue
        try:
            c.remove(force=True)
            removed += 1
        except docker.errors.APIError as exc:  # already going away
            log.debug("reap %s: %s", c.id[:12], exc)
    return removed
