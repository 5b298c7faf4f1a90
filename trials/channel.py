"""The trial channel: the one door of a confined harness, a unix socket the runner serves for one trial.

A confined harness has no network and no handle on its sandbox (:mod:`trials.confine`). Through this socket
(HTTP/1.1, one request at a time per connection, any number of connections) it reaches exactly these:

- **its model endpoints**: a request to host ``model-<i>.rise`` is forwarded to endpoint ``i`` of the trial (0
  the generator, 1 the verifier, when there is one), same method, path and body; the runner adds the endpoint's
  API key, so the key never enters the sandbox. Nothing else is forwarded anywhere: the upstream URL is the
  endpoint's own scheme, host and port with the request's path (origin-form only: one leading ``/``, no ``//``,
  no absolute or authority form, no userinfo); any other target is refused (400 ``bad_target``) before a byte
  or the key leaves the runner.
- **its trace collector**, when the runner has one (``OTEL_EXPORTER_OTLP_*``): host ``telemetry.rise``,
  ``POST /v1/traces`` goes to that collector (:mod:`trials.telemetry`), so spans arrive while the trial runs.
- **its sandbox**: host ``sandbox.rise``, ``POST /exec`` (JSON: cmd, cwd, env, timeout, user → an ExecResult),
  ``POST /upload?dst=PATH`` (body: a tar whose top entry is ``payload``), ``POST /download`` (JSON: src → a tar
  whose top entry is ``payload``), for this trial's sandbox only; never the Docker socket, never ``nsenter``.

Errors come back as JSON ``{"error": {"type": ..., "message": ..., "cause": ...}}`` (OpenAI's shape) with a
4xx/5xx status; an
unreachable model endpoint answers 502 (the harness's client reads that as "unreachable", as before).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import json
import logging
import os
import ssl
import tarfile
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import h11
import httpx

from .confine import AGENT_DIR, CHANNEL_NAME, CHANNEL_SOCKET
from .endpoints.spec import EndpointSpec
from .environments.archive import pack
from .environments.base import Environment
from .errors import InfraError
from .harness_api import AgentOutcome, TrialSpec
from .telemetry import CONTENT_TYPES, TELEMETRY_HOST, TRACES_PATH, Collector, collector_from_env

log = logging.getLogger(__name__)

MODEL_HOST = "model-{index}.rise"
SANDBOX_HOST = "sandbox.rise"
PAYLOAD = "payload"
MAX_BODY = 512 * 1024 * 1024
# Request headers passed on to a model endpoint; the rest (the harness's own Authorization included) is dropped.
FORWARD_HEADERS = ("content-type", "accept", "accept-encoding", "user-agent", "openai-beta")


class ChannelError(Exception):
    """A request the channel refuses or could not serve: (status, kind, message, cause)."""

    def __init__(self, status: int, kind: str, message: str, cause: str | None = None):
        super().__init__(message)
        self.status, self.kind, self.cause = status, kind, cause


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One TLS context (httpx's default: the certificate store, ``SSL_CERT_FILE``/``SSL_CERT_DIR`` honoured) for
    every channel of this process: building one loads the whole store, 40 ms of CPU, and a runner opens a
    channel per trial."""
    return httpx.create_ssl_context()


def harness_endpoint(spec: EndpointSpec, index: int) -> EndpointSpec:
    """The endpoint as the confined harness sees it: through the channel, with no key of its own."""
    parts = urlsplit(spec.base_url)
    return spec.model_copy(update={"base_url": f"http://{MODEL_HOST.format(index=index)}{parts.path}",
                                   "api_key_env": None})


def _upstream_root(spec: EndpointSpec) -> str:
    parts = urlsplit(spec.base_url)
    return f"{parts.scheme}://{parts.netloc}"


