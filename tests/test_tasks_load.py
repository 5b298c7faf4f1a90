"""Loading Harbor task folders: the task.toml model, errors naming file and key, ${VAR} expansion, task sets."""

from __future__ import annotations

from pathlib import Path

import pytest

from trials.errors import TaskError
from trials.tasks import Task, load_task, load_task_set

MINIMAL_TOML = 'version = "1.0"\n'


def make_task(root: Path, name: str, toml: str = MINIMAL_TOML, *, instruction: str = "Do the thing.\n",
              test_sh: bool = True, dockerfile: bool = True, solve: bool = True) -> Path:
    """Write a small Harbor task folder and return it."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "task.toml").write_text(toml)
    if instruction is not None:
        (folder / "instruction.md").write_text(instruction)
    if test_sh:
        (folder / "tests").mkdir()
        (folder / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    if dockerfile:
        (folder / "environment").mkdir()
        (folder / "environment" / "Dockerfile").write_text("FROM python:3.11-slim-bookworm\nWORKDIR /app\n")
    if solve:
        (folder / "solution").mkdir()
        (folder / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    return folder


def test_minimal_task_gets_the_documented_defaults(tmp_path):
    task = load_task(make_task(tmp_path, "alpha"))
    assert isinstance(task, Task)
    assert task.name == "alpha" and task.instruction == "Do the thing.\n" and task.layout == "harbor"
    cfg = task.config
    assert cfg.version == "1.0"
    assert (cfg.verifier.timeout_sec, cfg.verifier.env, cfg.verifier.user) == (600, {}, None)
    assert (cfg.agent.timeout_sec, cfg.agent.user) == (900, None)
    env = cfg.environment
    assert (env.build_timeout_sec, env.docker_image, env.cpus, env.memory_mb, env.storage_mb) == (600, None, 1, 2048, None)
    assert (env.allow_internet, env.env, env.workdir) == (False, {}, "/app")  # Harbor's is true (issue 44)
    assert cfg.solution.env == {} and cfg.metadata == {}
    assert task.environment_dir == task.path / "environment"
    assert task.dockerfile == task.path / "environment" / "Dockerfile"
    assert task.tests_dir == task.path / "tests" and task.test_script.name == "test.sh"
    assert task.solution_dir == task.path / "solution"
    assert not task.legacy_exit_code


def test_full_task_toml_round_trips(tmp_path):
    toml = """schema_version = "1.1"
