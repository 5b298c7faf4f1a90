"""The hostile harness: ``main(["--spec", PATH])`` reads ``targets.json`` beside this file (written by the test),
tries each attempt, prints the environment, the view of ``/`` and every attempt to stdout (the trial's
``stdout.log``), writes them to ``escape.json`` in its agent folder, and makes one honest model call and one
honest command, so the test also sees that the allowed doors work."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trials.harness_api as api

TARGETS = Path(__file__).resolve().parent / "targets.json"
NOT_WALKED = ("/proc", "/dev", "/sys", "/usr", "/etc")


def attempt(results: dict[str, Any], name: str, fn: Callable[[], Any]) -> None:
    """Run one attempt: it escaped when ``fn`` returns, was blocked when it raises."""
    try:
        detail = fn()
        results[name] = {"blocked": False, "detail": str(detail)[:300]}
    except Exception as exc:  # noqa: BLE001 - every refusal is the expected outcome
        results[name] = {"blocked": True, "detail": f"{type(exc).__name__}: {exc}"[:300]}
    print(f"ATTEMPT {name}: {'blocked' if results[name]['blocked'] else 'ESCAPED'} "
          f"({results[name]['detail']})", flush=True)


def read(path: str) -> str:
    return Path(path).read_text()[:80]


def find_secret(name: str, value: str) -> str:
    """The secret from the environment or from any process this one can see."""
    if name in os.environ:
        return f"in my environment: {name}"
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if value.encode() in (entry / "environ").read_bytes():
                    return f"in /proc/{entry.name}/environ"
            except OSError:
                continue
    raise PermissionError(f"{name} is neither in my environment nor in any process I can see")


def connect_tcp(port: int) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=3):
        return f"connected to 127.0.0.1:{port}"


def connect_unix(path: str) -> str:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(3)
        s.connect(path)
        return f"connected to {path}"


def write_each(paths: list[str]) -> str:
    written = []
    for p in paths:
        try:
            Path(p).write_text("escaped\n")
            written.append(p)
        except OSError:
            continue
    if not written:
        raise PermissionError(f"none of {len(paths)} paths outside my folder is writable")
    return f"wrote {written}"


def channel_to(host: str) -> str:
    import httpx

    with httpx.Client(transport=httpx.HTTPTransport(uds=os.environ["RISE_CHANNEL"]), timeout=10) as client:
        resp = client.get(f"http://{host}/")
    if resp.status_code >= 400:
        raise PermissionError(f"the channel answered {resp.status_code}: {resp.text[:120]}")
    return f"the channel forwarded to {host}: {resp.status_code}"


def show_view() -> None:
    print("ENV " + json.dumps(dict(sorted(os.environ.items()))), flush=True)
    print("ROOT " + json.dumps(sorted(os.listdir("/"))), flush=True)
    for top, dirs, files in os.walk("/"):
        if top.startswith(NOT_WALKED) or top.count("/") > 6:
            dirs[:] = []
            continue
        dirs[:] = [d for d in dirs if not os.path.join(top, d).startswith(NOT_WALKED)]
        for name in dirs + files:
            print("PATH " + os.path.join(top, name), flush=True)


async def honest(spec: api.TrialSpec) -> dict[str, Any]:
    env = api.attach_environment(spec.env)
    res = await env.exec("echo hostile > /app/hostile.txt && cat /app/hostile.txt")
    client = api.ModelClient(spec.endpoint)
    try:
        chat = await client.chat([{"role": "user", "content": "hello"}])
    finally:
        await client.aclose()
    await env.stop()
    return {"exec": res.stdout.strip(), "model": chat.text[:40]}


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    spec = api.TrialSpec.load(args[args.index("--spec") + 1])
    targets = json.loads(TARGETS.read_text())
    show_view()
    results: dict[str, Any] = {}
    for i, path in enumerate(targets["read"]):
        attempt(results, f"read_{i}", lambda p=path: read(p))
    for name, value in targets["env_secrets"].items():
        attempt(results, f"env_{name}", lambda n=name, v=value: find_secret(n, v))
    attempt(results, "tcp_listener", lambda: connect_tcp(int(targets["tcp_port"])))
    for i, path in enumerate(targets["unix_sockets"]):
        attempt(results, f"unix_{i}", lambda p=path: connect_unix(p))
    attempt(results, "write_outside", lambda: write_each(targets["write"]))
    attempt(results, "channel_other_host", lambda: channel_to(f"127.0.0.1:{targets['tcp_port']}"))
    good = asyncio.run(honest(spec))
    print("HONEST " + json.dumps(good), flush=True)
    (Path(spec.agent_dir) / "escape.json").write_text(json.dumps({"attempts": results, "honest": good}, indent=1))
    escaped = [k for k, v in results.items() if not v["blocked"]]
    api.AgentOutcome(status="completed" if not escaped else "error", error_kind=None if not escaped else "escape",
                     error=f"escaped: {escaped}" if escaped else None, episodes=1,
                     metadata={"attempts": results}).write(spec.agent_dir)
    return 0
