"""Unit tests: Dockerfile reading for the local sandbox, FROM rewriting, the base-image map, the mirror lookup."""

from __future__ import annotations

from pathlib import Path

import pytest

from trials.environments.dockerfile import parse, plan_local, rewrite_from, substitute
from trials.environments.images import BASE_IMAGE, BaseImageMap, debian_mirror
from trials.errors import UnsupportedTaskError


def _plan(tmp_path: Path, text: str, files: dict[str, str] | None = None, base_env=None):
    (tmp_path / "Dockerfile").write_text(text)
    for name, content in (files or {}).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(content)
    return plan_local(tmp_path / "Dockerfile", tmp_path, base_env=base_env)


def test_parse_joins_continuations_and_skips_comments():
    insts = parse("# c\nFROM a\n\nRUN echo 1 && \\\n  # inner comment\n  echo 2\nENV A=1\n")
    assert [(i.lineno, i.keyword) for i in insts] == [(2, "FROM"), (4, "RUN"), (7, "ENV")]
    assert insts[1].args == "echo 1 && echo 2"


def test_substitute():
    assert substitute("$A/${B}/${C:-d}/${A:-x}", {"A": "1", "B": "2"}) == "1/2/d/1"


def test_plan_steps_env_and_workdir(tmp_path):
    plan = _plan(tmp_path, "FROM python:3.11-slim-bookworm\nARG V=7\nENV X=1 Y=\"a b\"\nENV PATH=/opt/bin:$PATH\n"
                 "WORKDIR /app\nCOPY data.txt ./\nRUN echo $V\nWORKDIR sub\nEXPOSE 80\nCMD [\"bash\"]\n",
                 {"data.txt": "x"}, base_env={"PATH": "/usr/bin"})
    assert plan.base == "python:3.11-slim-bookworm"
    assert plan.env["X"] == "1" and plan.env["Y"] == "a b" and plan.env["PATH"] == "/opt/bin:/usr/bin"
    assert "V" not in plan.env  # ARG is for the build only
    kinds = [(s.kind, s.lineno) for s in plan.steps]
    assert kinds == [("workdir", 5), ("copy", 6), ("run", 7), ("workdir", 8)]
    copy, run = plan.steps[1], plan.steps[2]
    assert copy.dest == "/app/" and copy.sources == ["data.txt"]
    assert run.env["V"] == "7" and run.workdir == "/app"
    assert plan.workdir == "/app/sub"
    assert plan.ignored == ["EXPOSE 80", 'CMD ["bash"]']


@pytest.mark.parametrize("line, needle", [
    ("FROM b AS x\nFROM c", "multi-stage"),
    ("COPY --from=x /a /b", "COPY --from"),
    ("ADD https://x/y.tar /y", "URL"),
    ("USER nobody", "USER nobody"),
    ("SHELL [\"/bin/zsh\"]", "SHELL"),
    ("RUN --mount=type=cache,target=/x true", "RUN options"),
    ("COPY missing.txt /app/", "does not exist"),
    ("RUN <<EOF\necho\nEOF", "heredocs"),
])
def test_plan_refuses_with_the_line(tmp_path, line, needle):
    with pytest.raises(UnsupportedTaskError) as exc:
        _plan(tmp_path, f"FROM a\n{line}\n")
    err = exc.value
    assert err.path.endswith("Dockerfile:2") and needle in err.message and "--env docker" in err.message


def test_rewrite_from_keeps_stage_names_and_flags():
    text = "FROM --platform=linux/amd64 python:3.11 AS build\nRUN x\nFROM build\nFROM debian:bookworm\n"
    out, changes = rewrite_from(text, lambda image: "base:1")
    assert out.splitlines()[0] == "FROM --platform=linux/amd64 base:1 AS build"
    assert out.splitlines()[2] == "FROM build"
    assert changes == [("python:3.11", "base:1"), ("debian:bookworm", "base:1")]


def test_base_image_map_rules_then_present_then_default(tmp_path):
    m = BaseImageMap.from_config('{"python:*": "mypy:1", "ubuntu:22.04": "u:1"}')
    assert m.resolve("python:3.11-slim") == "mypy:1"
    assert m.resolve("ubuntu:22.04") == "u:1"
    assert m.resolve("alpine:3", present=lambda n: n == "alpine:3") == "alpine:3"
    assert m.resolve("ghcr.io/laude-institute/t-bench/python-3-13:latest", present=lambda n: False) == BASE_IMAGE
    toml = tmp_path / "map.toml"
    toml.write_text('default = "other:base"\n[map]\n"debian:*" = "deb:local"\n')
    m2 = BaseImageMap.from_config(str(toml))
    assert m2.resolve("debian:bookworm") == "deb:local" and m2.resolve("x", present=lambda n: False) == "other:base"


def test_base_image_map_from_env(monkeypatch):
    monkeypatch.setenv("RISE_BASE_IMAGE_MAP", '{"a:*": "b:1"}')
    assert BaseImageMap.from_env().resolve("a:2") == "b:1"
    monkeypatch.delenv("RISE_BASE_IMAGE_MAP")
    assert BaseImageMap.from_env().resolve("a:2", present=lambda n: False) == BASE_IMAGE


def test_debian_mirror_from_deb822_and_list(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://sec.example/debian-security\nSuites: bookworm-security\nComponents: main\n\n"
        "Types: deb\n# comment\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\n")
    (tmp_path / "sources.list.d" / "other.list.disabled").write_text("deb http://no.example/ bookworm main\n")
    assert debian_mirror(etc_apt=tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list").write_text("deb [arch=amd64] http://list.example/debian bookworm main contrib\n")
    assert debian_mirror(etc_apt=tmp_path) == "http://list.example/debian"


def test_debian_mirror_missing(tmp_path):
    from trials.errors import InfraError

    with pytest.raises(InfraError):
        debian_mirror(etc_apt=tmp_path)
