"""Agent resolution: oracle, seed, a harness directory, a frozen harness file."""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path

import pytest

from monitor.agents import resolve_agent
from trials.agents import tree_hash


def _pkg(root: Path, name: str = "myharness") -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "__init__.py").write_text("")
    (d / "main.py").write_text("def main(argv=None):\n    return 0\n")
    (d / "__main__.py").write_text("import sys\nfrom .main import main\nsys.exit(main(sys.argv[1:]))\n")
    return d


def test_oracle_and_seed():
    oracle = resolve_agent("oracle")
    assert oracle.kind == "oracle" and "{spec}" in oracle.argv and "{task}" in oracle.argv
    seed = resolve_agent("seed")
    assert seed.kind == "process" and seed.name == "seed" and seed.harness_version.startswith("seed-")
    assert Path(seed.harness_dir).name == "harness_seed"
    assert seed.argv[:3] == [sys.executable, "-m", "monitor.host"]  # monitor.host exists in this project
    cmd = seed.command(Path("/x/spec.json"), Path("/t"))
    assert cmd[-2:] == ["--spec", "/x/spec.json"]


def test_directory_version_follows_content(tmp_path):
    d = _pkg(tmp_path)
    a = resolve_agent(str(d))
    assert a.name == "myharness" and a.harness_version == f"myharness-{tree_hash(d)[:12]}"
    (d / "__pycache__").mkdir()
    (d / "__pycache__" / "x.pyc").write_bytes(b"junk")
    assert resolve_agent(str(d)).harness_version == a.harness_version  # caches do not count
    (d / "main.py").write_text("def main(argv=None):\n    return 1\n")
    assert resolve_agent(str(d)).harness_version != a.harness_version


def test_frozen_file_is_extracted_once(tmp_path, monkeypatch):
    monkeypatch.setenv("RISE_CACHE_DIR", str(tmp_path / "cache"))
    d = _pkg(tmp_path / "src", "harness")
    out = tmp_path / "exp-v1.rhz"
    files = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in d.iterdir()}
    manifest = {"name": "exp-v1", "version": "v1", "commit": "abcdef1234567890", "files": files}
    with tarfile.open(out, "w:gz") as tar:
        data = json.dumps(manifest).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        tar.add(d, arcname="harness")
    a = resolve_agent(str(out))
    assert a.name == "exp-v1" and a.harness_version == "exp-v1@abcdef123456"
    assert Path(a.harness_dir).name == "harness" and (Path(a.harness_dir) / "main.py").is_file()
    assert resolve_agent(str(out)).harness_dir == a.harness_dir


def test_unknown_agent(tmp_path):
    with pytest.raises(ValueError, match="unknown agent"):
        resolve_agent(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no main.py"):
        resolve_agent(str(tmp_path / "empty"))
