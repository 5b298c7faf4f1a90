"""The local base images ``rise-base:<release>`` and the base-image map that points FROM lines at them.

Air-gapped machines cannot pull ``python:3.11-slim-bookworm`` or ``ubuntu:24.04``; ``ensure_base_image`` builds an
equivalent of a known release (``releases.py``: Debian bookworm, the default, trixie, bullseye; Ubuntu noble,
jammy) from its archive (debootstrap + ``docker import``), and :class:`BaseImageMap` rewrites every FROM that is not
present locally to ``rise-base:bookworm`` (the offline adapter, ``trials/tasks/adapter.py``, picks the release).
The map is configurable with ``RISE_BASE_IMAGE_MAP``: either inline JSON (``{"python:*": "my/python:3.11"}``) or
the path of a TOML file with a ``[map]`` table of the same shape.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import shutil
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cache import cache_root
from ..errors import EnvironmentBuildError, InfraError
from .keyrings import fetch_ubuntu_keyring, run_logged
from .releases import (  # debian_mirror: re-exported, callers read it from here
    BOOKWORM,
    UBUNTU_KEYRING_ENV,
    Release,
    debian_mirror,  # noqa: F401
    debootstrap_command,
    image_sources,
    keyring_for,
    mirror_for,
    release_of_image,
    script_for,
)

log = logging.getLogger(__name__)

BASE_IMAGE = BOOKWORM.image  # the default base: rise-base:bookworm
SUITE = BOOKWORM.codename
BASE_PACKAGES = list(BOOKWORM.packages)
CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
IMPORT_CHANGES = [f"ENV PATH={CLEAN_PATH}", "ENV LANG=C.UTF-8", "ENV DEBIAN_FRONTEND=noninteractive",
                  'CMD ["/bin/bash"]']
LABEL_KEY = "rise.base"


def cache_dir() -> Path:
    """Where the base images' rootfs tarballs and build logs live."""
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


# ---------------------------------------------------------------------------------------------- base images


def build_log(release: Release = BOOKWORM) -> Path:
    """Where the build of ``release``'s rootfs writes its log (one per release)."""
    return cache_dir() / f"build-{release.codename}.log"


def ubuntu_keyring_dir() -> Path:
    """Where the Ubuntu archive keyring fetched from the Debian archive is kept (``keyrings.py``)."""
    return cache_dir() / "ubuntu-keyring"


def _keyring(release: Release, logf) -> str:
    """``release``'s archive keyring; for Ubuntu on a machine without one (and no ``RISE_UBUNTU_KEYRING``), the
    one fetched from the Debian archive into the cache, fetched now if it is not there yet."""
    try:
        return keyring_for(release)
    except EnvironmentBuildError as missing:
        if release.distribution != "ubuntu" or os.environ.get(UBUNTU_KEYRING_ENV, "").strip():
            raise
        try:
            return str(fetch_ubuntu_keyring(ubuntu_keyring_dir(), logf))
        except EnvironmentBuildError as exc:
            raise EnvironmentBuildError(f"{missing}; fetching it did not work either: {exc}") from None


def build_rootfs_tarball(force: bool = False, release: Release | None = None) -> Path:
    """debootstrap ``release``'s rootfs (bookworm unless told) and tar it into the cache (skipped when the cached
    tarball is current). A failure names the release, the mirror and the log."""
    release = release or BOOKWORM
    cdir = cache_dir()
    cdir.mkdir(parents=True, exist_ok=True)
    tarball = cdir / f"rise-base-{release.codename}-{release.recipe_hash()}.tar"
    if tarball.exists() and not force:
        return tarball
    log_path = build_log(release)
    rootfs = cdir / f"rootfs-{release.codename}.tmp"
    mirror = mirror_for(release)
    what = f"{release.image} ({release.label} {release.version}, from {mirror})"
    with log_path.open("w") as logf:
        logf.write(f"# building {what}\n")
        try:
            if shutil.which("debootstrap") is None:
                raise EnvironmentBuildError("debootstrap is not installed (apt-get install debootstrap)")
            cmd = debootstrap_command(release, rootfs, mirror, _keyring(release, logf), script_for(release))
        except EnvironmentBuildError as exc:
            logf.write(f"ERROR: {exc}\n")
            raise EnvironmentBuildError(f"building {what} failed: {exc}; log: {log_path}",
                                        log_path=str(log_path)) from None
        shutil.rmtree(rootfs, ignore_errors=True)
        try:
            run_logged(cmd, logf, timeout=1800)
            if (sources := image_sources(release, mirror)) is not None:
                (rootfs / "etc" / "apt").mkdir(parents=True, exist_ok=True)
                (rootfs / "etc" / "apt" / "sources.list").write_text(sources)
            # Smaller image, and no host apt cache leaking in.
            for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
                for p in (rootfs / sub).glob("*"):
                    if p.is_file():
                        p.unlink()
            tmp = tarball.with_suffix(".partial")
            run_logged(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(tmp), "."], logf, timeout=600)
            tmp.replace(tarball)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            raise EnvironmentBuildError(f"building {what} failed: {exc}; log: {log_path}",
                                        log_path=str(log_path)) from exc
        finally:
            shutil.rmtree(rootfs, ignore_errors=True)
    for old in cdir.glob(f"rise-base-{release.codename}-*.tar"):
        if old != tarball:
            old.unlink()
    return tarball


def ensure_base_image(force: bool = False, client=None, release: Release | None = None) -> str:
    """Make sure ``rise-base:<codename>`` (bookworm unless told) exists in the local engine; returns its image id.
    Idempotent: an image that is there is not rebuilt, a cached rootfs tarball is imported without debootstrap."""
    release = release or BOOKWORM
    client = client or docker_client()
    if not force and image_exists(client, release.image):
        return client.images.get(release.image).id
    tarball = build_rootfs_tarball(force=force, release=release)
    repo, tag = release.image.split(":")
    log.info("importing %s into %s", tarball, release.image)
    try:
        client.api.import_image_from_file(str(tarball), repository=repo, tag=tag, changes=IMPORT_CHANGES)
    except Exception as exc:
        raise EnvironmentBuildError(f"docker import of {tarball} as {release.image} failed: {exc}",
                                    log_path=str(build_log(release))) from exc
    return client.images.get(release.image).id


# ---------------------------------------------------------------------------------------------- base-image map


@dataclass
class BaseImageMap:
    """Rewrites FROM references: explicit rules first, then a local base (``rise-base:<release>``, built when
    missing) or an image present locally as itself, else the default base."""

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
        if release_of_image(image) is not None:
            return image
        if self.pull or (present is not None and present(image)):
            return image
        return self.default
