"""One JSONL transcript per role call: every prompt, model message, tool call and result, usage and timings.

Each line is ``{"seq", "t", "kind", ...}`` with ``t`` in seconds since the call started. Lines are flushed as
they are written, so a killed call keeps everything up to the kill.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

MESSAGE_CHARS = 20000  # a model message longer than this is cut in the transcript, with a note


def new_call_id(role: str) -> str:
    """``<role>-<UTC time>-<random>``: sortable by time, unique across concurrent calls."""
    return f"{role}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"


class Transcript:
    """Append-only JSONL writer for one call."""

    def __init__(self, path: Path, call_id: str):
        self.path, self.call_id = path, call_id
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = path.open("a", encoding="utf-8")
        self._start = time.monotonic()
        self._seq = 0
        self._lock = threading.Lock()  # tools run in worker threads; lines must not interleave

    @classmethod
    def create(cls, folder: Path, role: str) -> Transcript:
        call_id = new_call_id(role)
        return cls(folder / f"{call_id}.jsonl", call_id)

    def write(self, kind: str, **data: Any) -> None:
        with self._lock:
            if self._fh.closed:
                return
            self._seq += 1
            line = {"seq": self._seq, "t": round(time.monotonic() - self._start, 4), "kind": kind, **data}
            self._fh.write(json.dumps(line, default=_default, ensure_ascii=False) + "\n")
            self._fh.flush()

    def close(self) -> None:
        with self._lock:
            if not self._fh.closed:
                self._fh.close()


def _default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return repr(value)


def clip(text: str, limit: int = MESSAGE_CHARS) -> str:
    """``text`` cut to ``limit`` characters with a note saying how much was left out."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[truncated: {limit} of {len(text)} characters kept]"


def read_transcript(path: str | Path) -> list[dict[str, Any]]:
    """The lines of a transcript. The last line may have been cut by a kill mid-write and is then left out; any
    other line that is not JSON is an error naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such transcript")
    lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if n < len(lines):
                raise ValueError(f"{path}:{n}: not a JSON line: {exc}") from None
    return out


def call_ends(paths: Iterable[Path]) -> Iterator[dict[str, Any]]:
    """The ``end`` row of every call in these transcripts, for spending: a line a kill cut off (anywhere) is
    skipped, so what a call wrote before it still counts."""
    for path in paths:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if row.get("kind") == "end":
                yield row
