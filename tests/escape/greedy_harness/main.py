"""A hostile harness for issue 44's routes 5 and 6: ``main(["--spec", PATH])`` reads ``targets.json`` beside
this file (written by the test) and, by its ``mode``:

- ``root``: reads each root-only host file directly, and through its sandbox (the channel's ``/download`` and
  ``/exec cat``);
- ``limits``: forks ``forks`` processes, has its sandbox hold ``sandbox_mb`` MiB, then touches ``alloc_mb`` MiB
  itself (last: a memory limit kills it there).

Every result goes to ``escape.json`` in its agent folder as soon as it is known (the process may not live to
the end) and to stdout (the trial's ``stdout.log``)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trials.harness_api as api

TARGETS = Path(__file__).resolve().parent / "targets.json"


class Record:
    """escape.json, rewritten after every step."""

    def __init__(self, agent_dir: str):
        self.path = Path(agent_dir) / "escape.json"
        self.data: dict[str, Any] = {}

    def put(self, key: str, value: Any) -> None:
        self.data[key] = value
        print(f"STEP {key}: {json.dumps(value)[:300]}", flush=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        os.replace(tmp, self.path)


def _try(fn: Any) -> str:
    try:
        return f"OK {fn()}"[:300]
    except Exception as exc:  # noqa: BLE001 - a refusal is the expected outcome
        return f"REFUSED {type(exc).__name__}: {exc}"[:300]


async def root_files(rec: Record, env: Any, files: list[str], through_sandbox: list[str]) -> None:
    for i, path in enumerate(files):
        rec.put(f"read_{i}", _try(lambda p=path: Path(p).read_text()[:120]))
    for i, path in enumerate(through_sandbox):
        dst = Path(tempfile.mkdtemp()) / "got"
        try:
            await env.download(path, dst)
            got = f"OK {dst.read_text()[:120]}"
        except Exception as exc:  # noqa: BLE001
            got = f"REFUSED {type(exc).__name__}: {exc}"[:300]
        rec.put(f"download_{i}", got)
        res = await env.exec(f"cat {path}")
        rec.put(f"cat_{i}", f"rc={res.returncode} {res.stdout[:120]}")


def fork_many(n: int) -> dict[str, Any]:
    children: list[int] = []
    error = None
    for _ in range(n):
        try:
            pid = os.fork()
        except OSError as exc:
            error = f"{type(exc).__name__}: {exc}"
            break
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.kill(pid, signal.SIGKILL)
    for pid in children:
        os.waitpid(pid, 0)
    return {"forked": len(children), "error": error}


def allocate(rec: Record, mb: int) -> None:
    chunks = []
    for done in range(64, mb + 1, 64):
        block = bytearray(64 * 1024 * 1024)
        for i in range(0, len(block), 4096):  # touch every page: resident, not just reserved
            block[i] = 1
        chunks.append(block)
        if done % 256 == 0:
            rec.put("allocated_mb", done)
    rec.put("allocated_mb", mb)


async def run(spec: api.TrialSpec, targets: dict[str, Any], rec: Record) -> None:
    env = api.attach_environment(spec.env)
    rec.put("uid", os.getuid())
    if targets["mode"] == "root":
        await root_files(rec, env, targets["files"], targets["through_sandbox"])
        return
    rec.put("forks", fork_many(int(targets["forks"])))
    mb = int(targets["sandbox_mb"])
    res = await env.exec(f"head -c {mb}m /dev/zero | tail | wc -c; echo tail=${{PIPESTATUS[1]}}", timeout=120)
    rec.put("sandbox", {"rc": res.returncode, "out": res.stdout.strip(), "held_mb": int(
        (res.stdout.split() or ["0"])[0]) // (1024 * 1024)})
    allocate(rec, int(targets["alloc_mb"]))


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    spec = api.TrialSpec.load(args[args.index("--spec") + 1])
    rec = Record(spec.agent_dir)
    asyncio.run(run(spec, json.loads(TARGETS.read_text()), rec))
    api.AgentOutcome(status="completed", episodes=1).write(spec.agent_dir)
    return 0
