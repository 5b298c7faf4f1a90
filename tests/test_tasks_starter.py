"""Static properties of the starter suite in data/starter (offline, stdlib-only, Harbor layout)."""

from __future__ import annotations

import ast
import re
import shlex
import sys
from pathlib import Path

import pytest

from trials.tasks import check_task_set, load_task_set

STARTER = Path(__file__).resolve().parent.parent / "data" / "starter"
TASKS = load_task_set(STARTER)
REQUIRED_CATEGORIES = {"files", "text", "data-conversion", "shell-bug", "python-bug", "cli", "multi-step", "long"}
LOCAL_MODULES = {"stats"}  # fix-python-bug's check imports the module under test from /app
FORBIDDEN_IN_RUN = re.compile(r"\b(apt|apt-get|pip|pip3|curl|wget|git|npm|uv)\b")


def test_suite_is_valid_and_large_enough():
    assert check_task_set(STARTER) == []
    assert len(TASKS) >= 12


def test_suite_covers_the_categories_and_has_easy_tasks():
    categories = {t.config.metadata["category"] for t in TASKS}
    assert REQUIRED_CATEGORIES <= categories
    difficulties = [t.config.metadata["difficulty"] for t in TASKS]
    assert difficulties.count("easy") >= 3 and "hard" in difficulties


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_task_is_offline_and_uses_only_the_allowed_dockerfile_subset(task):
    assert task.config.environment.allow_internet is False
    assert task.config.task.name == task.path.name == task.name
    assert task.solution_dir is not None
    lines = [ln for ln in task.dockerfile.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines[0] == "FROM python:3.11-slim-bookworm"
    assert lines[1] == "WORKDIR /app"
    for line in lines[2:]:
        op, _, arg = line.partition(" ")
        assert op in {"COPY", "ENV", "RUN"}, line
        if op == "COPY":
            src, dst = shlex.split(arg)
            assert (task.environment_dir / src).exists(), line
            assert dst.startswith("/app"), line
        if op == "RUN":
            assert not FORBIDDEN_IN_RUN.search(arg), line


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_verifier_uses_only_bash_and_the_python_stdlib(task):
    test_sh = task.test_script.read_text()
    assert test_sh.startswith("#!/bin/bash") and "mkdir -p /logs/verifier" in test_sh
    assert "/logs/verifier/reward.txt" in test_sh and "pytest" not in test_sh
    for script in task.tests_dir.rglob("*.py"):
        for node in ast.walk(ast.parse(script.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top in LOCAL_MODULES, f"{script} imports {name}"


def test_instructions_name_exact_paths_under_app():
    for task in TASKS:
        assert "/app/" in task.instruction, task.name
        assert len(task.instruction) < 2500, f"{task.name}: keep instructions short"


def test_readme_lists_every_task():
    readme = (STARTER / "README.md").read_text()
    for task in TASKS:
        assert f"`{task.name}`" in readme, task.name
    assert "Measured with the bundled model" in readme
