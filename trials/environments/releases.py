"""The releases a local base image is made of, one row of facts each, and how a ``FROM`` name finds its row.

``rise-base:<codename>`` is built by debootstrap + ``docker import`` (``images.py``) from:

- Debian ``bookworm`` (12, the default), ``trixie`` (13), ``bullseye`` (11): the mirror this machine's apt uses for
  that suite, else http://deb.debian.org/debian; debootstrap's own script; the Debian archive keyring;
- Ubuntu ``noble`` (24.04), ``jammy`` (22.04): ``RISE_UBUNTU_MIRROR``, else http://archive.ubuntu.com/ubuntu;
  debootstrap's ``gutsy`` script (the one every Ubuntu release uses); the Ubuntu archive keyring
  ``/usr/share/keyrings/ubuntu-archive-keyring.gpg`` (Debian package ``ubuntu-keyring``) or ``RISE_UBUNTU_KEYRING``;
  on a Debian machine with neither, the build fetches that package's keyring from the Debian archive into the
  cache (``keyrings.py``: apt with files of its own, verified, unpacked, never installed).

The signature check is never skipped: without a keyring the build stops and names the package to install.
Every package of the image is in each release's ``main``; an Ubuntu image's apt sources list ``universe`` as the
official images do (``python3-pip`` and ``python3-venv`` are there, and tasks install from it).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import EnvironmentBuildError, InfraError

DEBOOTSTRAP_SCRIPTS = Path("/usr/share/debootstrap/scripts")
DEBIAN_MIRROR = "http://deb.debian.org/debian"
UBUNTU_MIRROR = "http://archive.ubuntu.com/ubuntu"
UBUNTU_MIRROR_ENV = "RISE_UBUNTU_MIRROR"
UBUNTU_KEYRING_ENV = "RISE_UBUNTU_KEYRING"
KEYRINGS = {"debian": ("/usr/share/keyrings/debian-archive-keyring.gpg", "debian-archive-keyring"),
            "ubuntu": ("/usr/share/keyrings/ubuntu-archive-keyring.gpg", "ubuntu-keyring")}
# What the starter suite and the seed harness need inside a sandbox; bash, coreutils, grep, sed, findutils are
# already in minbase but are named so the image keeps them if minbase ever changes. Every name is in the main
# component of each release below (checked against their package lists).
PACKAGES = ("bash", "coreutils", "findutils", "grep", "sed", "gawk", "procps", "tmux", "python3",
            "python-is-python3", "less", "ca-certificates")
_UBUNTU_SOURCES = tuple(f"deb {{mirror}} {{suite}}{pocket} main restricted universe multiverse"
                        for pocket in ("", "-updates", "-security"))


@dataclass(frozen=True)
class Release:
    """One release a base image can be made of."""

    codename: str
    distribution: str  # debian | ubuntu
    version: str  # as in its image tags: 12, 24.04
    python: str  # its python3, major.minor
    # pip refuses to install into the system Python (PEP 668, EXTERNALLY-MANAGED) unless told: bookworm, trixie,
    # noble. Bullseye and jammy have no such marker, and their pip (20.3, 22.0) does not know the variable.
    pip_break_system_packages: bool
    script: str | None = None  # the debootstrap script when it is not the one named after the codename
    packages: tuple[str, ...] = PACKAGES
    components: tuple[str, ...] = ("main",)  # what debootstrap installs from
    image_sources: tuple[str, ...] = ()  # apt lines written into the image; empty: the ones debootstrap wrote

    @property
    def image(self) -> str:
        return f"rise-base:{self.codename}"

    @property
    def label(self) -> str:
        return f"{self.distribution.capitalize()} {self.codename}"

    def recipe(self) -> dict[str, object]:
        """What the rootfs is made of; bookworm's is the recipe of the first base image, so its cache stays."""
        recipe: dict[str, object] = {"suite": self.codename, "packages": list(self.packages), "variant": "minbase"}
        if self.components != ("main",):
            recipe["components"] = list(self.components)
        if self.script:
            recipe["script"] = self.script
        if self.image_sources:
            recipe["sources"] = list(self.image_sources)
        return recipe

    def recipe_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.recipe(), sort_keys=True).encode()).hexdigest()[:16]

    def tag_matches(self, tag: str) -> bool:
        """Whether ``debian:<tag>`` / ``ubuntu:<tag>`` names this release (12, 12.5-slim, bookworm-20240110...)."""
        name = rf"{self.codename}(?:-\d{{8}})?|{re.escape(self.version)}(?:\.\d+)*"
        slim = "(?:-slim)?" if self.distribution == "debian" else ""
        return re.fullmatch(f"(?:{name}){slim}", tag) is not None


