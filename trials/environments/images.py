"""The local Debian base image ``rise-base:bookworm`` and the base-image map that points FROM lines at it.

Air-gapped machines cannot pull ``python:3.11-slim-bookworm``; ``ensure_base_image`` builds an equivalent from the
Debian mirror this machine's apt already uses (debootstrap + ``docker import``), and :class:`BaseImageMap` rewrites
every FROM that is not present locally to it. The map is configurable with ``RISE_BASE_IMAGE_MAP``: either inline
JSON (``{"python:*": "my/python:3.11"}``) or the path of a TOML file with a ``[map]`` table of the same shape.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cache import cache_root
from ..errors import EnvironmentBuildError, InfraError

log = logging.getLogger(__name__)

BASE_IMAGE = "rise-base:bookworm"
SUITE = "bookworm"
# What the starter suite and the seed harness need inside a sandbox; bash, coreutils, grep, sed, findutils are
# already in minbase but are named so the image keeps them if minbase ever changes.
BASE_PACKAGES = ["bash", "coreutils", "findutils", "grep", "sed", "gawk", "procps", "tmux", "python3",
                 "python-is-python3", "less", "ca-certificates"]
CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
IMPORT_CHANGES = [f"ENV PATH={CLEAN_PATH}", "ENV LANG=C.UTF-8", "ENV DEBIAN_FRONTEND=noninteractive",
                  'CMD ["/bin/bash"]']
LABEL_KEY = "rise.base"


def cache_dir() -> Path:
    """Where the base image's rootfs tarball and build log live."""
    return cache_root() / "base"


def docker_client():  # -> docker.DockerClient; typed loosely so importing this module never needs docker
    """A docker-py client, or an ``InfraError`` saying why there is none."""
    try:
        import docker
    except ImportError as exc:  # pragma: no cover - docker is a declared dependency
        raise InfraError("the docker Python package is not installed", cause="docker") from exc
    try:
        client = docker.from_env(timeout=300)
        client.ping()
    except Exception as exc:
        raise InfraError(f"no Docker engine reachable: {exc}", cause="docker") from exc
    return client


def docker_available() -> bool:
    try:
        docker_client()
    except InfraError:
        return False
    return True


def image_exists(client, name: str) -> bool:
    import docker.errors

    try:
        client.images.get(name)
    except docker.errors.ImageNotFound:
        return False
    return True


# ---------------------------------------------------------------------------------------------- mirror lookup


def _deb822_entries(text: str) -> list[dict[str, str]]:
    entries, cur = [], {}
    for line in text.splitlines() + [""]:
        if not line.strip():
            if cur:
                entries.append(cur)
            cur = {}
            continue
        if line.lstrip().startswith("#"):
            continue
        if ":" in line and not line[0].isspace():
            key, _, value = line.partition(":")
            cur[key.strip().lower()] = value.strip()
    return entries


def debian_mirror(suite: str = SUITE, etc_apt: Path = Path("/etc/apt")) -> str:
    """The Debian archive URI this machine's apt uses for ``suite`` (read at run time, never hard-coded)."""
    candidates: list[str] = []
    files = [etc_apt / "sources.list"] + sorted((etc_apt / "sources.list.d").glob("*"))
    for path in files:
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if path.name.endswith(".sources"):
            for e in _deb822_entries(text):
                if e.get("enabled", "yes").lower() == "no" or "deb" not in e.get("types", "").split():
                    continue
                if suite in e.get("suites", "").split() and "main" in e.get("components", "").split():
                    candidates += e.get("uris", "").split()
        elif path.name.endswith(".list"):
            for line in text.splitlines():
                parts = re.sub(r"\[[^\]]*\]", "", line.split("#", 1)[0]).split()
                if len(parts) >= 4 and parts[0] == "deb" and parts[2] == suite and "main" in parts[3:]:
                    candidates.append(parts[1])
    for uri in candidates:
        if "security" not in uri:
            return uri
    raise InfraError(f"no Debian mirror for {suite} found in {etc_apt}/sources.list(.d)", cause="image_build")


# ---------------------------------------------------------------------------------------------- base image


def _recipe_hash() -> str:
    recipe = json.dumps({"suite": SUITE, "packages": BASE_PACKAGES, "variant": "minbase"}, sort_keys=True)
    return hashlib.sha256(recipe.encode()).hexdigest()[:16]


def _run_logged(cmd: list[str], logf, timeout: float) -> None:
    logf.write(f"$ {' '.join(cmd)}\n")
    logf.flush()
    proc = subprocess.run(cmd, check=False, stdout=logf, stderr=subprocess.STDOUT, timeout=timeout)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd)


