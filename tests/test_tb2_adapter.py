"""Terminal-Bench 2 shapes (data/tb2-shapes, written by this project): every task.toml field is read, the offline
adapter's verdict per task, the import and its record. The real-parts tests are in test_tb2_adapter_real.py."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from rise.cli import app
from trials.errors import TaskError
from trials.tasks import check_task_set, inspect_task
from trials.tasks.adapt_import import MANIFEST, RECORD, import_tasks, tree_sha256
from trials.tasks.adapter import VENV, plan

SHAPES = Path(__file__).resolve().parent.parent / "data" / "tb2-shapes"


def verdict(name: str, present=lambda _image: False, online: bool = False):
    task, problems = inspect_task(SHAPES / name)
    assert task is not None, problems
    return plan(task, present, online=online)


def fake_download(requirements: list[str], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for req in requirements:
        (dest / f"{req.replace('==', '-')}-py3-none-any.whl").write_text(req)


def test_the_real_task_toml_fields_are_all_accepted():
    assert check_task_set(SHAPES) == []


def test_a_field_nobody_knows_is_still_refused_by_name(tmp_path):
    shutil.copytree(SHAPES / "word-count", tmp_path / "word-count")
    toml = tmp_path / "word-count" / "task.toml"
    toml.write_text(toml.read_text().replace("gpus = 0", "gpus = 0\ngpu_kind = \"h100\""))
    assert [p.key for p in check_task_set(tmp_path)] == ["environment.gpu_kind"]


def test_the_2_0_size_spellings_are_read_and_a_wrong_one_is_named(tmp_path):
    from trials.tasks.model import EnvironmentConfig

    env = EnvironmentConfig.model_validate({"memory": "4G", "storage": "10G", "cpus": 2})
    assert (env.memory_mb, env.storage_mb) == (4096, 10240)
    assert EnvironmentConfig.model_validate({"memory": "512M"}).memory_mb == 512
    shutil.copytree(SHAPES / "word-count", tmp_path / "word-count")
    toml = tmp_path / "word-count" / "task.toml"
    toml.write_text(toml.read_text().replace("memory_mb = 2048", 'memory = "lots"'))
    [problem] = check_task_set(tmp_path)
    assert problem.key == "environment" and "'lots' is not a size" in problem.message
    toml.write_text(toml.read_text().replace('memory = "lots"', 'memory = "2G"\nmemory_mb = 2048'))
    assert "both set" in check_task_set(tmp_path)[0].message


def test_python_image_and_uvx_verifier_go_through_the_adapter():
    v = verdict("sum-column")
    assert v.status == "adapted" and not v.reasons
    assert {c.rule for c in v.changes} == {"base-image", "verifier-tools"}
    assert v.dockerfile.startswith("FROM rise-base:bookworm\n")
    commands = [ln for ln in v.test_sh.splitlines() if not ln.lstrip().startswith("#")]
    assert not [ln for ln in commands if "astral.sh" in ln or "uvx" in ln or "apt-get" in ln]
    assert f"{VENV}/bin/pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA" in v.test_sh
    assert v.verifier_requirements == ["pytest-json-ctrf==0.3.5", "pytest==8.4.1"]
    assert f"python3 -m venv --system-site-packages {VENV}" in v.dockerfile  # the image's packages stay importable
    assert v.apt_packages == ["curl"]
    notes = " | ".join(v.notes)
    assert "prebuilt image riseharness-examples/sum-column:20260101 is not here" in notes
    assert "Python 3.13" in notes and "3.11" in notes  # the version change is said, not hidden
    assert any("storage_mb" in line for line in v.ignored)


def test_pip_in_the_verifier_and_in_the_dockerfile_become_wheels():
    count = verdict("word-count")
    assert count.status == "adapted" and count.verifier_requirements == ["pytest==8.4.1"]
    assert f'export PATH="{VENV}/bin:$PATH"' in count.test_sh  # the bare `pytest` after it still resolves
    table = verdict("render-table")
    assert table.build_requirements == ["tabulate==0.9.0"]
    assert "COPY rise-wheels /opt/rise-wheels" in table.dockerfile
    assert "ENV PIP_NO_INDEX=1 PIP_FIND_LINKS=/opt/rise-wheels" in table.dockerfile


def test_uv_in_the_dockerfile_comes_from_the_index_and_uses_the_images_python():
    v = verdict("json-keys")
    assert v.status == "adapted" and not v.reasons
    assert v.build_requirements == ["pyyaml==6.0.2", "uv==0.9.5"]
    assert "apt-get install -y curl &&      pip install uv==0.9.5" in v.dockerfile  # only the installer changed
    assert "uv venv /app/.venv --python 3.11" in v.dockerfile
    assert "UV_OFFLINE=1 UV_FIND_LINKS=/opt/rise-wheels UV_PYTHON_DOWNLOADS=never" in v.dockerfile
    assert v.verifier_requirements == ["pytest==8.4.1", "pyyaml==6.0.2"]  # `uv add`; its comment line is not read
    assert "/opt/rise-verifier/bin/pytest /tests/test_outputs.py -rA" in v.test_sh
    assert "# A verifier in a uv project of its own" in v.test_sh


def test_what_cannot_run_here_says_why():
    ubuntu = verdict("ubuntu-tool")
    assert ubuntu.status == "cannot"
    # ubuntu:24.04 has a local base now (rise-base:noble, tests/test_base_releases.py): only the URL stops it
    assert ubuntu.base_image == "rise-base:noble"
    assert ubuntu.reasons == ["environment/Dockerfile:3: fetches https://example.invalid/tool at build time"]
    gpu = verdict("gpu-train")
    assert gpu.status == "cannot" and any("gpus = 1" in r for r in gpu.reasons)
    ignored = " | ".join(gpu.ignored)
    assert "mcp_servers" in ignored and "artifacts" in ignored


def test_online_or_with_the_images_present_nothing_is_changed():
    assert verdict("sum-column", online=True).status == "as-is"
    assert verdict("gpu-train", online=True).status == "cannot"  # no GPU, online or not
    local = verdict("ubuntu-tool", present=lambda image: image == "ubuntu:24.04")
    assert [r for r in local.reasons if "ubuntu" in r] == []  # only the URL is left


def test_import_copies_as_is_adapts_with_a_record_and_leaves_the_source_alone(tmp_path):
    before = {p.name: tree_sha256(p) for p in SHAPES.iterdir() if p.is_dir()}
    manifest = import_tasks(SHAPES, tmp_path / "out", lambda _image: False, download=fake_download)
    assert {p.name: tree_sha256(p) for p in SHAPES.iterdir() if p.is_dir()} == before
    status = {t.name: t.status for t in manifest.tasks}
    assert status == {"sum-column": "adapted", "word-count": "adapted", "render-table": "adapted",
                      "json-keys": "adapted", "ubuntu-tool": "cannot", "gpu-train": "cannot"}
    assert not (tmp_path / "out" / "ubuntu-tool").exists()
    record = json.loads((tmp_path / "out" / "sum-column" / RECORD).read_text())
    assert record["source_sha256"] == before["sum-column"]
    body = {k: record[k] for k in ("changes", "files", "wheels", "requirements", "apt")}
    assert record["adapter_sha256"] == hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    test_sh = (tmp_path / "out" / "sum-column" / "tests" / "test.sh").read_bytes()
    assert record["files"]["tests/test.sh"]["after_sha256"] == hashlib.sha256(test_sh).hexdigest()
    assert set(record["wheels"]) == {"pytest-8.4.1-py3-none-any.whl", "pytest-json-ctrf-0.3.5-py3-none-any.whl"}
    listed = json.loads((tmp_path / "out" / MANIFEST).read_text())
    assert len(listed["tasks"]) == 6 and check_task_set(tmp_path / "out") == []


def test_import_online_is_byte_for_byte(tmp_path):
    import_tasks(SHAPES, tmp_path / "out", lambda _image: False, online=True, download=fake_download)
    assert tree_sha256(tmp_path / "out" / "sum-column") == tree_sha256(SHAPES / "sum-column")
    assert not (tmp_path / "out" / "sum-column" / RECORD).exists()


def test_import_takes_only_the_tasks_asked_for_and_says_where_it_is(tmp_path):
    seen: list[tuple[int, int, str]] = []
    manifest = import_tasks(SHAPES, tmp_path / "out", lambda _image: False, download=fake_download,
                            only=["word-count", "sum-column"], progress=lambda *a: seen.append(a))
    assert [t.name for t in manifest.tasks] == ["sum-column", "word-count"]  # the set's order, not the asked one
    assert seen == [(1, 2, "sum-column"), (2, 2, "word-count")]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [MANIFEST, "sum-column", "word-count"]
    assert json.loads((tmp_path / "out" / MANIFEST).read_text())["only"] == ["word-count", "sum-column"]
    try:
        import_tasks(SHAPES, tmp_path / "none", lambda _image: False, download=fake_download,
                     only=["word-count", "no-such-task"])
    except TaskError as exc:
        assert "no task folder no-such-task" in str(exc) and "json-keys, render-table" in str(exc)
    else:
        raise AssertionError("an unknown task name was accepted")
    assert not (tmp_path / "none").exists()  # refused before anything was written


def test_rise_tasks_import_task_option(tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["tasks", "import", str(SHAPES), str(out), "--online", "--task", "json-keys"],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "[1/1] json-keys" in result.output and "1 tasks: 1 as is" in result.output
    assert sorted(p.name for p in out.iterdir()) == ["json-keys", MANIFEST]
    result = CliRunner().invoke(app, ["tasks", "import", str(SHAPES), str(tmp_path / "x"), "-t", "nope"],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 1 and "no task folder nope" in result.output


def test_rise_tasks_check_prints_the_verdict_per_task():
    result = CliRunner().invoke(app, ["tasks", "check", str(SHAPES)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    for expected in ("runs through the adapter", "cannot run here", "4 adapted, 2 cannot", "mcp_servers"):
        assert expected in out


def test_a_machine_that_can_pull_keeps_the_tasks_base_image(monkeypatch):
    from trials.environments.images import BASE_IMAGE, BaseImageMap

    monkeypatch.delenv("RISE_BASE_IMAGE_MAP", raising=False)
    monkeypatch.delenv("RISE_BASE_IMAGE_PULL", raising=False)
    assert BaseImageMap.from_env().resolve("python:3.13-slim-bookworm", present=lambda _i: False) == BASE_IMAGE
    monkeypatch.setenv("RISE_BASE_IMAGE_PULL", "1")
    assert BaseImageMap.from_env().resolve("python:3.13-slim-bookworm",
                                           present=lambda _i: False) == "python:3.13-slim-bookworm"


def test_a_script_the_build_runs_that_clones_a_repository_is_named(tmp_path):
    shutil.copytree(SHAPES / "word-count", tmp_path / "word-count")
    env = tmp_path / "word-count" / "environment"
    (env / "setup.sh").write_text("#!/bin/bash\n# fetch https://example.invalid/in-a-comment\n"
                                  "git clone https://example.invalid/site.git\n")
    (env / "Dockerfile").write_text((env / "Dockerfile").read_text() + "COPY setup.sh /app/\nRUN bash /app/setup.sh\n")
    task, _ = inspect_task(tmp_path / "word-count")
    v = plan(task, lambda _image: False)
    assert v.status == "cannot"
    reason = "environment/setup.sh:3: fetches https://example.invalid/site.git (a script in the build context)"
    assert v.reasons == [reason]


def _with_dockerfile(tmp_path: Path, text: str):
    shutil.copytree(SHAPES / "word-count", tmp_path / "word-count")
    (tmp_path / "word-count" / "environment" / "Dockerfile").write_text(text)
    task, problems = inspect_task(tmp_path / "word-count")
    assert task is not None, problems
    return plan(task, lambda _image: False)


def test_the_verifier_layer_switches_to_root_only_after_a_user_that_is_not_root(tmp_path):
    """Each instruction is a layer the engine commits (seconds each on fuse-overlayfs): the adapter adds USER root
    only where the last stage ended as another user, and puts apt and the venv in one RUN."""
    plain = verdict("word-count")
    added = plain.dockerfile.split("# rise adapter")[1]
    assert "USER" not in added and added.count("RUN ") == 1 and added.count("COPY ") == 1
    app_user = _with_dockerfile(tmp_path / "a", "FROM debian:bookworm-slim\nRUN useradd app\nUSER app\n"
                                "WORKDIR /app\nCOPY poem.txt /app/poem.txt\n")
    assert app_user.dockerfile.split("# rise adapter")[1].split("\n")[1] == "USER root"
    assert app_user.dockerfile.rstrip().endswith("USER app")  # the image ends as the original did
    # a USER in an earlier stage does not carry into the last one
    staged = _with_dockerfile(tmp_path / "b", "FROM debian:bookworm-slim AS build\nUSER nobody\n"
                              "FROM debian:bookworm-slim\nWORKDIR /app\nCOPY poem.txt /app/poem.txt\n")
    assert "USER" not in staged.dockerfile.split("# rise adapter")[1]