BOOKWORM = Release("bookworm", "debian", "12", "3.11", pip_break_system_packages=True)
RELEASES: dict[str, Release] = {r.codename: r for r in (
    BOOKWORM,
    Release("trixie", "debian", "13", "3.13", pip_break_system_packages=True),
    Release("bullseye", "debian", "11", "3.9", pip_break_system_packages=False),
    Release("noble", "ubuntu", "24.04", "3.12", pip_break_system_packages=True, script="gutsy",
            image_sources=_UBUNTU_SOURCES),
    Release("jammy", "ubuntu", "22.04", "3.10", pip_break_system_packages=False, script="gutsy",
            image_sources=_UBUNTU_SOURCES),
)}
DEFAULT = BOOKWORM.codename
KNOWN = ", ".join(f"{r.label} {r.version}" for r in RELEASES.values())

_PREFIX = r"(?:docker\.io/)?(?:library/)?"
_PYTHON = re.compile(rf"{_PREFIX}python:(3\.\d+)(?:\.\d+)?(?:-slim)?(?:-([a-z]+))?")
_OS = re.compile(rf"{_PREFIX}(debian|ubuntu):([\w.-]+)")


def get_release(codename: str) -> Release:
    """The release called ``codename``, or an ``InfraError`` that lists the known ones."""
    try:
        return RELEASES[codename]
    except KeyError:
        raise InfraError(f"no base image release {codename!r}; known: {', '.join(RELEASES)}",
                         cause="image_build") from None


def release_of_image(name: str) -> Release | None:
    """The release of a local base image name (``rise-base:noble``), None for any other name."""
    repo, _, tag = name.partition(":")
    return RELEASES.get(tag) if repo == "rise-base" else None


def match_from(image: str) -> tuple[Release, str | None] | None:
    """The release a ``FROM`` image is, and the Python version when it is a ``python:3.X`` image (None for an OS
    image). ``python:3.X[-slim]`` without a release is bookworm's, as it was when the adapter was written."""
    if m := _PYTHON.fullmatch(image):
        release = RELEASES.get(m.group(2) or DEFAULT)
        return (release, m.group(1)) if release and release.distribution == "debian" else None
    if m := _OS.fullmatch(image):
        found = [r for r in RELEASES.values() if r.distribution == m.group(1) and r.tag_matches(m.group(2))]
        return (found[0], None) if found else None
    if release := release_of_image(image):
        return release, None
    return None


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


def debian_mirror(suite: str = DEFAULT, etc_apt: Path = Path("/etc/apt")) -> str:
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


def mirror_for(release: Release, etc_apt: Path = Path("/etc/apt")) -> str:
    """Where ``release`` is fetched from (see the module docstring)."""
    if release.distribution == "ubuntu":
        return os.environ.get(UBUNTU_MIRROR_ENV, "").strip() or UBUNTU_MIRROR
    try:
        return debian_mirror(release.codename, etc_apt)
    except InfraError:
        return DEBIAN_MIRROR


def keyring_for(release: Release) -> str:
    """The keyring debootstrap checks ``release``'s archive against; an ``EnvironmentBuildError`` that names the
    package to install when it is missing (the check is never skipped)."""
    path, package = KEYRINGS[release.distribution]
    if release.distribution == "ubuntu":
        path = os.environ.get(UBUNTU_KEYRING_ENV, "").strip() or path
    if Path(path).is_file():
        return path
    where = ("on Debian it is in trixie's main and in bookworm-backports "
             "(apt-get install -t bookworm-backports ubuntu-keyring); or set "
             f"{UBUNTU_KEYRING_ENV} to a keyring file that holds the Ubuntu archive key"
             if release.distribution == "ubuntu" else "apt-get install debian-archive-keyring")
    raise EnvironmentBuildError(f"cannot build {release.image} ({release.label} {release.version}): the archive "
                                f"keyring {path} is missing and the signature check is never skipped; install "
                                f"the package {package} ({where})")


def script_for(release: Release) -> Path | None:
    """The debootstrap script passed on the command line (Ubuntu's), or None for debootstrap's own choice."""
    if release.script is None:
        return None
    path = DEBOOTSTRAP_SCRIPTS / release.script
    if not path.is_file():
        raise EnvironmentBuildError(f"cannot build {release.image}: this debootstrap has no script {path}")
    return path


def debootstrap_command(release: Release, rootfs: Path, mirror: str, keyring: str,
                        script: Path | None = None) -> list[str]:
    """The debootstrap command line that makes ``release``'s rootfs (verified against ``keyring``)."""
    cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(release.packages)}"]
    if release.components != ("main",):
        cmd.append(f"--components={','.join(release.components)}")
    cmd += [f"--keyring={keyring}", "--force-check-gpg", release.codename, str(rootfs), mirror]
    return cmd + ([str(script)] if script else [])


def image_sources(release: Release, mirror: str) -> str | None:
    """The apt sources.list written into the image, or None to keep the one debootstrap wrote."""
    if not release.image_sources:
        return None
    return "".join(line.format(mirror=mirror, suite=release.codename) + "\n" for line in release.image_sources)
