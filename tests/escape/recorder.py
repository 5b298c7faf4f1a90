"""A bystander HTTP server on 127.0.0.1 that answers 200 to anything and records every request with its headers,
so an escape test can show that no request (and no key) reached it."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the test reads .requests
        pass

    def _record(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.requests.append({"method": self.command, "path": self.path,
                                     "headers": {k.lower(): v for k, v in self.headers.items()},
                                     "body": body.decode(errors="replace")})
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_GET = do_POST = do_PUT = do_DELETE = _record


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    requests: list[dict[str, Any]]


class RecordingServer:
    """``with RecordingServer() as rec: ... rec.port, rec.requests``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self._srv = _Server((host, port), _Handler)
        self._srv.requests = []
        self.host, self.port = host, self._srv.server_address[1]
        self.requests = self._srv.requests

    def __enter__(self) -> Self:
        threading.Thread(target=self._srv.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._srv.shutdown()
        self._srv.server_close()
