"""trials/confine.py: the scrubbed environment, the bwrap command line, a spare's folder handed to a trial, and
what a confined launcher may teach the next spares (real bwrap where it runs something)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trials import confine
from trials.environments.local import bwrap_available


def test_the_environment_is_an_allow_list(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host")
    monkeypatch.setenv("RISE_SOMETHING_SECRET", "x")
    monkeypatch.setenv("LANG", "en_US.UTF-8")
    env = confine.scrubbed_env({"RISE_MODE": "fast"})
    assert "OPENAI_API_KEY" not in env and "RISE_SOMETHING_SECRET" not in env
    assert env["LANG"] == "en_US.UTF-8" and env["RISE_MODE"] == "fast" and env["HOME"] == "/tmp"
    assert env["RISE_CHANNEL"] == confine.CHANNEL_SOCKET
    assert env["PYTHONPATH"] == str(confine.platform_root())


def test_the_command_line_binds_code_read_only_and_one_folder_writable(tmp_path):
    harness = tmp_path / "h"
    harness.mkdir()
    conf = confine.for_harness([harness])
    argv = conf.argv(tmp_path / "agent", ["python", "-c", "pass"])
    assert argv[-4:] == ["--", "python", "-c", "pass"]
    ro = {argv[i + 1] for i, a in enumerate(argv) if a == "--ro-bind"}
    assert str(harness) in ro and str(confine.platform_root() / "trials") in ro
    assert str(confine.platform_root()) not in ro  # not the whole repository: no runs/, data/, README
    writable = [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == "--bind"]
    assert writable == [(str(tmp_path / "agent"), confine.AGENT_DIR)]
    for flag in ("--unshare-net", "--unshare-pid", "--clearenv", "--remount-ro"):
        assert flag in argv
    assert "--new-session" not in argv  # the runner's signals to the group must reach it


def test_inside_maps_the_agent_folder(tmp_path):
    assert confine.inside(tmp_path / "a" / "trial_spec.json", tmp_path / "a") == "/rise/agent/trial_spec.json"
    with pytest.raises(ValueError):
        confine.inside(tmp_path / "b" / "x", tmp_path / "a")


def test_a_spare_folder_takes_the_agent_folders_place(tmp_path):
    root = tmp_path / "spares"
    folder = confine.new_spare_folder(root)
    (folder / "from-spare.txt").write_text("s")
    agent = tmp_path / "trial" / "agent"
    agent.mkdir(parents=True)
    (agent / "trial_spec.json").write_text("{}")
    confine.adopt(folder, agent)
    assert sorted(p.name for p in agent.iterdir()) == ["from-spare.txt", "trial_spec.json"]
    assert not folder.exists() and not root.exists()  # the last spare gone: its root too


def test_only_library_and_platform_modules_are_learned(tmp_path):
    agent = tmp_path / "agent"
    agent.mkdir()
    names = ["json", "httpx._client", "trials.harness_api", "monitor.host", "hostile_harness.main",
             "no_such_module_anywhere", "../etc", "os.path"]
    (agent / confine.LEARNED_OUT).write_text(json.dumps(names))
    learned = tmp_path / "cache" / "learned.json"
    confine.absorb_learned(agent, learned)
    kept = json.loads(learned.read_text())
    assert kept == ["json", "httpx._client", "trials.harness_api", "monitor.host", "os.path"]
    assert not (agent / confine.LEARNED_OUT).exists()


@pytest.mark.sandbox
@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap (bwrap) is not installed")
def test_a_confined_process_sees_no_network_and_only_its_folder(tmp_path):
    conf = confine.for_harness([])
    script = ("import os, socket, pathlib\n"
              "pathlib.Path('/rise/agent/ok').write_text('1')\n"
              "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=2); print('net')\n"
              "except OSError: print('no-net')\n"
              "try:\n    pathlib.Path('/rise/x').write_text('1'); print('wrote')\n"
              "except OSError: print('read-only')\n")
    confine.hand_over(tmp_path, conf.ids)  # its one writable folder is the confined uid's
    out = subprocess.run(conf.argv(tmp_path, [sys.executable, "-c", script]), env={}, capture_output=True,
                         text=True, timeout=60, check=True).stdout.split()
    assert out == ["no-net", "read-only"] and (tmp_path / "ok").read_text() == "1"
