"""bundled.py helpers that need no build: progress from CMake output, failures naming their log, locks."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from trials.endpoints import bundled


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RISE_CACHE_DIR", str(tmp_path / "cache"))


def test_build_progress_is_reported(tmp_path):
    script = "for p in (3, 12, 15, 27, 64, 100): print(f'[{p:3d}%] Building CXX object x.o')"
    seen: list[str] = []
    log = tmp_path / "build.log"
    bundled._run([sys.executable, "-c", script], log, what="building llama-server", progress=seen.append)
    assert [s.split(":")[1].split("%")[0].strip() for s in seen] == ["3", "12", "27", "64", "100"]
    assert "[ 15%]" in log.read_text()


def test_failure_names_the_log(tmp_path):
    log = tmp_path / "fail.log"
    with pytest.raises(bundled.BundledSetupError, match="fail.log"):
        bundled._run([sys.executable, "-c", "raise SystemExit(2)"], log, what="cmake configure",
                     progress=lambda m: None)


def test_lock_serialises_builders():
    order: list[str] = []

    def hold() -> None:
        with bundled._locked("x"):
            order.append("a-in")
            time.sleep(0.3)
            order.append("a-out")

    t = threading.Thread(target=hold)
    t.start()
    time.sleep(0.1)
    with bundled._locked("x"):
        order.append("b-in")
    t.join()
    assert order == ["a-in", "a-out", "b-in"]


def test_server_command_and_unknown_model():
    cmd = bundled.server_command("qwen2.5-coder-0.5b", 9001, threads=2, parallel=2)
    assert "--port" in cmd and "9001" in cmd and cmd[cmd.index("--alias") + 1] == "qwen2.5-coder-0.5b"
    with pytest.raises(bundled.BundledSetupError, match="unknown bundled model"):
        bundled.model_path("nope")


def test_warm_head_saves_slots_under_the_cache(tmp_path):
    from trials.endpoints.serve import ServerProcess

    plain = ServerProcess.bundled("qwen2.5-coder-0.5b", 9002)
    assert "--slot-save-path" not in plain.command and plain.after_ready is None
    warm = ServerProcess.bundled("qwen2.5-coder-0.5b", 9003, warm_head="You are an agent.")
    path = warm.command[warm.command.index("--slot-save-path") + 1]
    assert path == str(bundled.slot_dir(9003)) and path.startswith(str(tmp_path / "cache"))
    assert bundled.slot_dir(9003).is_dir() and warm.after_ready is not None


def test_first_prompt_head_is_what_every_first_prompt_starts_with():
    from harness_seed import templates
    from trials.tasks.load import load_task

    head = templates.first_prompt_head()
    task = load_task("data/starter/write-json")
    first = templates.render("prompt_json", instruction=task.instruction, terminal_state="$ ",
                             refine_context=None, max_duration=60.0)
    assert first.startswith(head) and len(head) > 2000
    assert task.instruction.strip()[:40] in first[len(head):len(head) + 200]


def test_build_progress_reads_make_and_ninja_lines():
    from trials.endpoints.bundled import _percent

    assert _percent(b"[ 41%] Building CXX object src/CMakeFiles/llama.dir/llama.cpp.o\n") == 41
    assert _percent(b"[57/139] Building CXX object tools/mtmd/CMakeFiles/mtmd.dir/clip.cpp.o\n") == 41
    assert _percent(b"[139/139] Linking CXX executable bin/llama-server\n") == 100
    assert _percent(b"-- Configuring done\n") is None and _percent(b"[0/0] nothing\n") is None
