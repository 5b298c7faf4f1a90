"""`check_task_set` reports every problem of a task set, and `rise tasks check/list` print them."""

from __future__ import annotations

import shutil
from pathlib import Path

from typer.testing import CliRunner

from rise.cli import app
from trials.tasks import check_task_set

from .test_tasks_load import make_task

STARTER = Path(__file__).resolve().parent.parent / "data" / "starter"


def bad_set(root: Path) -> Path:
    make_task(root, "good")
    make_task(root, "typo", 'version = "1.0"\n[environment]\ncpuz = 2\nmemory_mb = "lots"\n[verifer]\n')
    make_task(root, "broken-toml", 'version = "1.0"\n\n[agent\n')
    make_task(root, "no-tests", test_sh=False, instruction="")
    make_task(root, "no-docker", dockerfile=False)
    make_task(root, "dup-a", 'version = "1.0"\n[task]\nname = "shared"\n')
    make_task(root, "dup-b", 'version = "1.0"\n[task]\nname = "shared"\n')
    (root / "stray").mkdir()
    return root


def test_every_problem_is_reported_with_file_and_key(tmp_path):
    root = bad_set(tmp_path)
    found = {(Path(p.file).relative_to(root).as_posix(), p.key) for p in check_task_set(root)}
    assert found == {
        ("typo/task.toml", "environment.cpuz"),
        ("typo/task.toml", "environment.memory_mb"),
        ("typo/task.toml", "verifer"),
        ("broken-toml/task.toml", None),
        ("no-tests/instruction.md", None),
        ("no-tests/tests/test.sh", None),
        ("no-docker/environment/Dockerfile", None),
        ("dup-b/task.toml", "task.name"),
        ("stray/task.toml", None),
    }
    messages = {Path(p.file).relative_to(root).as_posix(): p.message for p in check_task_set(root)}
    assert "line 3" in messages["broken-toml/task.toml"]
    assert "duplicate task name 'shared'" in messages["dup-b/task.toml"]


def test_clean_set_has_no_problems(tmp_path):
    make_task(tmp_path, "a")
    make_task(tmp_path, "b")
    assert check_task_set(tmp_path) == []


def test_missing_or_empty_set(tmp_path):
    assert "does not exist" in check_task_set(tmp_path / "nowhere")[0].message
    assert "no task folders" in check_task_set(tmp_path)[0].message


def test_cli_check_lists_problems_and_exits_1(tmp_path):
    result = CliRunner().invoke(app, ["tasks", "check", str(bad_set(tmp_path))], env={"COLUMNS": "200"})
    assert result.exit_code == 1, result.output
    for text in ("typo/task.toml", "environment.cpuz", "unknown key", "verifer",
                 "no-tests/tests/test.sh", "9 problem(s)"):
        assert text in result.output


def test_cli_check_ok_on_the_starter_suite():
    result = CliRunner().invoke(app, ["tasks", "check", str(STARTER)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "no problems" in result.output and "tasks in" in result.output


def test_cli_check_names_tasks_that_leave_allow_internet_unset(tmp_path):
    """Offline is the default here, unlike Harbor: the check says so for each task that does not choose."""
    root = tmp_path / "set"
    shutil.copytree(STARTER / "hello-file", root / "chooses")
    shutil.copytree(STARTER / "hello-file", root / "silent")
    toml = root / "silent" / "task.toml"
    toml.write_text(toml.read_text().replace("allow_internet = false\n", "").replace('"hello-file"', '"silent"'))
    result = CliRunner().invoke(app, ["tasks", "check", str(root)], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "no problems" in result.output, result.output
    assert "note" in result.output and "silent/task.toml" in result.output and "chooses" not in result.output
    assert "Harbor's own default is true" in result.output and "runs offline" in result.output


def test_cli_list_marks_invalid_tasks(tmp_path):
    result = CliRunner().invoke(app, ["tasks", "list", str(bad_set(tmp_path))], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "good" in result.output and "invalid" in result.output and "rise tasks check" in result.output


def test_a_non_utf8_instruction_is_a_problem_of_that_task_by_path(tmp_path):
    root = tmp_path / "set"
    make_task(root, "good")
    bad = make_task(root, "latin1")
    (bad / "instruction.md").write_bytes("Écrivez « bonjour » dans /app/out.txt\n".encode("latin-1"))
    problems = check_task_set(root)
    assert [(Path(p.file).relative_to(root).as_posix(), "not UTF-8" in p.message) for p in problems] == [
        ("latin1/instruction.md", True)]
    res = CliRunner().invoke(app, ["tasks", "check", str(root)], env={"COLUMNS": "200"})
    assert res.exit_code != 0 and "latin1/instruction.md" in res.output and "not UTF-8" in res.output
    res = CliRunner().invoke(app, ["eval", "--tasks", str(root), "--agent", "oracle", "--job-dir",
                                   str(tmp_path / "job")], env={"COLUMNS": "60"})
    assert res.exit_code != 0 and isinstance(res.exception, SystemExit)  # an error message, not a crash
    assert str(bad / "instruction.md") in res.output and "Traceback" not in res.output
