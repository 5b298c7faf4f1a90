"""A small Dockerfile reader: enough to replay a task's Dockerfile without an image (local sandbox) and to
rewrite its FROM line (docker sandbox).

Supported for ``local``: FROM (recorded, not used), WORKDIR, COPY/ADD of local files, ENV, ARG, RUN (run inside
the sandbox after it starts). Ignored because they change nothing a trial can observe in a sandbox that is kept
alive by its own process: EXPOSE, LABEL, MAINTAINER, CMD, ENTRYPOINT, STOPSIGNAL, HEALTHCHECK, VOLUME, and
``USER root``. Refused with :class:`UnsupportedTaskError` (the task needs ``--env docker``): a second FROM
(multi-stage), ``COPY --from``, ADD of URLs or archives, heredocs, a non-root USER, SHELL, ONBUILD, and anything
unknown.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UnsupportedTaskError

IGNORED = {"EXPOSE", "LABEL", "MAINTAINER", "CMD", "ENTRYPOINT", "STOPSIGNAL", "HEALTHCHECK", "VOLUME"}
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar.zst")


@dataclass
class Instruction:
    """One logical Dockerfile line (continuations joined)."""

    lineno: int  # 1-based line where the instruction starts
    keyword: str  # upper case
    args: str  # raw text after the keyword
    text: str  # the whole original instruction, for messages

    def flags_and_words(self) -> tuple[dict[str, str], list[str]]:
        """``--flag=value`` options and the remaining words (JSON-array or shell form)."""
        rest = self.args.strip()
        flags: dict[str, str] = {}
        while rest.startswith("--"):
            word, _, rest = rest.partition(" ")
            name, _, value = word[2:].partition("=")
            flags[name] = value
            rest = rest.lstrip()
        if rest.startswith("["):
            try:
                words = json.loads(rest)
            except json.JSONDecodeError:
                words = shlex.split(rest)
        else:
            words = shlex.split(rest, posix=True)
        return flags, [str(w) for w in words]


def parse(text: str) -> list[Instruction]:
    """Split a Dockerfile into instructions; comments and blank lines dropped, ``\\`` continuations joined."""
    out: list[Instruction] = []
    buf: list[str] = []
    start = 0
    for i, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):  # comment lines inside a continuation are skipped by docker
            continue
        if not buf:
            start = i
        if stripped.endswith("\\"):
            buf.append(stripped[:-1])
            continue
        buf.append(stripped)
        joined = " ".join(part.strip() for part in buf if part.strip())
        buf = []
        keyword, _, args = joined.partition(" ")
        out.append(Instruction(start, keyword.upper(), args.strip(), joined))
    if buf:
        joined = " ".join(buf)
        keyword, _, args = joined.partition(" ")
        out.append(Instruction(start, keyword.upper(), args.strip(), joined))
    return out


_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def substitute(value: str, variables: dict[str, str]) -> str:
    """Docker-style ``$VAR``, ``${VAR}`` and ``${VAR:-default}`` expansion (unset → empty or default)."""

    def repl(m: re.Match) -> str:
        name = m.group(1) or m.group(3)
        if name in variables and variables[name] != "":
            return variables[name]
        return m.group(2) or variables.get(name, "")

    return _VAR.sub(repl, value)


def _key_values(inst: Instruction, variables: dict[str, str]) -> dict[str, str]:
    """ENV / ARG bodies: ``k=v k2="v 2"`` or the legacy ``ENV k v w``."""
    body = inst.args.strip()
    words = shlex.split(body)
    if inst.keyword == "ENV" and words and "=" not in words[0]:
        key, _, value = body.partition(" ")
        return {key: substitute(value.strip(), variables)}
    pairs = {}
    for w in words:
        key, eq, value = w.partition("=")
        pairs[key] = substitute(value, variables) if eq else None
    return pairs


@dataclass
class Step:
    """One thing the local sandbox does at start, in Dockerfile order."""

    kind: str  # "workdir" | "copy" | "run"
    lineno: int
    workdir: str
    env: dict[str, str]  # ENV + ARG values in force at this step (RUN sees both, like a docker build)
    command: str = ""  # run
    sources: list[str] = field(default_factory=list)  # copy: paths relative to the build context
    dest: str = ""  # copy: absolute path inside the sandbox


@dataclass
class LocalPlan:
    """What a Dockerfile means for a sandbox without an image."""

    base: str | None = None
    workdir: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # final ENV (not ARG), for every exec
    steps: list[Step] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)


def _glob(context: Path, pattern: str) -> list[Path]:
    try:
        return sorted(context.glob(pattern))
    except (ValueError, NotImplementedError):
        return []


def plan_local(dockerfile: Path, context: Path, base_env: dict[str, str] | None = None) -> LocalPlan:
    """Translate ``dockerfile`` into start steps, or raise ``UnsupportedTaskError`` naming the line.

    ``base_env`` is the environment the sandbox starts with (PATH...), so ``ENV PATH=/x:$PATH`` expands as in
    a build on an image that sets it.
    """
    text = dockerfile.read_text()

    def refuse(inst: Instruction, why: str) -> UnsupportedTaskError:
        return UnsupportedTaskError(f"{dockerfile}:{inst.lineno}", inst.keyword,
                                    f"{why} in `{inst.text}`; the local sandbox cannot do this, "
                                    "run this task with --env docker")

    plan = LocalPlan()
    env: dict[str, str] = dict(base_env or {})
    args: dict[str, str] = {}
    workdir = "/"
    seen_from = False
    for inst in parse(text):
        variables = {**args, **env}
        kw = inst.keyword
        if "<<" in inst.args and kw in ("RUN", "COPY", "ADD"):
            raise refuse(inst, "heredocs are not supported")
        if kw == "FROM":
            if seen_from:
                raise refuse(inst, "multi-stage builds (a second FROM) are not supported")
            seen_from = True
            plan.base = substitute(inst.args.split()[0], variables) if inst.args else None
        elif kw == "ARG":
            for k, v in _key_values(inst, variables).items():
                args[k] = v if v is not None else args.get(k, "")
        elif kw == "ENV":
            env.update({k: v or "" for k, v in _key_values(inst, variables).items()})
        elif kw == "WORKDIR":
            path = substitute(inst.args.strip(), variables)
            workdir = path if path.startswith("/") else str(Path(workdir) / path)
            plan.steps.append(Step("workdir", inst.lineno, workdir, dict(env)))
        elif kw in ("COPY", "ADD"):
            flags, words = inst.flags_and_words()
            if "from" in flags:
                raise refuse(inst, "COPY --from (multi-stage) is not supported")
            if len(words) < 2:
                raise refuse(inst, f"{kw} needs a source and a destination")
            words = [substitute(w, variables) for w in words]
            *sources, dest = words
            for src in sources:
                if kw == "ADD" and (re.match(r"^[a-z]+://", src) or src.endswith(ARCHIVE_SUFFIXES)):
                    raise refuse(inst, "ADD of a URL or an archive is not supported")
                if Path(src).is_absolute() or ".." in Path(src).parts:
                    raise refuse(inst, f"source {src!r} is outside the build context")
                if not (context / src).exists() and not _glob(context, src):
                    raise refuse(inst, f"source {src!r} does not exist in {context}")
            if not dest.startswith("/"):
                dest = str(Path(workdir) / dest) + ("/" if dest.endswith("/") else "")
            plan.steps.append(Step("copy", inst.lineno, workdir, dict(env), sources=sources, dest=dest))
        elif kw == "RUN":
            if inst.args.startswith("--"):
                raise refuse(inst, "RUN options (--mount, --network...) are not supported")
            body = inst.args.strip()
            if body.startswith("["):
                body = shlex.join(json.loads(body))
            plan.steps.append(Step("run", inst.lineno, workdir, {**args, **env}, command=body))
        elif kw == "USER":
            user = inst.args.strip().split(":")[0]
            if user not in ("root", "0"):
                raise refuse(inst, f"USER {user} (the local sandbox runs as root)")
            plan.ignored.append(inst.text)
        elif kw in IGNORED:
            plan.ignored.append(inst.text)
        else:
            raise refuse(inst, f"the {kw} instruction is not supported")
    plan.env = env
    plan.workdir = workdir if any(s.kind == "workdir" for s in plan.steps) else None
    return plan


def rewrite_from(text: str, resolve) -> tuple[str, list[tuple[str, str]]]:
    """Rewrite every ``FROM image`` through ``resolve(image) -> image``; returns (text, [(old, new)])."""
    changes: list[tuple[str, str]] = []
    stages: set[str] = set()
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*FROM\s+)((?:--\S+\s+)*)(\S+)(.*)$", line, flags=re.IGNORECASE | re.DOTALL)
        if not m:
            continue
        prefix, flags, image, rest = m.groups()
        alias = re.search(r"\bAS\s+(\S+)", rest, flags=re.IGNORECASE)
        if image not in stages and "$" not in image and image.lower() != "scratch":
            new = resolve(image)
            if new != image:
                changes.append((image, new))
                lines[i] = f"{prefix}{flags}{new}{rest}"
        if alias:
            stages.add(alias.group(1))
    return "".join(lines), changes
