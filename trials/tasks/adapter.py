"""The offline adapter: what a Harbor (Terminal-Bench 2) task needs that this machine cannot fetch, and the local
equivalent it is mapped to, as a list of recorded changes, never a silent edit.

A machine without an image registry or the open internet can still reach the Debian and Ubuntu archives and the
Python package index. So, per task: a base image by name becomes ``rise-base:<release>`` (debootstrap) when it is a
release of ``trials/environments/releases.py`` (Debian bookworm, trixie, bullseye; Ubuntu noble, jammy) or a
``python:3.X`` image built on a Debian one (the Python version changes to the release's: recorded), and what
follows uses that release's Python and pip; verifier tools that
``tests/test.sh`` installs at verification time (the uv installer, ``uvx -w pytest==...``, ``pip install``,
``apt-get install``) are installed into the image at build time instead, from wheels downloaded on the host and from
apt. Anything else fetched from the network (a URL in the Dockerfile, ``git clone``, another base image) makes the
task "cannot run here", with the line. :func:`plan` only reads; ``adapt_import.py`` writes the adapted copy.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, Field

from trials.environments.releases import BOOKWORM, KNOWN, Release, match_from, release_of_image

from .fields import ignored_settings, refused_settings
from .model import Task

LOCAL_BASE = BOOKWORM.image  # the default release's, for a Dockerfile whose release is not known
LOCAL_PYTHON = BOOKWORM.python
VENV = "/opt/rise-verifier"
WHEELS_DIR = "rise-wheels"  # inside the build context (environment/)
WHEELS_IN_IMAGE = "/opt/rise-wheels"
_APT_PIP = "python3-pip python3-venv python3-dev"


def pip_from_apt(release: Release) -> tuple[str, ...]:
    """What a ``python:3.X`` image has beyond the release's python3: pip, venv and headers from apt, and pip let
    into the system Python where the release marks it externally managed (PEP 668)."""
    run = f"RUN apt-get update && apt-get install -y --no-install-recommends {_APT_PIP} && rm -rf /var/lib/apt/lists/*"
    return (run, "ENV PIP_BREAK_SYSTEM_PACKAGES=1") if release.pip_break_system_packages else (run,)


PIP_FROM_APT = pip_from_apt(BOOKWORM)
_UV_INSTALLER = re.compile(r"(?:curl|wget)\b[^|&;]*astral\.sh/uv/(?:([\d.]+)/)?install\.sh[^|]*\|\s*(?:ba)?sh")
_URL_FETCH = re.compile(r"\b(?:curl|wget)\b[^\n]*?(https?://\S+)|\bgit\s+clone\b[^\n]*?(https?://\S+|git@\S+)")
_UV_ENV = re.compile(r"^\s*(?:source|\.)\s+\"?\$(?:HOME|\{HOME\})/\.(?:local/bin|cargo)/env\"?\s*$")


class Change(BaseModel):
    """One recorded transformation of a task file."""

    file: str  # relative to the task folder
    rule: str
    before: str
    after: str
    why: str


class Verdict(BaseModel):
    """What ``rise tasks check`` says about one task on this machine."""

    task: str
    status: Literal["as-is", "adapted", "cannot"]
    changes: list[Change] = Field(default_factory=list)
    reasons: list[str] = Field(default_factory=list)  # why it cannot run here
    ignored: list[str] = Field(default_factory=list)  # task.toml settings without effect here
    notes: list[str] = Field(default_factory=list)  # e.g. a solution that needs the network
    base_image: str | None = None  # the local base the final stage is built on (rise-base:noble...)
    python: str | None = None  # the python3 the wheels are for: that base's release's (bookworm's if unknown)
    verifier_requirements: list[str] = Field(default_factory=list)  # wheels for the verifier's venv
    build_requirements: list[str] = Field(default_factory=list)  # wheels for pip installs in the Dockerfile
    apt_packages: list[str] = Field(default_factory=list)  # what test.sh installed with apt
    dockerfile: str | None = None  # the adapted texts (None: unchanged)
    test_sh: str | None = None


def _logical_spans(text: str) -> list[tuple[int, int, str]]:
    """Shell lines with ``\\`` continuations joined: (first line, last line, text), lines counted from 1."""
    out: list[tuple[int, int, str]] = []
    buf, start = "", 0
    for i, line in enumerate(text.splitlines(), 1):
        if not buf:
            start = i
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        out.append((start, i, buf + line))
        buf = ""
    if buf:
        out.append((start, len(text.splitlines()), buf))
    return out


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Shell lines with continuations joined, each with its first line number."""
    return [(start, line) for start, _, line in _logical_spans(text)]


