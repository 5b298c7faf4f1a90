"""Importing the older Terminal-Bench layout (task.yaml, run-tests.sh, solution.sh/yaml, docker-compose.yaml)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from trials.errors import TaskError
from trials.tasks import check_task_set, load_task, load_task_set

FIXTURES = Path(__file__).resolve().parent / "data" / "tasks_tb"


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RISE_CACHE_DIR", str(tmp_path / "cache"))


def test_terminal_bench_task_maps_onto_the_harbor_model():
    task = load_task(FIXTURES / "tb-greeting")
    assert task.layout == "terminal-bench" and task.legacy_exit_code
    assert task.name == "tb-greeting"
    assert task.instruction.startswith("Create the file /app/greeting.txt")
    cfg = task.config
    assert cfg.agent.timeout_sec == 240 and cfg.verifier.timeout_sec == 45
    assert cfg.task.keywords == ["files", "fixture"] and cfg.task.authors == ["Test Author test@example.com"]
    assert cfg.metadata["category"] == "file-operations" and cfg.metadata["source_layout"] == "terminal-bench"
    # compose: T_BENCH_* paths become ours, literal values pass through
    assert cfg.environment.env == {"TEST_DIR": "/tests", "GREETING_MODE": "plain"}
    assert task.environment_dir == FIXTURES / "tb-greeting" and task.dockerfile.name == "Dockerfile"
    assert task.workdir == "/app"


def test_staged_tests_and_solution_are_harbor_shaped():
    task = load_task(FIXTURES / "tb-greeting")
    assert sorted(p.name for p in task.tests_dir.iterdir()) == ["run-tests.sh", "test.sh", "test_outputs.py"]
    wrapper = task.test_script.read_text()
    assert "bash /tests/run-tests.sh" in wrapper and "/logs/verifier/reward.txt" in wrapper
    assert (task.solution_dir / "solve.sh").read_text() == (FIXTURES / "tb-greeting" / "solution.sh").read_text()
    # the original folder is untouched
    assert not (FIXTURES / "tb-greeting" / "tests" / "test.sh").exists()


def test_staging_is_content_addressed(tmp_path):
    first = load_task(FIXTURES / "tb-greeting").staged_dir
    assert load_task(FIXTURES / "tb-greeting").staged_dir == first
    copy = tmp_path / "tb-greeting"
    shutil.copytree(FIXTURES / "tb-greeting", copy)
    (copy / "run-tests.sh").write_text("#!/bin/bash\nexit 1\n")
    assert load_task(copy).staged_dir != first


def test_descriptions_and_solution_yaml():
    task = load_task(FIXTURES / "tb-legacy-desc")
    assert task.instruction == "Write the word done to /app/status.txt."
    assert task.config.agent.timeout_sec == 180 and task.config.verifier.timeout_sec == 30  # TB defaults
    assert task.workdir == "/srv/work"  # the Dockerfile's last WORKDIR
    assert "echo done > /app/status.txt" in (task.solution_dir / "solve.sh").read_text()


def test_wrapper_scores_by_exit_status(tmp_path):
    """Run the staged test.sh with /tests and /logs redirected, as far as a plain host allows."""
    task = load_task(FIXTURES / "tb-legacy-desc")
    script = task.test_script.read_text()
    script = script.replace("/logs/verifier", str(tmp_path / "verifier")).replace("/tests/", f"{task.tests_dir}/")
    status = tmp_path / "status.txt"
    run_tests = (task.tests_dir / "run-tests.sh").read_text().replace("/app/status.txt", str(status))
    (tmp_path / "run-tests.sh").write_text(run_tests)
    script = script.replace(f"{task.tests_dir}/run-tests.sh", str(tmp_path / "run-tests.sh"))
    (tmp_path / "test.sh").write_text(script)
    assert subprocess.run(["bash", str(tmp_path / "test.sh")], check=False).returncode != 0
    assert (tmp_path / "verifier" / "reward.txt").read_text().strip() == "0"
    status.write_text("done\n")
    assert subprocess.run(["bash", str(tmp_path / "test.sh")], check=False).returncode == 0
    assert (tmp_path / "verifier" / "reward.txt").read_text().strip() == "1"


def test_set_of_terminal_bench_tasks_loads_and_checks_clean():
    assert [t.name for t in load_task_set(FIXTURES)] == ["tb-greeting", "tb-legacy-desc"]
    assert check_task_set(FIXTURES) == []


def _copy(tmp_path: Path, name: str = "tb-greeting") -> Path:
    dst = tmp_path / "set" / name
    shutil.copytree(FIXTURES / name, dst)
    return dst


def test_broken_terminal_bench_tasks_are_reported(tmp_path):
    a = _copy(tmp_path)
    (a / "run-tests.sh").unlink()
    (a / "task.yaml").write_text("max_agent_timeout_sec: soon\n")
    b = _copy(tmp_path, "tb-legacy-desc")
    (b / "task.yaml").write_text("instruction: [unclosed\n")
    problems = {(Path(p.file).name, p.key, p.message.split(":")[0]) for p in check_task_set(tmp_path / "set")}
    assert ("task.yaml", "instruction", "missing or empty (nor descriptions[key=base])") in problems
    assert ("task.yaml", "max_agent_timeout_sec", "Input should be a valid number, unable to parse string as a number (got 'soon')") in problems
    assert ("run-tests.sh", None, "missing") in problems
    assert any(f == "task.yaml" and m == "malformed YAML" for f, _, m in problems)
    with pytest.raises(TaskError):
        load_task(a)


def test_multi_container_compose_is_refused(tmp_path):
    a = _copy(tmp_path)
    compose = (a / "docker-compose.yaml").read_text() + "  redis:\n    image: redis:7\n"
    (a / "docker-compose.yaml").write_text(compose)
    with pytest.raises(TaskError) as info:
        load_task(a)
    assert info.value.key == "services" and "redis" in info.value.message