def upstream_url(spec: EndpointSpec, target: str) -> httpx.URL:
    """The URL a model request goes to: the endpoint's scheme, host and port (fixed by the trial's spec) and
    the request's path and query. Raises ChannelError (400) for any target that is not a plain origin-form path;
    string concatenation here once let ``1/...``, ``@host/`` or ``.evil.example/`` pick the host (issue 44)."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        raise ChannelError(400, "bad_target", f"the trial channel forwards origin-form paths only (one leading "
                           f"'/'), not the request target {target[:200]!r}")
    root = httpx.URL(spec.base_url)
    try:
        url = root.copy_with(raw_path=target.encode("ascii"))
    except (httpx.InvalidURL, UnicodeEncodeError) as exc:
        raise ChannelError(400, "bad_target", f"the request target {target[:200]!r} is not a valid path: {exc}"
                           ) from exc
    if (url.scheme, url.host, url.port, url.userinfo) != (root.scheme, root.host, root.port, root.userinfo):
        raise ChannelError(400, "bad_target", f"the request target {target[:200]!r} would leave the endpoint")
    return url


class TrialChannel:
    """Serves one trial's channel socket; ``await start(path)`` then ``await close()``."""

    def __init__(self, env: Environment, endpoints: list[EndpointSpec | None], collector: Collector | None = None):
        self.env = env
        self.endpoints = endpoints
        self.collector = collector
        self.requests: dict[str, int] = {}  # counts by route, for the trial's notes
        self._server: asyncio.base_events.Server | None = None
        self._http: httpx.AsyncClient | None = None
        self._path: Path | None = None

    async def start(self, path: Path) -> None:
        """Listen on ``path`` (a long path is reached through its folder's descriptor: sun_path is short)."""
        self._path = Path(path)
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()
        fd = os.open(self._path.parent, os.O_PATH | os.O_DIRECTORY)
        try:
            self._server = await asyncio.start_unix_server(self._serve, path=f"/proc/self/fd/{fd}/{self._path.name}")
        finally:
            os.close(fd)
        os.chmod(self._path, 0o600)
        self._http = httpx.AsyncClient(timeout=None, verify=_tls_context())

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    # ----------------------------------------------------------------------------------------- HTTP plumbing

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
        try:
            while True:
                request, body = await self._read_request(conn, reader)
                if request is None:
                    return
                try:
                    status, headers, payload = await self._dispatch(request, body)
                except ChannelError as exc:
                    status, headers, payload = exc.status, [("content-type", "application/json")], json.dumps(
                        {"error": {"type": exc.kind, "message": str(exc), "cause": exc.cause}}).encode()
                except Exception as exc:  # a bug here must answer, not hang the harness
                    log.exception("trial channel: request failed")
                    status, headers, payload = 500, [("content-type", "application/json")], json.dumps(
                        {"error": {"type": "channel", "message": f"{type(exc).__name__}: {exc}"}}).encode()
                headers = [*headers, ("content-length", str(len(payload)))]
                writer.write(conn.send(h11.Response(status_code=status, headers=headers)) or b"")
                writer.write(conn.send(h11.Data(data=payload)) or b"")
                writer.write(conn.send(h11.EndOfMessage()) or b"")
                await writer.drain()
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
        except (h11.RemoteProtocolError, ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _read_request(self, conn: h11.Connection, reader: asyncio.StreamReader
                            ) -> tuple[h11.Request | None, bytes]:
        request: h11.Request | None = None
        chunks: list[bytes] = []
        size = 0
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(1 << 16)
                conn.receive_data(data)
                if not data and request is None:
                    return None, b""
                continue
            if isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > MAX_BODY:
                    raise h11.RemoteProtocolError("request body too large")
                chunks.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return request, b"".join(chunks)
            elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                return None, b""

    async def _dispatch(self, request: h11.Request, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        headers = {k.decode().lower(): v.decode() for k, v in request.headers}
        host = headers.get("host", "").split(":")[0]
        target = request.target.decode()
        route = host if host in (SANDBOX_HOST, TELEMETRY_HOST) else "model" if host.startswith("model-") else "refused"
        self.requests[route] = self.requests.get(route, 0) + 1
        if host == SANDBOX_HOST:
            return await self._sandbox(request.method.decode(), target, body)
        if host == TELEMETRY_HOST:
            return await self._telemetry(request.method.decode(), target, headers, body)
        for i, spec in enumerate(self.endpoints):
            if spec is not None and host == MODEL_HOST.format(index=i):
                return await self._forward(spec, request.method.decode(), target, headers, body)
        raise ChannelError(403, "refused", f"the trial channel serves its model endpoints and its sandbox only, "
                           f"not host {host!r}")

    # ---------------------------------------------------------------------------------------- model endpoints

    async def _forward(self, spec: EndpointSpec, method: str, target: str, headers: dict[str, str],
                       body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        assert self._http is not None
        try:
            url = upstream_url(spec, target)  # before the key is touched: a refused target never carries it
        except ChannelError:
            self.requests["refused"] = self.requests.get("refused", 0) + 1
            log.warning("trial channel: refused model request target %r", target[:200])
            raise
        out = {k: v for k, v in headers.items() if k in FORWARD_HEADERS}
        key = spec.api_key()
        if key and key != "EMPTY":
            out["authorization"] = f"Bearer {key}"
        try:  # never a redirect: the key goes to the endpoint's own host only
            resp = await self._http.request(method, url, content=body, headers=out, timeout=spec.timeout_sec,
                                            follow_redirects=False)
        except httpx.HTTPError as exc:
            raise ChannelError(502, "model_unreachable", f"model server unreachable at {url}: "
                               f"{type(exc).__name__}: {exc}") from exc
        kept = [(k, v) for k, v in resp.headers.items() if k.lower() in ("content-type", "retry-after")]
        return resp.status_code, kept, resp.content

    # ------------------------------------------------------------------------------------- the trace collector

    async def _telemetry(self, method: str, target: str, headers: dict[str, str], body: bytes
                         ) -> tuple[int, list[tuple[str, str]], bytes]:
        """OTLP/HTTP export requests to the runner's collector: fixed URL and headers, the body only."""
        assert self._http is not None
        if self.collector is None:
            raise ChannelError(404, "no_collector", "the runner has no trace collector (OTEL_EXPORTER_OTLP_*)")
        if method == "GET" and target == "/":
            return 200, [("content-type", "application/json")], b'{"collector": true}'
        if method != "POST" or target != TRACES_PATH:
            raise ChannelError(404, "not_found", f"no {method} {target[:200]} on {TELEMETRY_HOST} "
                               f"(POST {TRACES_PATH})")
        ctype = headers.get("content-type", "").split(";")[0].strip()
        if ctype not in CONTENT_TYPES:
            raise ChannelError(415, "bad_content_type", f"OTLP export requests are {' or '.join(CONTENT_TYPES)}, "
                               f"not {ctype!r}")
        try:
            resp = await self._http.post(self.collector.url, content=body, timeout=10, follow_redirects=False,
                                         headers={**self.collector.headers, "content-type": ctype})
        except httpx.HTTPError as exc:
            raise ChannelError(502, "collector_unreachable", f"trace collector unreachable at "
                               f"{self.collector.url}: {type(exc).__name__}") from exc
        kept = [(k, v) for k, v in resp.headers.items() if k.lower() == "content-type"]
        return resp.status_code, kept, resp.content

    # ------------------------------------------------------------------------------------------- the sandbox

    async def _sandbox(self, method: str, target: str, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        parts = urlsplit(target)
        if method != "POST" or parts.path not in ("/exec", "/upload", "/download"):
            raise ChannelError(404, "not_found", f"no {method} {parts.path} on the sandbox channel "
                               "(POST /exec, /upload, /download)")
        try:
            if parts.path == "/exec":
                args = _json_object(body)
                res = await self.env.exec(str(args["cmd"]), cwd=args.get("cwd"), env=args.get("env"),
                                          timeout=args.get("timeout"), user=args.get("user"))
                return 200, [("content-type", "application/json")], res.model_dump_json().encode()
            if parts.path == "/upload":
                dst = (parse_qs(parts.query).get("dst") or [""])[0]
                if not dst:
                    raise ChannelError(400, "bad_request", "upload needs ?dst=PATH")
                await self._upload(body, dst)
                return 200, [("content-type", "application/json")], b"{}"
            data = await self._download(str(_json_object(body)["src"]))
            return 200, [("content-type", "application/x-tar")], data
        except ChannelError:
            raise
        except InfraError as exc:
            raise ChannelError(503, "sandbox", str(exc), exc.cause) from exc
        except FileNotFoundError as exc:
            raise ChannelError(404, "file_not_found", str(exc)) from exc
        except (KeyError, TypeError, ValueError, tarfile.TarError) as exc:
            raise ChannelError(400, "bad_request", f"{type(exc).__name__}: {exc}") from exc

    async def _upload(self, data: bytes, dst: str) -> None:
        with tempfile.TemporaryDirectory(prefix="rise-channel-") as tmp:
            def extract() -> None:
                with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                    tar.extractall(tmp, filter="data")  # no absolute paths, no .., no devices

            await asyncio.to_thread(extract)
            src = Path(tmp) / PAYLOAD
            if not src.exists():
                raise ChannelError(400, "bad_request", f"the upload's tar has no top entry {PAYLOAD!r}")
            await self.env.upload(src, dst)

    async def _download(self, src: str) -> bytes:
        with tempfile.TemporaryDirectory(prefix="rise-channel-") as tmp:
            await self.env.download(src, Path(tmp) / PAYLOAD)
            return await asyncio.to_thread(pack, Path(tmp) / PAYLOAD, PAYLOAD)


@contextlib.asynccontextmanager
async def serving(confinement: Any, env: Environment, spec: TrialSpec, agent_dir: Path
                  ) -> AsyncIterator[TrialSpec]:
    """Serve a confined harness's channel for the duration of its run; yields the trial spec as the harness
    sees it (sandbox paths, the channel's sandbox handle and endpoints). Unconfined: ``spec`` unchanged."""
    if confinement is None:
        yield spec
        return
    from .environments.channel import ChannelEnvironment

    channel = TrialChannel(env, [spec.endpoint, spec.verifier_endpoint], collector_from_env(os.environ))
    await channel.start(agent_dir / CHANNEL_NAME)
    handle = ChannelEnvironment(CHANNEL_SOCKET, spec.workdir, env.kind, env.terminal).handle()
    seen = spec.model_copy(update={
        "env": handle, "agent_dir": AGENT_DIR, "endpoint": harness_endpoint(spec.endpoint, 0),
        "verifier_endpoint": harness_endpoint(spec.verifier_endpoint, 1) if spec.verifier_endpoint else None})
    try:
        yield seen
    finally:
        await channel.close()
        with contextlib.suppress(OSError):
            (agent_dir / CHANNEL_NAME).unlink()
        _name_real_endpoints(agent_dir, [spec.endpoint, spec.verifier_endpoint])


def _name_real_endpoints(agent_dir: Path, endpoints: list[EndpointSpec | None]) -> None:
    """The outcome's error names the endpoint the harness saw (``http://model-0.rise/v1``); name the real one
    (``result.json``'s infra message says which server did not answer)."""
    path = agent_dir / "agent_result.json"
    try:
        outcome = AgentOutcome.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return  # none, or unreadable: the runner reports that as it is
    error = outcome.error or ""
    for i, spec in enumerate(endpoints):
        if spec is not None:
            error = error.replace(f"http://{MODEL_HOST.format(index=i)}", _upstream_root(spec))
    if error != (outcome.error or ""):
        outcome.error = error
        outcome.write(agent_dir)


def _json_object(body: bytes) -> dict[str, Any]:
    data = json.loads(body or b"{}")
    if not isinstance(data, dict):
        raise TypeError("the request body must be a JSON object")
    return data
