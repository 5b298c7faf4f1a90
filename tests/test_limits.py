"""trials/limits.py and the harness's uid (trials/confine.py): real cgroups on this machine where it allows them,
a fake cgroup v2 tree for the discovery rules, and the plain messages where the machine allows nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trials import confine, limits

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs a root runner")


def _real_cgroup(memory_mb: int, pids: int) -> limits.Cgroup:
    cg = limits.make_cgroup("test", memory_mb, pids)
    if isinstance(cg, str):
        pytest.skip(f"this machine allows no cgroup: {cg}")
    return cg


FORK_AND_FILL = """
import os, time
forked = 0
for _ in range(200):
    try:
        if os.fork() == 0:
            os.close(1); os.close(2)  # the test reads stdout to its end
            time.sleep(30); os._exit(0)
        forked += 1
    except OSError:
        break
print(forked, flush=True)
block = bytearray(400 * 1024 * 1024)
for i in range(0, len(block), 4096):
    block[i] = 1
print("filled", flush=True)
"""


def test_a_real_cgroup_holds_pids_and_memory_and_says_so():
    cg = _real_cgroup(128, 40)
    try:
        out = subprocess.run([*limits.join_argv(cg), sys.executable, "-c", FORK_AND_FILL], check=False,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == -9 and "filled" not in out.stdout  # killed at 128 MiB
        assert int(out.stdout.split()[0]) < 40  # forks refused at 40
        used = cg.usage()
        assert used.oom_kills >= 1 and used.pids_refused >= 1
        assert used.hits("harness") == ["harness_memory", "harness_pids"]
    finally:
        final = cg.finish()
    assert final.oom_kills >= 1 and cg.pids_inside() == [] and not any(d.exists() for d in cg.dirs)


def test_finish_kills_what_left_the_process_group():
    cg = _real_cgroup(128, 40)
    try:
        out = subprocess.run([*limits.join_argv(cg), "/bin/sh", "-c", "setsid sleep 300 >/dev/null 2>&1 & echo $!"],
                             check=True, capture_output=True, text=True, timeout=30)
        left = int(out.stdout)
        assert left in cg.pids_inside()
    finally:
        cg.finish()
    assert not Path(f"/proc/{left}").exists() or "State:\tZ" in Path(f"/proc/{left}/status").read_text()
    assert not any(d.exists() for d in cg.dirs)


def test_join_argv_is_empty_without_a_cgroup():
    assert limits.join_argv(None) == []


def _fake_v2(tmp_path: Path, monkeypatch, own: str = "/job.scope") -> Path:
    root = tmp_path / "cg"
    (root / own.lstrip("/")).mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    (root / "cgroup.subtree_control").write_text("memory pids\n")
    (root / own.lstrip("/") / "cgroup.subtree_control").write_text("\n")
    monkeypatch.setattr(limits, "_mounts", lambda: {"": str(root)})
    monkeypatch.setattr(limits, "_own_paths", lambda: {"": own})
    limits.bases.cache_clear()
    return root


def test_v2_cgroups_go_under_the_runners_own_when_it_can_delegate(tmp_path, monkeypatch):
    root = _fake_v2(tmp_path, monkeypatch)
    try:
        cg = limits.make_cgroup("harness", 256, 64)
        assert isinstance(cg, limits.Cgroup) and cg.version == 2
        assert cg.dirs[0].parent == root / "job.scope" / "rise"
        assert (cg.dirs[0] / "memory.max").read_text() == str(256 * limits.MB)
        assert (cg.dirs[0] / "pids.max").read_text() == "64"
        assert limits.join_argv(cg)[2].startswith(f"echo $$ > {cg.dirs[0]}/cgroup.procs && ")
    finally:
        limits.bases.cache_clear()


def test_v2_falls_back_to_the_root_when_its_own_cgroup_holds_processes(tmp_path, monkeypatch):
    root = _fake_v2(tmp_path, monkeypatch)
    own = root / "job.scope" / "cgroup.subtree_control"
    own.unlink()
    own.mkdir()  # writing it fails, as v2's no-internal-process rule makes it fail (EBUSY)
    try:
        version, dirs = limits.bases()
        assert version == 2 and dirs == (root / "rise",)
    finally:
        limits.bases.cache_clear()


def test_no_cgroup_is_said_plainly(monkeypatch):
    monkeypatch.setattr(limits, "_mounts", dict)
    limits.bases.cache_clear()
    try:
        cg, usage = limits.harness_cgroup()
        assert cg is None and usage.memory_mb is None
        assert usage.note == ("harness limits not enforced: no cgroup hierarchy with the memory and pids "
                              "controllers is mounted")
        record, notes = limits.LimitsRecord(harness=usage), []
        record.refresh(notes, "t")
        assert notes == [usage.note] and record.hit == []
    finally:
        limits.bases.cache_clear()


def test_a_bad_limit_setting_is_named(monkeypatch):
    monkeypatch.setenv("RISE_HARNESS_PIDS", "lots")
    with pytest.raises(ValueError, match="RISE_HARNESS_PIDS='lots'"):
        limits.harness_limits()


def test_the_harness_identity_rules(monkeypatch):
    confine.harness_identity.cache_clear()
    try:
        monkeypatch.setattr(os, "geteuid", lambda: 1000)
        assert confine.harness_identity() == "the runner is not root: harnesses run as its own uid 1000"
        monkeypatch.setattr(os, "geteuid", lambda: 0)
        for ref, want in (("1234", (1234, 1234)), ("1234:99", (1234, 99)), ("nobody", (65534, 65534))):
            confine.harness_identity.cache_clear()
            monkeypatch.setenv("RISE_HARNESS_USER", ref)
            assert confine.harness_identity() == want
        for ref, match in (("0", "must not run as root"), ("no-such-user-xyz", "no such user")):
            confine.harness_identity.cache_clear()
            monkeypatch.setenv("RISE_HARNESS_USER", ref)
            with pytest.raises(ValueError, match=match):
                confine.harness_identity()
    finally:
        confine.harness_identity.cache_clear()


@ROOT_ONLY
def test_root_only_files_of_etc_are_masked_and_the_harness_switches_uid(tmp_path):
    conf = confine.for_harness([])
    argv = conf.argv(tmp_path, ["true"])
    assert "/etc/shadow" in confine.root_only_entries()[0]
    assert argv[argv.index("/etc/shadow") - 2:argv.index("/etc/shadow")][0] == "--ro-bind"
    assert f"--reuid={conf.ids[0]}" in argv and conf.ids[0] != 0