def _words_after(command: str, marker: list[str]) -> list[str]:
    """The words after ``marker`` (e.g. ``["pip", "install"]``) up to the next ``&&``, ``;`` or ``|``."""
    try:
        words = shlex.split(command.split("#", 1)[0] if " #" in command else command)
    except ValueError:
        return []
    for i in range(len(words) - len(marker) + 1):
        if [w.rsplit("/", 1)[-1] for w in words[i:i + len(marker)]] == marker:
            rest = []
            for w in words[i + len(marker):]:
                if w in ("&&", ";", "||", "|") or w.endswith(";"):
                    break
                rest.append(w)
            return rest
    return []


def requirements(words: list[str]) -> list[str]:
    """Requirement specifiers among pip/uvx words (flags and their values dropped)."""
    out, skip = [], False
    for w in words:
        if skip:
            skip = False
            continue
        if w in ("-r", "--requirement", "-c", "-i", "--index-url", "--extra-index-url", "-f", "--find-links",
                 "-p", "--python", "--target", "-t"):
            skip = True
            continue
        if not w.startswith("-") and "://" not in w:
            out.append(w)
    return out


class _Plan:
    """Accumulates one task's changes while the rules read its files."""

    def __init__(self, task: Task):
        self.task = task
        self.changes: list[Change] = []
        self.reasons: list[str] = []
        self.notes: list[str] = []
        self.verifier_reqs: list[str] = []
        self.build_reqs: list[str] = []
        self.apt: list[str] = []
        self.python_image = False
        self.uses_uv = False
        self.release: Release = BOOKWORM  # the final stage's release (its Python is the verifier's)
        self.base_image: str | None = None

    def change(self, file: str, rule: str, before: str, after: str, why: str) -> None:
        self.changes.append(Change(file=file, rule=rule, before=before.strip(), after=after.strip(), why=why))


def _map_base(plan: _Plan, image: str, present: Callable[[str], bool]) -> tuple[str | None, Release, bool]:
    """The local image for ``FROM image`` (None, with a reason recorded, when there is none), its release, and
    whether it stands for a ``python:3.X`` image."""
    found = match_from(image)
    release = found[0] if found else BOOKWORM
    if present(image):
        return image, release, False
    if found is None:
        plan.reasons.append(f"base image {image}: no registry here and no local equivalent (debootstrap makes "
                            f"{KNOWN}); build or pull it and name it in RISE_BASE_IMAGE_MAP")
        return None, release, False
    if python := found[1]:
        plan.python_image = True
        if python != release.python:
            plan.notes.append(f"Python {python} of {image} becomes {release.label}'s python3 {release.python}")
    return release.image, release, python is not None


def _adapt_dockerfile(plan: _Plan, text: str, present: Callable[[str], bool]) -> str:
    lines = text.splitlines()
    for lineno, last, line in _logical_spans(text):
        m = re.match(r"^\s*FROM\s+(?:--\S+\s+)*(\S+)(.*)$", line, flags=re.IGNORECASE)
        if m:
            image = m.group(1)
            new, release, python_image = _map_base(plan, image, present)
            plan.base_image = new
            if new and new != image:
                after = f"FROM {new}{m.group(2)}"
                if python_image:  # what a python:3.X image has beyond the release's python3
                    after += "\n" + "\n".join(pip_from_apt(release))
                plan.change("environment/Dockerfile", "base-image", line, after,
                            f"{image} cannot be pulled here; {new} is its local equivalent (debootstrap)")
                lines[lineno - 1] = after
            continue
        if not re.match(r"^\s*RUN\b", line, flags=re.IGNORECASE):
            continue
        new_line = _uv_in_build(plan, lineno, line)
        if new_line != line:
            lines[lineno - 1:last] = [new_line] + [""] * (last - lineno)
        elif u := _URL_FETCH.search(line):
            plan.reasons.append(f"environment/Dockerfile:{lineno}: fetches {u.group(1) or u.group(2)} at build time")
        for marker in (["pip", "install"], ["pip3", "install"], ["uv", "pip", "install"]):
            plan.build_reqs += requirements(_words_after(new_line, marker))
    if plan.build_reqs:
        lines = _wheels_first(plan, lines)
    return "\n".join(lines) + "\n"


