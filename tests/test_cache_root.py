"""One cache root: ``RISE_CACHE_DIR``, else the deprecated ``RISE_CACHE``, else XDG, else ``~/.cache``."""

from __future__ import annotations

from pathlib import Path

import pytest

from research.store import research_root
from trials import agents
from trials.cache import cache_root
from trials.endpoints import bundled
from trials.environments import images
from trials.tasks import tb_import

_VARS = ("RISE_CACHE_DIR", "RISE_CACHE", "XDG_CACHE_HOME", "RISE_RESEARCH_DIR")


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for name in _VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return monkeypatch


@pytest.mark.parametrize(("env", "expected"), [
    ({}, "home/.cache/riseharness"),
    ({"XDG_CACHE_HOME": "xdg"}, "xdg/riseharness"),
    ({"XDG_CACHE_HOME": ""}, "home/.cache/riseharness"),  # empty counts as unset
    ({"RISE_CACHE": "old", "XDG_CACHE_HOME": "xdg"}, "old"),  # deprecated alias still beats XDG
    ({"RISE_CACHE_DIR": "new", "RISE_CACHE": "old", "XDG_CACHE_HOME": "xdg"}, "new"),
    ({"RISE_CACHE_DIR": "", "RISE_CACHE": "old"}, "old"),
])
def test_precedence(clean_env, tmp_path, env, expected):
    for name, value in env.items():
        clean_env.setenv(name, value if not value else str(tmp_path / value))
    want = tmp_path / expected
    assert cache_root() == want
    # research/ imports no other room and spells the rule out itself: it must agree
    assert research_root() == want / "research"


def test_every_reader_uses_the_one_root(clean_env, tmp_path):
    clean_env.setenv("RISE_CACHE", str(tmp_path / "old"))
    clean_env.setenv("RISE_CACHE_DIR", str(tmp_path / "c"))
    root = tmp_path / "c"
    assert agents.cache_root() == root and bundled.cache_root() == root and tb_import.cache_root() == root
    assert images.cache_dir() == root / "base"
    assert Path(bundled.model_path(bundled.DEFAULT_MODEL)).is_relative_to(root)