def build_rootfs_tarball(force: bool = False) -> Path:
    """debootstrap the base rootfs and tar it into the cache (skipped when the cached tarball is current)."""
    cdir = cache_dir()
    cdir.mkdir(parents=True, exist_ok=True)
    tarball = cdir / f"rise-base-{SUITE}-{_recipe_hash()}.tar"
    if tarball.exists() and not force:
        return tarball
    log_path = cdir / "build.log"
    rootfs = cdir / "rootfs.tmp"
    if shutil.which("debootstrap") is None:
        raise EnvironmentBuildError("debootstrap is not installed (apt-get install debootstrap)",
                                    log_path=str(log_path))
    mirror = debian_mirror()
    shutil.rmtree(rootfs, ignore_errors=True)
    try:
        with log_path.open("w") as logf:
            _run_logged(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
                         SUITE, str(rootfs), mirror], logf, timeout=1800)
            # Smaller image, and no host apt cache leaking in.
            for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
                for p in (rootfs / sub).glob("*"):
                    if p.is_file():
                        p.unlink()
            tmp = tarball.with_suffix(".partial")
            _run_logged(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(tmp), "."], logf, timeout=600)
            tmp.replace(tarball)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentBuildError(f"building the {BASE_IMAGE} rootfs failed: {exc}",
                                    log_path=str(log_path)) from exc
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
    for old in cdir.glob(f"rise-base-{SUITE}-*.tar"):
        if old != tarball:
            old.unlink()
    return tarball


def ensure_base_image(force: bool = False, client=None) -> str:
    """Make sure ``rise-base:bookworm`` exists in the local engine; returns its image id. Idempotent."""
    client = client or docker_client()
    if not force and image_exists(client, BASE_IMAGE):
        return client.images.get(BASE_IMAGE).id
    tarball = build_rootfs_tarball(force=force)
    repo, tag = BASE_IMAGE.split(":")
    log.info("importing %s into %s", tarball, BASE_IMAGE)
    try:
        client.api.import_image_from_file(str(tarball), repository=repo, tag=tag, changes=IMPORT_CHANGES)
    except Exception as exc:
        raise EnvironmentBuildError(f"docker import of {tarball} failed: {exc}",
                                    log_path=str(cache_dir() / "build.log")) from exc
    return client.images.get(BASE_IMAGE).id


# ---------------------------------------------------------------------------------------------- base-image map


@dataclass
class BaseImageMap:
    """Rewrites FROM references: explicit rules first, then the image itself when present locally, else base."""

    rules: dict[str, str] = field(default_factory=dict)
    default: str = BASE_IMAGE
    # RISE_BASE_IMAGE_PULL=1 (a machine that reaches a registry): an image that is not here is left for the build
    # to pull instead of being mapped to the default; the offline adapter (trials/tasks/adapter.py) is not needed.
    pull: bool = False

    @classmethod
    def from_env(cls) -> BaseImageMap:
        raw = os.environ.get("RISE_BASE_IMAGE_MAP", "").strip()
        pull = os.environ.get("RISE_BASE_IMAGE_PULL", "") == "1"
        if not raw:
            return cls(pull=pull)
        found = cls.from_config(raw)
        found.pull = pull
        return found

    @classmethod
    def from_config(cls, raw: str | dict[str, Any]) -> BaseImageMap:
        """From a dict, inline JSON, or the path of a JSON/TOML file (``[map]`` table, optional ``default``)."""
        data: Any = raw
        if isinstance(raw, str):
            if raw.lstrip().startswith("{"):
                data = json.loads(raw)
            else:
                path = Path(raw).expanduser()
                text = path.read_text()
                data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
        if not isinstance(data, dict):
            raise TypeError(f"RISE_BASE_IMAGE_MAP must be a table of pattern -> image, got {data!r}")
        rules = data["map"] if isinstance(data.get("map"), dict) else data
        default = data.get("default", BASE_IMAGE)
        return cls(rules={str(k): str(v) for k, v in rules.items() if k not in ("map", "default")},
                   default=str(default))

    def resolve(self, image: str, present=None) -> str:
        """Where ``FROM image`` should point. ``present(name) -> bool`` says if an image exists locally."""
        if image in self.rules:
            return self.rules[image]
        for pattern, target in self.rules.items():
            if fnmatch.fnmatchcase(image, pattern):
                return target
        if self.pull or (present is not None and present(image)):
            return image
        return self.default