def _uv_in_build(plan: _Plan, lineno: int, line: str) -> str:
    """A RUN line's uv installer becomes ``pip install uv==V`` (uv is on the package index), and ``uv venv -p
    3.X`` asks for the Python the image has."""
    new = line
    if m := _UV_INSTALLER.search(line):
        plan.uses_uv = True
        new = new.replace(m.group(0), f"pip install uv{'==' + m.group(1) if m.group(1) else ''}")
    new = re.sub(r"(\buv\s+venv\b[^&;|]*?(?:-p|--python)[ =])(3\.\d+)\b", rf"\g<1>{plan.release.python}", new)
    if new != line:
        plan.change("environment/Dockerfile", "uv", line, new, "the uv installer is fetched from the internet; "
                    "the same uv release is a wheel on the package index; uv's Python is the image's")
    return new


def _wheels_first(plan: _Plan, lines: list[str]) -> list[str]:
    """Put the host-downloaded wheels (and pip, on a base without it) before the first build step."""
    head = [f"COPY {WHEELS_DIR} {WHEELS_IN_IMAGE}"]
    env = f"ENV PIP_NO_INDEX=1 PIP_FIND_LINKS={WHEELS_IN_IMAGE}"
    if plan.uses_uv:
        env += f" UV_OFFLINE=1 UV_FIND_LINKS={WHEELS_IN_IMAGE} UV_PYTHON_DOWNLOADS=never"
    head.append(env)
    if not plan.python_image:
        head = [*pip_from_apt(plan.release), *head]
    plan.change("environment/Dockerfile", "pip-wheels", "", "\n".join(head),
                "pip (and uv) installs in the build read wheels downloaded on the host (the index is not "
                "reachable from a build here)")
    first = next(i for i, ln in enumerate(lines) if re.match(r"^\s*(RUN|COPY|ADD)\b", ln, re.IGNORECASE))
    return lines[:first] + head + lines[first:]


def _adapt_test_sh(plan: _Plan, text: str) -> str:
    """Move the verifier's network installs into the image; returns the new test.sh."""
    out: list[str] = []
    file = "tests/test.sh"
    for lineno, line in _logical_lines(text):
        stripped = line.strip()
        new: str | None = None
        if stripped.startswith("#"):
            pass
        elif _UV_INSTALLER.search(line):
            new, why = "", "the uv installer cannot be fetched; the verifier's tools are in the image"
        elif _UV_ENV.match(line):
            new, why = "", "uv's env file does not exist: uv was not installed by its installer"
        elif re.match(r"^(?:sudo\s+)?apt(?:-get)?\s+update\b", stripped) and "install" not in stripped:
            new, why = "", "apt-get runs at image build time instead"
        elif pkgs := _words_after(line, ["apt-get", "install"]) or _words_after(line, ["apt", "install"]):
            plan.apt += [p for p in pkgs if not p.startswith("-")]
            new, why = "", "these packages are installed at image build time (the verifier has no network)"
        elif words := _words_after(line, ["uvx"]):
            new, why = _uvx(plan, words)
        elif reqs := requirements(_words_after(line, ["pip", "install"]) or _words_after(line, ["pip3", "install"])
                                  or _words_after(line, ["uv", "pip", "install"])):
            plan.verifier_reqs += reqs
            new, why = f'export PATH="{VENV}/bin:$PATH"', f"installed into {VENV} at image build time from wheels"
        elif reqs := requirements(_words_after(line, ["uv", "add"])):
            plan.verifier_reqs += reqs
            new, why = "", f"installed into {VENV} at image build time from wheels"
        elif re.match(r"^uv\s+(venv|init|sync)\b", stripped):
            new, why = "", f"the verifier's venv {VENV} is made at image build time"
        elif m := re.match(r"^(?:source|\.)\s+(\S+)/bin/activate\s*$", stripped):
            new, why = f"source {VENV}/bin/activate", f"the verifier's venv is {VENV}"
        elif m := re.match(r"^uv\s+run\s+(.*)$", stripped):
            new, why = f"{VENV}/bin/{m.group(1)}", f"the command runs from {VENV}"
        elif u := _URL_FETCH.search(line):
            plan.reasons.append(f"{file}:{lineno}: fetches {u.group(1) or u.group(2)} at verification time")
        if new is None:
            out.append(line)
            continue
        plan.change(file, "verifier-tools", line, new or "(removed)", why)
        out.append(f"# rise adapter: {why}" if not new else new)
    return "\n".join(out) + "\n"


