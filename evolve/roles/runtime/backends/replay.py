"""The ``replay`` backend: the ``openai`` backend over HTTP recorded with vcrpy.

Recording (``record=True``) sends every request to the real endpoint and writes request/response pairs to a
YAML cassette. Replaying needs no endpoint: each request must match a recorded one by method, path and JSON
body (the rendered prompt, the tools, the earlier turns), in order; anything else fails with a ``replay_miss``
RoleError that says the request is not in the recording — never an invented answer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import vcr

from evolve.roles.runtime.backends.base import BackendJob, BackendReply
from evolve.roles.runtime.backends.openai import OpenAIBackend, backend_error
from evolve.roles.runtime.backends.schema_tools import SCHEMA_NAME, resolve_tool_calls
from evolve.roles.runtime.role import RoleError
from trials.endpoints.spec import EndpointSpec

REPLAY_BASE_URL = "http://replay.invalid/v1"  # nothing listens here: a miss cannot reach a real server


def _json_body(r1: Any, r2: Any) -> None:
    """vcrpy matcher: equal JSON bodies (key order and whitespace do not matter)."""
    def load(body: Any) -> Any:
        if body is None:
            return None
        try:
            return json.loads(body)
        except (TypeError, ValueError):
            return body

    left, right = load(r1.body), load(r2.body)
    if left != right:
        raise AssertionError(f"request bodies differ: {_first_difference(left, right)}")


def _first_difference(a: Any, b: Any, where: str = "body") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{where}.{key}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return _first_difference(x, y, f"{where}[{i}]")
    return f"{where}: {str(a)[:200]!r} != {str(b)[:200]!r}"


class ReplayBackend:
    """Replays ``recording``; with ``record=True`` (and an endpoint) makes it instead."""

    name = "replay"

    def __init__(self, recording: Path, *, endpoint: EndpointSpec | None = None, record: bool = False,
                 model: str | None = None, settings: dict[str, Any] | None = None):
        if record and endpoint is None:
            raise ValueError("recording needs the real endpoint (base URL and model)")
        if not record and not recording.is_file():
            raise FileNotFoundError(f"{recording}: no such recording (make one with record=True)")
        self.recording, self.record = recording, record
        spec = endpoint or EndpointSpec(base_url=REPLAY_BASE_URL, model=model or _recorded_model(recording))
        if record:  # resolve "auto" now: its probe must not land in the recording
            spec = spec.model_copy(update={"tool_calls": resolve_tool_calls(spec.tool_calls, spec.base_url)})
        else:  # a replay sends what the recording holds, whatever the endpoint says (and never probes it)
            spec = spec.model_copy(update={"tool_calls": _recorded_tool_calls(recording)})
        self.price = spec.price
        self._inner = OpenAIBackend(spec, settings=settings, max_retries=0)  # a miss must not be retried
        self._vcr = vcr.VCR(record_mode="all" if record else "none", match_on=("method", "path", "json_body"),
                            decode_compressed_response=True, filter_headers=["authorization", "api-key"])
        self._vcr.register_matcher("json_body", _json_body)

    async def run(self, job: BackendJob) -> BackendReply:
        if self.record:
            self.recording.parent.mkdir(parents=True, exist_ok=True)
            self.recording.unlink(missing_ok=True)  # one recording is one call, made afresh
        with self._vcr.use_cassette(str(self.recording), allow_playback_repeats=False) as cassette:
            try:
                reply = await self._inner.run(job)
            except RoleError:
                raise
            except Exception as exc:  # vcrpy's miss comes straight through the HTTP client
                err = backend_error(job.role.name, exc, job.ctx.usage)
                if err.kind == "replay_miss":
                    err = RoleError(job.role.name, "replay_miss",
                                    f"request #{cassette.play_count + 1} of this call is not in the recording "
                                    f"{self.recording} (did the prompt, the tools or the inputs change since it "
                                    f"was recorded?); {str(exc).splitlines()[0]}", usage=job.ctx.usage)
                raise err from exc
            if not self.record and not cassette.all_played:
                raise RoleError(job.role.name, "replay_miss",
                                f"the call ended after {cassette.play_count} of {len(cassette)} recorded requests "
                                f"in {self.recording}; the run diverged from the recording")
        return reply


def _first_request(recording: Path) -> dict[str, Any]:
    import yaml

    try:
        doc = yaml.safe_load(recording.read_text())
        body = json.loads(doc["interactions"][0]["request"]["body"])
        if not isinstance(body, dict):
            raise TypeError("the first request body is not a JSON object")
        return body
    except (OSError, KeyError, IndexError, TypeError, ValueError, yaml.YAMLError) as exc:
        raise ValueError(f"{recording}: not a recording of chat requests ({exc})") from None


def _recorded_model(recording: Path) -> str:
    """The model name of the first recorded request (replay sends the same body, so the same name)."""
    try:
        return _first_request(recording)["model"]
    except KeyError:
        raise ValueError(f"{recording}: the first recorded request names no model") from None


def _recorded_tool_calls(recording: Path) -> Literal["native", "schema"]:
    """``schema`` when the recording was made through the schema tool client (its requests carry the call schema
    instead of tools), so that a replay rewrites its requests the same way."""
    if not recording.is_file():
        return "native"
    fmt = _first_request(recording).get("response_format") or {}
    return "schema" if fmt.get("json_schema", {}).get("name") == SCHEMA_NAME else "native"
