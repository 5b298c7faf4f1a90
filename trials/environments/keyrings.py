"""The Ubuntu archive keyring, for a Debian machine that has not installed it.

debootstrap checks an Ubuntu archive against ``ubuntu-archive-keyring.gpg``. Debian packages that file as
``ubuntu-keyring``, but bookworm's main has no such package (it is in bookworm-backports and in trixie's main),
so a bookworm machine cannot ``apt-get install`` it as it stands. This module gets that one package from the
Debian archive without touching the machine's apt: apt runs with sources, lists and cache of its own (under the
image cache), the index is verified against the machine's Debian archive keyring (``signed-by``), the package
against the index (apt checks its hash), and only the keyring file is unpacked (``dpkg-deb -x``), never
installed. What was fetched, from where, and the hashes are written to ``ubuntu-keyring.json`` beside it.

The suites are tried in order; the first that has the package wins. Nothing is done when the machine already has
the keyring or ``RISE_UBUNTU_KEYRING`` names one (``releases.keyring_for``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import IO

from ..errors import EnvironmentBuildError
from .releases import KEYRINGS, RELEASES, mirror_for

PACKAGE = "ubuntu-keyring"
MEMBER = "usr/share/keyrings/ubuntu-archive-keyring.gpg"
SUITES = ("bookworm-backports", "trixie")  # the small backports index first; trixie's main when it is gone
RECORD = "ubuntu-keyring.json"


def fetched_keyring(folder: Path) -> Path | None:
    """The keyring a previous fetch left in ``folder`` (with its record), or None."""
    path = folder / "root" / MEMBER
    return path if path.is_file() and (folder / RECORD).is_file() else None


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def apt_options(folder: Path, sources: Path) -> list[str]:
    """apt options that keep every file apt reads or writes for this fetch inside ``folder``."""
    return ["-q", "-o", f"Dir::Etc::SourceList={sources}", "-o", f"Dir::Etc::SourceParts={folder / 'parts'}",
            "-o", f"Dir::State::Lists={folder / 'lists'}", "-o", f"Dir::Cache={folder / 'cache'}",
            "-o", "APT::Sandbox::User=root", "-o", "Debug::NoLocking=1"]


def run_logged(cmd: list[str], log: IO[str], timeout: float, cwd: Path | None = None) -> None:
    """Run ``cmd`` with its output appended to ``log`` after a ``$ cmd`` line. A non-zero exit raises
    ``CalledProcessError``; a timeout or a missing program raise as ``subprocess.run`` does. (The base-image build
    in ``images.py`` uses it too.)"""
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    proc = subprocess.run(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd)


def _run(cmd: list[str], log: IO[str], cwd: Path, timeout: float) -> bool:
    """``run_logged`` as a yes/no: a failed suite is logged and the next one tried."""
    try:
        run_logged(cmd, log, timeout, cwd)
    except subprocess.CalledProcessError:
        return False
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.write(f"ERROR: {exc}\n")
        return False
    return True


def fetch_ubuntu_keyring(folder: Path, log: IO[str], suites: tuple[str, ...] = SUITES,
                         timeout: float = 300) -> Path:
    """Get the Ubuntu archive keyring into ``folder`` as the module docstring says; its path. An
    ``EnvironmentBuildError`` names each suite tried and the log when no suite gave it."""
    if (done := fetched_keyring(folder)) is not None:
        return done
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise EnvironmentBuildError(f"cannot fetch {PACKAGE}: this machine has no apt-get/dpkg-deb (not Debian)")
    debian_keyring = KEYRINGS["debian"][0]
    if not Path(debian_keyring).is_file():
        raise EnvironmentBuildError(f"cannot fetch {PACKAGE}: the Debian archive keyring {debian_keyring} is "
                                    "missing, so the Debian archive could not be verified")
    tried: list[str] = []
    for suite in suites:
        mirror = mirror_for(RELEASES.get(suite.split("-")[0], RELEASES["bookworm"]))
        work = folder.with_name(folder.name + ".partial")
        shutil.rmtree(work, ignore_errors=True)
        for sub in ("parts", "lists/partial", "cache/archives/partial", "debs"):
            (work / sub).mkdir(parents=True, exist_ok=True)
        sources = work / "sources.list"
        sources.write_text(f"deb [signed-by={debian_keyring}] {mirror} {suite} main\n")
        log.write(f"# {PACKAGE} from {mirror} {suite} (verified against {debian_keyring})\n")
        apt = ["apt-get", *apt_options(work, sources)]
        if not _run([*apt, "update"], log, work, timeout):
            tried.append(f"{suite}: apt-get update failed")
            continue
        if not _run([*apt, "download", PACKAGE], log, work / "debs", timeout):
            tried.append(f"{suite}: no {PACKAGE} to download")
            continue
        debs = sorted((work / "debs").glob(f"{PACKAGE}_*.deb"))
        if not debs or not _run(["dpkg-deb", "-x", str(debs[0]), str(work / "root")], log, work, timeout):
            tried.append(f"{suite}: the package could not be unpacked")
            continue
        keyring = work / "root" / MEMBER
        if not keyring.is_file():
            tried.append(f"{suite}: the package has no {MEMBER}")
            continue
        record = {"package": PACKAGE, "deb": debs[0].name, "deb_sha256": _sha256(debs[0]), "suite": suite,
                  "mirror": mirror, "verified_with": debian_keyring, "keyring": MEMBER,
                  "keyring_sha256": _sha256(keyring),
                  "fetched_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
        for sub in ("lists", "cache", "parts"):  # only what was fetched stays
            shutil.rmtree(work / sub, ignore_errors=True)
        (work / RECORD).write_text(json.dumps(record, indent=2) + "\n")
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(work, folder)
        log.write(f"# {PACKAGE} {debs[0].name} -> {folder / 'root' / MEMBER}\n")
        return folder / "root" / MEMBER
    shutil.rmtree(folder.with_name(folder.name + ".partial"), ignore_errors=True)
    raise EnvironmentBuildError(f"cannot fetch {PACKAGE} from the Debian archive: " + "; ".join(tried))