def _uvx(plan: _Plan, words: list[str]) -> tuple[str, str]:
    """``uvx -p 3.13 -w pytest==8.4.1 pytest ARGS`` → ``/opt/rise-verifier/bin/pytest ARGS``."""
    with_reqs, i = [], 0
    python = None
    while i < len(words) and words[i].startswith("-"):
        flag = words[i]
        value = words[i + 1] if i + 1 < len(words) else ""
        if flag in ("-w", "--with"):
            with_reqs.append(value)
        elif flag in ("-p", "--python"):
            python = value
        i += 2 if flag in ("-w", "--with", "-p", "--python", "--from") else 1
    command = words[i:]
    if not command:
        return "", "uvx without a command"
    tool = command[0].split("==")[0]
    plan.verifier_reqs += with_reqs + ([command[0]] if command[0] not in " ".join(with_reqs) else [])
    if python and python != plan.release.python:
        plan.notes.append(f"the verifier's Python {python} becomes {plan.release.python} ({plan.release.label})")
    why = f"uvx fetches its tools at verification time; they are in {VENV}"
    return shlex.join([f"{VENV}/bin/{tool}", *command[1:]]), why


def plan(task: Task, present: Callable[[str], bool], online: bool = False) -> Verdict:
    """What it takes to run ``task`` here. ``present(image)`` says whether the local engine has an image;
    ``online``: the machine can fetch at run time (then only the task's fields can stop it)."""
    p = _Plan(task)
    p.reasons += refused_settings(task.config)
    dockerfile_text = task.dockerfile.read_text() if task.dockerfile else None
    image = task.config.environment.docker_image
    if not online and image and not present(image):
        if dockerfile_text is None:
            p.reasons.append(f"environment.docker_image {image} is not in the local engine and the task has no "
                             "environment/Dockerfile to build instead")
        else:
            p.notes.append(f"the prebuilt image {image} is not here: environment/Dockerfile is built instead")
    new_docker, new_test = None, None
    if not online and dockerfile_text is not None:
        froms = re.findall(r"^\s*FROM\s+(?:--\S+\s+)*(\S+)", dockerfile_text, flags=re.IGNORECASE | re.MULTILINE)
        found = match_from(froms[-1]) if froms else None  # the last stage's release, before test.sh is read
        p.release = found[0] if found else BOOKWORM
        test_text = task.test_script.read_text() if task.test_script.is_file() else ""
        adapted_test = _adapt_test_sh(p, test_text)
        adapted_docker = _adapt_dockerfile(p, dockerfile_text, present)
        if p.verifier_reqs or p.apt:
            adapted_docker += _verifier_layer(p, dockerfile_text)
        if p.verifier_reqs or p.build_reqs:
            adapted_docker += _epilogue(p, dockerfile_text)
        p.reasons += _scripts_that_fetch(task)
        new_docker = adapted_docker if adapted_docker != dockerfile_text else None
        new_test = adapted_test if adapted_test != test_text else None
        if (built := release_of_image(p.base_image or "")) and not present(built.image):
            p.notes.append(f"{built.image} is not built here yet: `rise images base --release {built.codename}` "
                           "builds it (the docker sandbox also builds it the first time a task needs it)")
    p.notes += _solution_needs(task)
    status = "cannot" if p.reasons else ("adapted" if p.changes else "as-is")
    return Verdict(task=task.name, status=status, changes=p.changes, reasons=list(dict.fromkeys(p.reasons)),
                   ignored=ignored_settings(task.config), notes=p.notes, base_image=p.base_image,
                   python=p.release.python if p.base_image else None,
                   verifier_requirements=sorted(set(p.verifier_reqs)), build_requirements=sorted(set(p.build_reqs)),
                   apt_packages=sorted(set(p.apt)), dockerfile=new_docker, test_sh=new_test)


