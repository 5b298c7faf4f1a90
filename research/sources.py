"""The corpus file: which external harness sources to mirror, each pinned (a git commit, an exact distribution
version, or a local folder). Pydantic models validated on read; every error names the file and the field."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from trials.validation import error_message, field_path

DEFAULT_CORPUS = Path(__file__).with_name("corpus.toml")
CORPUS_SCHEMA_VERSION = 1

_NAME = r"^[a-z0-9][a-z0-9._-]*$"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)$")


class ResearchError(ValueError):
    """Bad research input (corpus file, source, query, reference): the message names what and where."""

    def __init__(self, where: str, message: str):
        self.where, self.message = where, message
        super().__init__(f"{where}: {message}")


class _Source(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(pattern=_NAME, description="unique name; the framework it belongs to by default")]
    framework: str = Field("", description="the framework this source belongs to (default: its name)")
    include: list[str] = Field(default_factory=list, description="path prefixes to index (default: all)")
    exclude: list[str] = Field(default_factory=list, description="path prefixes left out, even under an include")

    @property
    def framework_name(self) -> str:
        return self.framework or self.name

    def wants(self, path: str) -> bool:
        """Whether ``path`` (relative, ``/``-separated) is under one of the ``include`` prefixes (all paths when
        there are none) and under none of the ``exclude`` prefixes."""
        return ((not self.include or any(_under(path, p) for p in self.include))
                and not any(_under(path, p) for p in self.exclude))


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


class GitSource(_Source):
    """A git repository (URL or local path) mirrored into the cache and read at one pinned commit."""

    kind: Literal["git"] = "git"
    url: str = Field(description="clone URL or local path of the repository")
    commit: str = Field(description="the pinned commit (7 to 40 hex digits); branches and tags are not pins")

    @field_validator("commit")
    @classmethod
    def _hex(cls, v: str) -> str:
        if not re.fullmatch(r"[0-9a-fA-F]{7,40}", v):
            raise ValueError(f"{v!r} is not a commit id (7 to 40 hex digits); pin a commit, not a branch or tag")
        return v.lower()

    @property
    def origin(self) -> str:
        return self.url


class DistSource(_Source):
    """A Python distribution ``name==version``: its wheel (or sdist) downloaded and unpacked."""

    kind: Literal["dist"] = "dist"
    requirement: str = Field(description="exactly one pinned version: name==version")
    format: Literal["wheel", "sdist"] = "wheel"
    python_version: str = Field("", description="download for this Python (e.g. 3.12) when it needs a newer one")
    find_links: str = Field("", description="a local folder of archives; when set the package index is not used")

    @model_validator(mode="after")
    def _sdist_any_python(self) -> DistSource:
        if self.format == "sdist" and self.python_version:
            raise ValueError("python_version applies to wheels only (an sdist is the same for every Python)")
        return self

    @field_validator("requirement")
    @classmethod
    def _pinned(cls, v: str) -> str:
        if not _PIN.match(v.strip()):
            raise ValueError(f"{v!r} is not pinned: write name==version")
        return v.strip()

    @property
    def dist_name(self) -> str:
        return _PIN.match(self.requirement).group(1)  # type: ignore[union-attr]

    @property
    def version(self) -> str:
        return _PIN.match(self.requirement).group(2)  # type: ignore[union-attr]

    @property
    def origin(self) -> str:
        return self.requirement


class LocalSource(_Source):
    """A folder on this machine, read as it is (its version is a hash of the indexed files)."""

    kind: Literal["local"] = "local"
    path: str

    @property
    def origin(self) -> str:
        return self.path


Source = Annotated[GitSource | DistSource | LocalSource, Field(discriminator="kind")]


class Corpus(BaseModel):
    """A parsed corpus file."""

    model_config = ConfigDict(extra="forbid")

    version: int = CORPUS_SCHEMA_VERSION
    sources: list[Source] = Field(default_factory=list)
    file: str = Field("", exclude=True, description="where it was read from")

    def source(self, name: str) -> GitSource | DistSource | LocalSource:
        for s in self.sources:
            if s.name == name:
                return s
        raise ResearchError(self.file or "corpus", f"no source named {name!r}; known: "
                            + ", ".join(s.name for s in self.sources))


def _where(loc: tuple, data: dict) -> str:
    """``sources[2] (harbor).requirement`` from a pydantic error location (the one formatter's path)."""
    return field_path([p for p in loc if p not in ("git", "dist", "local")], data)  # drop discriminator tags


def parse_corpus(text: str, file: str) -> Corpus:
    """Parse corpus TOML; relative local paths and find_links resolve against the file's folder."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ResearchError(file, f"not valid TOML: {exc}") from None
    try:
        corpus = Corpus.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{_where(e['loc'], data)}: {error_message(e)}" for e in exc.errors())
        raise ResearchError(file, problems) from None
    if corpus.version != CORPUS_SCHEMA_VERSION:
        raise ResearchError(file, f"version: {corpus.version} is not supported (want {CORPUS_SCHEMA_VERSION})")
    seen: set[str] = set()
    base = Path(file).resolve().parent
    for i, s in enumerate(corpus.sources):
        if s.name in seen:
            raise ResearchError(file, f"sources[{i}].name: {s.name!r} is used twice")
        seen.add(s.name)
        if isinstance(s, LocalSource):
            s.path = str((base / os.path.expanduser(s.path)).resolve())
        elif isinstance(s, DistSource) and s.find_links:
            s.find_links = str((base / os.path.expanduser(s.find_links)).resolve())
        elif isinstance(s, GitSource) and not re.match(r"^[a-z+]+://|^git@", s.url):
            s.url = str((base / os.path.expanduser(s.url)).resolve())  # a local repository path
    corpus.file = file
    return corpus


def load_corpus(path: Path | str | None = None) -> Corpus:
    """Read a corpus file (default: the one that ships with the project)."""
    p = Path(path) if path else DEFAULT_CORPUS
    try:
        text = p.read_text()
    except OSError as exc:
        raise ResearchError(str(p), f"cannot read the corpus file: {exc.strerror}") from None
    return parse_corpus(text, str(p))
