"""The replay backend on a scripted server: record, replay with the server gone, a diverging run is a clear
replay_miss naming the request; a missing recording is an error. (The real model's recording:
tests/test_agents_replay_recorded.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from evolve.roles.runtime import RoleError, get_role, make_backend, run_role
from trials.endpoints.scripted import ScriptedServer
from trials.endpoints.spec import EndpointSpec


def test_record_then_replay_on_a_scripted_server_and_a_run_that_stops_early(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("hello\n")
    good = {"answer": "hello", "evidence": [{"path": "a.txt", "detail": "line 1"}]}
    script = [{"content": "", "tool_calls": [{"name": n, "arguments": a}]}
              for n, a in (("list_dir", {}), ("read_file", {"path": "a.txt"}), ("final_answer", good))]
    recording = tmp_path / "rec.yaml"
    with ScriptedServer(script) as srv:
        backend = make_backend("replay", EndpointSpec(base_url=srv.base_url, model="scripted"),
                               recording=recording, record=True)
        recorded = run_role(get_role("explorer"), {"question": "q"}, ws, backend, transcripts=tmp_path / "t")
    # the server is gone: only the recording can answer
    replayed = run_role(get_role("explorer"), {"question": "q"}, ws, make_backend("replay", recording=recording),
                        transcripts=tmp_path / "t")
    assert replayed.output == recorded.output and replayed.usage.requests == 3
    (ws / "a.txt").write_text("HELLO\n")  # same size (list_dir agrees), but read_file now returns other text
    with pytest.raises(RoleError) as info:
        run_role(get_role("explorer"), {"question": "q"}, ws, make_backend("replay", recording=recording),
                 transcripts=tmp_path / "t")
    assert info.value.kind == "replay_miss" and "request #3 of this call" in str(info.value)
    with pytest.raises(FileNotFoundError, match="no such recording"):
        make_backend("replay", recording=tmp_path / "missing.yaml")