def _verifier_layer(p: _Plan, original: str) -> str:
    """The Dockerfile lines that install what test.sh used to fetch, recorded as one change. The venv sees the
    image's own packages: a verifier that ran ``pip install pytest`` into the system Python imports them too.
    As few instructions as that takes (each is a layer the engine commits, seconds each on a slow storage driver):
    ``USER root`` only after a USER that is not root, apt and the venv in one RUN."""
    apt = " ".join(sorted(set(p.apt) | {"python3-venv"}))
    root = "USER root\n" if _final_user(original) else ""
    install = f"apt-get update && apt-get install -y --no-install-recommends {apt} && rm -rf /var/lib/apt/lists/*"
    body = (f"\n# rise adapter: the verifier's tools, installed at build time (tests/test.sh fetched them)\n"
            f"{root}COPY {WHEELS_DIR} {WHEELS_IN_IMAGE}\n"
            f"RUN {install} && python3 -m venv --system-site-packages {VENV} && "
            f"{VENV}/bin/pip install --no-index --find-links {WHEELS_IN_IMAGE} "
            f"{shlex.join(sorted(set(p.verifier_reqs)))}\n") if p.verifier_reqs else (
            f"\n# rise adapter: packages tests/test.sh installed with apt\n{root}RUN {install}\n")
    p.change("environment/Dockerfile", "verifier-tools", "", body,
             "the verifier cannot fetch at verification time here; its tools are in the image (the agent can see "
             "them, which Harbor's verifier-time install avoids)")
    return body


def _final_user(dockerfile: str) -> str | None:
    """The user other than root the image's last stage ends as: its last ``USER`` after the last ``FROM``
    (None: root, by name, by id or unset)."""
    user = None
    for _, line in _logical_lines(dockerfile):
        words = line.split()
        keyword = words[0].upper() if words else ""
        if keyword == "FROM":
            user = None
        elif keyword == "USER" and len(words) > 1:
            user = words[1]
    return None if user in ("root", "0") else user


def _epilogue(p: _Plan, original: str) -> str:
    """Keep what the original image ended with: the wheels out of a ``COPY .`` destination, and its last USER."""
    body = ""
    workdir = "/"
    for _, line in _logical_lines(original):
        words = line.split()
        if len(words) >= 2 and words[0].upper() == "WORKDIR":
            workdir = words[1] if words[1].startswith("/") else f"{workdir.rstrip('/')}/{words[1]}"
        if len(words) >= 3 and words[0].upper() in ("COPY", "ADD") and words[-2] in (".", "./"):
            dest = words[-1] if words[-1].startswith("/") else f"{workdir.rstrip('/')}/{words[-1]}"
            body += f"RUN rm -rf {shlex.quote(dest.rstrip('/') + '/' + WHEELS_DIR)}\n"
    user = _final_user(original)
    if user and p.verifier_reqs:
        body += f"USER {user}\n"
    if body:
        p.change("environment/Dockerfile", "epilogue", "", body, "the image ends as the original did: no wheels in "
                 "a folder the Dockerfile copied the context into, and its last USER")
    return body


def _scripts_that_fetch(task: Task) -> list[str]:
    """Shell scripts in the build context (a Dockerfile ``RUN bash setup.sh`` runs them) that fetch a URL."""
    reasons = []
    for script in sorted(task.environment_dir.rglob("*.sh")):
        rel = script.relative_to(task.path).as_posix()
        for lineno, line in _logical_lines(script.read_text(errors="replace")):
            if not line.lstrip().startswith("#") and (u := _URL_FETCH.search(line)):
                reasons.append(f"{rel}:{lineno}: fetches {u.group(1) or u.group(2)} (a script in the build context)")
    return reasons


def _solution_needs(task: Task) -> list[str]:
    """Lines of solution/solve.sh that fetch from the network (the oracle needs allow_internet for them)."""
    solve = task.solution_dir / "solve.sh" if task.solution_dir else None
    if solve is None:
        return ["no solution/solve.sh: no oracle run"]
    notes = []
    for lineno, line in _logical_lines(solve.read_text(errors="replace")):
        if _URL_FETCH.search(line) or re.search(r"\b(pip3?|uv)\s+(pip\s+)?install\b|\buvx\b", line):
            notes.append(f"solution/solve.sh:{lineno} fetches at solve time: {line.strip()[:100]}")
    return notes
