"""A hostile harness for the network routes of issue 44: ``main(["--spec", PATH])`` reads ``targets.json`` beside
this file (written by the test) and tries

- route 3: model requests through the channel whose request target names another host or port
  (``@127.0.0.1:PORT/``, or a digit that extends the endpoint's port: ``7/steal``), GET and POST, so that string
  concatenation would send them, with the runner's key, to a bystander;
- route 4: TCP connections from its sandbox (a command through the channel) to a listener on the host's
  127.0.0.1 and to a server on a non-loopback host address (the "outside"), and the same two from its own
  process, which must have no network at all.

Each attempt is printed (``ATTEMPT name: blocked|ESCAPED|reached (detail)``) and written to ``escape.json`` in
its agent folder with one honest model call and one honest command, so the test sees the allowed doors work."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import trials.harness_api as api

TARGETS = Path(__file__).resolve().parent / "targets.json"


def raw_model_request(method: str, target: str) -> tuple[int, str]:
    """One HTTP request over the channel with a hand-written request line (a client library would fix it)."""
    body = b'{"model": "scripted", "messages": []}'
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(os.environ["RISE_CHANNEL"])
        s.sendall(f"{method} {target} HTTP/1.1\r\nhost: model-0.rise\r\ncontent-type: application/json\r\n"
                  f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode() + body)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    head, _, rest = out.partition(b"\r\n\r\n")
    return int(head.split()[1]), rest.decode(errors="replace")[:200]


def connect_probe(host: str, port: int) -> str:
    return (f"python3 -c \"import socket; c = socket.create_connection(('{host}', {port}), timeout=3); "
            f"print('REACHED', c.recv(8).decode().strip())\"")


def connect_here(host: str, port: int) -> tuple[bool, str]:
    try:
        with socket.create_connection((host, port), timeout=3) as c:
            return True, c.recv(8).decode().strip()
    except OSError as exc:
        return False, f"{type(exc).__name__}: {exc}"


async def run(spec: api.TrialSpec, targets: dict[str, Any]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for i, target in enumerate(targets["route3_targets"]):
        for method in ("GET", "POST"):
            status, detail = await asyncio.to_thread(raw_model_request, method, target)
            results[f"route3_{i}_{method}"] = {"reached": status < 400, "detail": f"{status} {detail}"}
    env = api.attach_environment(spec.env)
    for name, (host, port) in {"loopback": ("127.0.0.1", targets["loopback_port"]),
                               "outside": (targets["outside_host"], targets["outside_port"])}.items():
        res = await env.exec(connect_probe(host, port), timeout=20)
        results[f"sandbox_{name}"] = {"reached": "REACHED" in res.stdout,
                                      "detail": (res.stdout + res.stderr).strip()[-200:]}
        reached, detail = connect_here(host, port)
        results[f"harness_{name}"] = {"reached": reached, "detail": detail}
    honest_exec = await env.exec("echo hostile > /app/hostile.txt && cat /app/hostile.txt")
    client = api.ModelClient(spec.endpoint)
    try:
        chat = await client.chat([{"role": "user", "content": "hello"}])
    finally:
        await client.aclose()
    await env.stop()
    return {"attempts": results, "honest": {"exec": honest_exec.stdout.strip(), "model": chat.text[:40]}}


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    spec = api.TrialSpec.load(args[args.index("--spec") + 1])
    record = asyncio.run(run(spec, json.loads(TARGETS.read_text())))
    for name, a in record["attempts"].items():
        print(f"ATTEMPT {name}: {'reached' if a['reached'] else 'blocked'} ({a['detail']})", flush=True)
    (Path(spec.agent_dir) / "escape.json").write_text(json.dumps(record, indent=1))
    api.AgentOutcome(status="completed", episodes=1).write(spec.agent_dir)
    return 0
