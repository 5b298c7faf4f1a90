"""The sandbox as a confined harness sees it: exec, upload and download through the trial channel.

:func:`trials.environments.factory.attach` returns a :class:`ChannelEnvironment` for a handle of kind ``channel``
(what the runner writes into a confined harness's trial spec). Every call is one HTTP request over the channel's
unix socket (:mod:`trials.channel`); the runner runs it on the real sandbox. The harness cannot start or stop the
sandbox: :meth:`stop` only closes the connection.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from pathlib import Path
from typing import Any

import httpx

from ..errors import SandboxError
from .archive import pack, unpack_single
from .base import Environment, ExecResult

SANDBOX_URL = "http://sandbox.rise"
PAYLOAD = "payload"


def channel_transport(socket_path: str, *, sync: bool = False) -> httpx.AsyncHTTPTransport | httpx.HTTPTransport:
    """An httpx transport (async, or ``sync``) to the trial channel's unix socket at ``socket_path``.

    The channel speaks plain HTTP; TLS, where an endpoint has it, is the runner's side of the channel. So the
    transport gets a TLS context with no certificates at all (any TLS through it fails verification) instead of
    httpx's default, which loads the whole certificate store for every transport: 40 ms of CPU each, and a
    confined agent makes three (its model client, its sandbox, its span export)."""
    plain_only = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if sync:
        return httpx.HTTPTransport(uds=socket_path, verify=plain_only)
    return httpx.AsyncHTTPTransport(uds=socket_path, verify=plain_only)


class ChannelEnvironment(Environment):
    """A started sandbox reached through the trial channel (see the module docstring)."""

    kind = "channel"

    def __init__(self, socket_path: str, workdir: str = "/app", sandbox_kind: str | None = None,
                 terminal: dict[str, Any] | None = None):
        self.socket_path, self.workdir, self.sandbox_kind = socket_path, workdir, sandbox_kind
        self.terminal = terminal
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _http(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:  # a client belongs to the loop that made it
            self._client = httpx.AsyncClient(transport=channel_transport(self.socket_path), base_url=SANDBOX_URL,
                                             timeout=None)
            self._loop = loop
        return self._client

    async def _post(self, path: str, **kw: Any) -> httpx.Response:
        try:
            resp = await self._http().post(path, **kw)
        except httpx.HTTPError as exc:
            raise SandboxError(f"the trial channel {self.socket_path} did not answer {path}: "
                               f"{type(exc).__name__}: {exc}") from exc
        if resp.status_code == 200:
            return resp
        try:
            err = resp.json()["error"]
        except (ValueError, KeyError, TypeError):
            err = {"message": resp.text[:500]}
        if not isinstance(err, dict):
            err = {"message": str(err)}
        message = str(err.get("message") or f"status {resp.status_code}")
        if err.get("type") == "file_not_found":
            raise FileNotFoundError(message)
        raise SandboxError(f"sandbox channel {path}: {message}", cause=err.get("cause") or None)

    async def start(self) -> None:
        """Nothing to start: the runner started the sandbox."""

    async def exec(self, cmd: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout: float | None = None, user: str | None = None) -> ExecResult:
        body = {"cmd": cmd, "cwd": cwd, "env": env, "timeout": timeout, "user": user}
        resp = await self._post("/exec", content=json.dumps(body).encode(),
                                headers={"content-type": "application/json"})
        return ExecResult.model_validate_json(resp.content)

    async def upload(self, src: Path, dst: str) -> None:
        src = Path(src)
        if not src.exists():
            raise FileNotFoundError(src)
        data = await asyncio.to_thread(pack, src, PAYLOAD)
        await self._post("/upload", params={"dst": dst}, content=data,
                         headers={"content-type": "application/x-tar"})

    async def download(self, src: str, dst: Path) -> None:
        resp = await self._post("/download", content=json.dumps({"src": src}).encode(),
                                headers={"content-type": "application/json"})
        await asyncio.to_thread(unpack_single, resp.content, PAYLOAD, Path(dst))

    async def stop(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    def handle(self) -> dict[str, Any]:
        return {"kind": self.kind, "socket": self.socket_path, "workdir": self.workdir,
                "sandbox_kind": self.sandbox_kind, "terminal": self.terminal}

    @classmethod
    def attach(cls, handle: dict[str, Any]) -> ChannelEnvironment:
        return cls(str(handle["socket"]), handle.get("workdir") or "/app", handle.get("sandbox_kind"),
                   handle.get("terminal"))