[task]
name = "acme/beta"
description = "a task"
authors = ["Ann", { name = "Bo", email = "bo@example.com" }]
keywords = ["k1", "k2"]
[metadata]
category = "files"
difficulty = "easy"
[verifier]
timeout_sec = 30
env = { MODE = "strict" }
user = "root"
[agent]
timeout_sec = 120.5
user = "agent"
[environment]
build_timeout_sec = 100
docker_image = "python:3.11-slim-bookworm"
cpus = 2.5
memory_mb = 512
storage_mb = 1024
allow_internet = false
env = { A = "1" }
workdir = "/work"
[solution.env]
S = "x"
"""
    task = load_task(make_task(tmp_path, "folder-name", toml, dockerfile=False))
    assert task.name == "beta"  # the last part of Harbor's org/name
    cfg = task.config
    assert cfg.version == "1.1" and cfg.task.keywords == ["k1", "k2"] and cfg.task.authors[1].email == "bo@example.com"
    assert cfg.metadata == {"category": "files", "difficulty": "easy"}
    assert cfg.verifier.env == {"MODE": "strict"} and cfg.agent.timeout_sec == 120.5
    assert cfg.environment.cpus == 2.5 and not cfg.environment.allow_internet and task.workdir == "/work"
    assert cfg.solution.env == {"S": "x"}
    assert task.dockerfile is None  # docker_image given instead


@pytest.mark.parametrize(
    ("toml", "key", "fragment"),
    [
        ('version = "1.0"\n[environment]\ncpuz = 2\n', "environment.cpuz", "unknown key"),
        ('version = "1.0"\nbogus = 1\n', "bogus", "unknown key"),
        ('version = "1.0"\n[verifier]\ntimeout_sec = "soon"\n', "verifier.timeout_sec", "valid number"),
        ('version = "1.0"\n[environment]\nallow_internet = "nope"\n', "environment.allow_internet", "boolean"),
        ('version = "1.0"\n[agent]\ntimeout_sec = -1\n', "agent.timeout_sec", "greater than 0"),
        ('version = "1.0"\n[task]\nname = "bad name!"\n', "task.name", "must match"),
    ],
)
def test_bad_task_toml_names_the_file_and_key(tmp_path, toml, key, fragment):
    folder = make_task(tmp_path, "t", toml)
    with pytest.raises(TaskError) as info:
        load_task(folder)
    assert info.value.path == str(folder / "task.toml")
    assert info.value.key == key
    assert fragment in info.value.message


def test_malformed_toml_names_the_line(tmp_path):
    folder = make_task(tmp_path, "t", 'version = "1.0"\n[verifier]\ntimeout_sec = = 3\n')
    with pytest.raises(TaskError) as info:
        load_task(folder)
    assert info.value.path.endswith("task.toml") and "line 3" in info.value.message


def test_env_tables_expand_host_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("RISE_T_TOKEN", "s3cret")
    monkeypatch.delenv("RISE_T_UNSET", raising=False)
    toml = ('version = "1.0"\n[verifier.env]\nTOKEN = "${RISE_T_TOKEN}"\nMIXED = "a-${RISE_T_TOKEN}-b"\n'
            'DEF = "${RISE_T_UNSET:-fallback}"\nEMPTY = "${RISE_T_UNSET:-}"\nPLAIN = "$HOME"\n'
            '[environment.env]\nX = "${RISE_T_TOKEN:-zzz}"\n[solution.env]\nY = "${RISE_T_TOKEN}"\n')
    cfg = load_task(make_task(tmp_path, "t", toml)).config
    assert cfg.verifier.env == {"TOKEN": "s3cret", "MIXED": "a-s3cret-b", "DEF": "fallback", "EMPTY": "",
                                "PLAIN": "$HOME"}
    assert cfg.environment.env == {"X": "s3cret"} and cfg.solution.env == {"Y": "s3cret"}


def test_unset_variable_without_default_names_the_key(tmp_path, monkeypatch):
    monkeypatch.delenv("RISE_T_UNSET", raising=False)
    folder = make_task(tmp_path, "t", 'version = "1.0"\n[environment.env]\nAPI = "${RISE_T_UNSET}"\n')
    with pytest.raises(TaskError) as info:
        load_task(folder)
    assert info.value.key == "environment.env.API" and "RISE_T_UNSET" in info.value.message


@pytest.mark.parametrize(
    ("kwargs", "file", "fragment"),
    [
        ({"instruction": None}, "instruction.md", "missing"),
        ({"instruction": "  \n"}, "instruction.md", "empty"),
        ({"test_sh": False}, "tests/test.sh", "missing"),
        ({"dockerfile": False}, "environment/Dockerfile", "docker_image"),
    ],
)
def test_missing_parts_are_rejected(tmp_path, kwargs, file, fragment):
    folder = make_task(tmp_path, "t", **kwargs)
    with pytest.raises(TaskError) as info:
        load_task(folder)
    assert info.value.path == str(folder / file) and fragment in info.value.message


def test_folder_that_is_not_a_task(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(TaskError, match="no task.toml"):
        load_task(tmp_path / "empty")


def test_task_without_solution_has_no_solution_dir(tmp_path):
    assert load_task(make_task(tmp_path, "t", solve=False)).solution_dir is None


def test_task_set_is_sorted_and_selectable(tmp_path):
    for name in ("zeta", "alpha", "mid"):
        make_task(tmp_path, name)
    (tmp_path / ".hidden").mkdir()
    assert [t.name for t in load_task_set(tmp_path)] == ["alpha", "mid", "zeta"]
    assert [t.name for t in load_task_set(tmp_path, ["zeta", "alpha"])] == ["alpha", "zeta"]
    with pytest.raises(TaskError) as info:
        load_task_set(tmp_path, ["alpha", "nope"])
    assert "nope" in info.value.message and "alpha" not in info.value.message.split("(")[0]


def test_selection_only_validates_the_selected_tasks(tmp_path):
    make_task(tmp_path, "good")
    make_task(tmp_path, "broken", "not toml at all [")
    assert [t.name for t in load_task_set(tmp_path, ["good"])] == ["good"]
    with pytest.raises(TaskError):
        load_task_set(tmp_path)


def test_task_set_selects_by_declared_name(tmp_path):
    make_task(tmp_path, "folder-a", 'version = "1.0"\n[task]\nname = "org/declared"\n')
    assert [t.name for t in load_task_set(tmp_path, ["declared"])] == ["declared"]


def test_duplicate_names_in_a_set(tmp_path):
    make_task(tmp_path, "one", 'version = "1.0"\n[task]\nname = "same"\n')
    make_task(tmp_path, "two", 'version = "1.0"\n[task]\nname = "org/same"\n')
    with pytest.raises(TaskError, match="duplicate task name 'same'"):
        load_task_set(tmp_path)


def test_a_single_task_folder_is_a_set_of_one(tmp_path):
    folder = make_task(tmp_path, "solo")
    assert [t.name for t in load_task_set(folder)] == ["solo"]
