"""Base images of other releases (trials/environments/releases.py): the table, the FROM spellings the offline
adapter maps to each, the Python and pip facts the adapted files use, the debootstrap command line each release
gets (subprocess faked), the Ubuntu keyring fetched from the Debian archive (faked, and once for real), the refusal
when it cannot be had; and one real build of ``rise-base:noble``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from trials.environments import images, releases
from trials.environments.images import BaseImageMap, build_rootfs_tarball, ensure_base_image
from trials.environments.releases import BOOKWORM, PACKAGES, RELEASES, match_from, mirror_for
from trials.errors import EnvironmentBuildError, InfraError
from trials.tasks import inspect_task
from trials.tasks.adapt_import import RECORD, import_tasks
from trials.tasks.adapter import VENV, plan

SHAPES = Path(__file__).resolve().parent.parent / "data" / "tb2-shapes"
APT_PIP = ("RUN apt-get update && apt-get install -y --no-install-recommends python3-pip python3-venv python3-dev "
           "&& rm -rf /var/lib/apt/lists/*")
BREAK = "ENV PIP_BREAK_SYSTEM_PACKAGES=1"


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RISE_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("RISE_UBUNTU_MIRROR", "RISE_UBUNTU_KEYRING", "RISE_BASE_IMAGE_MAP", "RISE_BASE_IMAGE_PULL"):
        monkeypatch.delenv(name, raising=False)


def shape(tmp_path: Path, name: str, base: str, extra: str = ""):
    """A copy of a tb2 shape whose Dockerfile starts ``FROM base`` (and ends with ``extra``)."""
    dest = tmp_path / "set" / name
    shutil.copytree(SHAPES / name, dest)
    dockerfile = dest / "environment" / "Dockerfile"
    lines = dockerfile.read_text().splitlines()
    assert lines[0].startswith("FROM ")
    dockerfile.write_text("\n".join([f"FROM {base}", *lines[1:]]) + "\n" + extra)
    task, problems = inspect_task(dest)
    assert task is not None, problems
    return task


# ---------------------------------------------------------------------------------------------- the table


def test_the_table_has_each_release_with_its_facts():
    facts = {r.codename: (r.distribution, r.version, r.python, r.image) for r in RELEASES.values()}
    assert facts == {"bookworm": ("debian", "12", "3.11", "rise-base:bookworm"),
                     "trixie": ("debian", "13", "3.13", "rise-base:trixie"),
                     "bullseye": ("debian", "11", "3.9", "rise-base:bullseye"),
                     "noble": ("ubuntu", "24.04", "3.12", "rise-base:noble"),
                     "jammy": ("ubuntu", "22.04", "3.10", "rise-base:jammy")}
    for release in RELEASES.values():  # every package is in each release's main
        assert release.packages == PACKAGES and release.components == ("main",)
    assert {r.codename: r.script for r in RELEASES.values()} == {
        "bookworm": None, "trixie": None, "bullseye": None, "noble": "gutsy", "jammy": "gutsy"}
    # pip refuses system installs (PEP 668) on bookworm, trixie, noble; jammy's and bullseye's pip know no such thing
    assert {r.codename: r.pip_break_system_packages for r in RELEASES.values()} == {
        "bookworm": True, "trixie": True, "bullseye": False, "noble": True, "jammy": False}


def test_bookworm_keeps_its_name_and_recipe_so_the_existing_image_and_cache_stay_valid():
    assert (images.BASE_IMAGE, images.SUITE) == ("rise-base:bookworm", "bookworm")
    assert images.BASE_PACKAGES == ["bash", "coreutils", "findutils", "grep", "sed", "gawk", "procps", "tmux",
                                    "python3", "python-is-python3", "less", "ca-certificates"]
    assert BOOKWORM.recipe() == {"suite": "bookworm", "packages": images.BASE_PACKAGES, "variant": "minbase"}
    assert BOOKWORM.recipe_hash() == "02635d8e221d2c69"  # the hash in the tarball name before releases existed
    assert len({r.recipe_hash() for r in RELEASES.values()}) == len(RELEASES)


def test_lookups():
    assert releases.get_release("noble") is RELEASES["noble"]
    with pytest.raises(InfraError, match="focal.*known: bookworm, trixie, bullseye, noble, jammy"):
        releases.get_release("focal")
    assert releases.release_of_image("rise-base:jammy") is RELEASES["jammy"]
    assert releases.release_of_image("rise-base:focal") is None and not releases.release_of_image("ubuntu:24.04")


# ---------------------------------------------------------------------------------------------- FROM spellings


@pytest.mark.parametrize(("image", "codename", "python"), [
    ("ubuntu:24.04", "noble", None), ("ubuntu:noble", "noble", None), ("ubuntu:noble-20240605", "noble", None),
    ("docker.io/library/ubuntu:24.04", "noble", None),
    ("ubuntu:22.04", "jammy", None), ("ubuntu:jammy", "jammy", None),
    ("debian:13.0-slim", "trixie", None), ("debian:13", "trixie", None), ("debian:trixie-slim", "trixie", None),
    ("debian:11", "bullseye", None), ("debian:bullseye-slim", "bullseye", None), ("debian:11.9-slim", "bullseye", None),
    ("debian:bookworm-slim", "bookworm", None), ("debian:12", "bookworm", None),
    ("debian:bookworm-20240110-slim", "bookworm", None),
    ("python:3.13-slim-bookworm", "bookworm", "3.13"), ("python:3.12-slim", "bookworm", "3.12"),
    ("python:3.12-slim-trixie", "trixie", "3.12"), ("python:3.13-trixie", "trixie", "3.13"),
    ("python:3.9-slim-bullseye", "bullseye", "3.9"), ("python:3.10.14-slim-bullseye", "bullseye", "3.10"),
    ("rise-base:noble", "noble", None),
])
def test_from_spellings_that_map(image, codename, python):
    assert match_from(image) == (RELEASES[codename], python)


@pytest.mark.parametrize("image", ["ubuntu:20.04", "ubuntu:focal", "ubuntu:latest", "alpine:3.19", "debian:10",
                                   "debian:buster-slim", "debian:stable-slim", "python:3.11-slim-buster",
                                   "python:3.12-alpine", "python:3.12-alpine3.19", "rise-base:focal",
                                   "ghcr.io/example/ubuntu:24.04"])
def test_from_spellings_that_stay_without_a_local_equivalent(image, tmp_path):
    assert match_from(image) is None
    v = plan(shape(tmp_path, "word-count", image), lambda _image: False)
    assert v.status == "cannot" and v.base_image is None
    [reason] = [r for r in v.reasons if image in r]
    assert "no local equivalent" in reason and "Ubuntu noble 24.04" in reason  # says what there is


@pytest.mark.parametrize(("image", "base"), [
    ("ubuntu:24.04", "rise-base:noble"), ("ubuntu:noble", "rise-base:noble"), ("ubuntu:22.04", "rise-base:jammy"),
    ("ubuntu:jammy", "rise-base:jammy"), ("debian:13.0-slim", "rise-base:trixie"),
    ("debian:trixie-slim", "rise-base:trixie"), ("debian:11", "rise-base:bullseye"),
    ("debian:bullseye-slim", "rise-base:bullseye"), ("debian:bookworm-slim", "rise-base:bookworm"),
])
def test_each_mapping_is_a_recorded_change(image, base, tmp_path):
    v = plan(shape(tmp_path, "word-count", image), lambda _image: False)
    assert v.status == "adapted" and not v.reasons and v.base_image == base
    [change] = [c for c in v.changes if c.rule == "base-image"]
    assert (change.file, change.before, change.after) == ("environment/Dockerfile", f"FROM {image}", f"FROM {base}")
    assert image in change.why and base in change.why
    assert v.dockerfile.startswith(f"FROM {base}\n")
    assert f"`rise images base --release {base.split(':')[1]}`" in " ".join(v.notes)  # not built here yet
    assert not [n for n in plan(shape(tmp_path / "b", "word-count", image), lambda i: i == base).notes
                if "not built" in n]


def test_an_image_present_locally_is_kept(tmp_path):
    v = plan(shape(tmp_path, "word-count", "ubuntu:24.04"), lambda image: image == "ubuntu:24.04")
    assert v.base_image == "ubuntu:24.04" and not [c for c in v.changes if c.rule == "base-image"]


# ---------------------------------------------------------------------------------------------- Python and pip facts


@pytest.mark.parametrize(("image", "codename", "python", "breaks", "version_note"), [
    ("python:3.12-slim-bookworm", "bookworm", "3.11", True,
     "Python 3.12 of python:3.12-slim-bookworm becomes Debian bookworm's python3 3.11"),
    ("python:3.12-slim-trixie", "trixie", "3.13", True,
     "Python 3.12 of python:3.12-slim-trixie becomes Debian trixie's python3 3.13"),
    ("python:3.9-slim-bullseye", "bullseye", "3.9", False, None),  # the same Python: nothing to say
])
def test_a_python_image_gets_its_releases_python_and_pip(image, codename, python, breaks, version_note, tmp_path):
    v = plan(shape(tmp_path, "render-table", image), lambda _image: False)  # RUN pip install; uvx -p 3.12
    assert v.status == "adapted" and v.python == python and v.base_image == f"rise-base:{codename}"
    head = [f"FROM rise-base:{codename}", APT_PIP] + ([BREAK] if breaks else [])
    assert v.dockerfile.splitlines()[:len(head)] == head
    assert (BREAK in v.dockerfile) is breaks
    [base_change] = [c for c in v.changes if c.rule == "base-image"]
    assert base_change.after == "\n".join(head)  # the pip lines are part of the recorded change
    assert [n for n in v.notes if n.startswith("Python ")] == ([version_note] if version_note else [])
    assert f"the verifier's Python 3.12 becomes {python} ({RELEASES[codename].label})" in v.notes
    assert f"python3 -m venv --system-site-packages {VENV}" in v.dockerfile


@pytest.mark.parametrize(("image", "release", "breaks"), [
    ("ubuntu:24.04", "noble", True), ("ubuntu:22.04", "jammy", False), ("debian:13.0-slim", "trixie", True),
    ("debian:bullseye-slim", "bullseye", False),
])
def test_pip_in_the_build_of_an_os_image_follows_the_release(image, release, breaks, tmp_path):
    v = plan(shape(tmp_path, "word-count", image, extra="RUN pip install requests==2.32.3\n"), lambda _i: False)
    assert v.status == "adapted" and v.python == RELEASES[release].python
    assert APT_PIP in v.dockerfile and (BREAK in v.dockerfile) is breaks
    assert v.dockerfile.index(APT_PIP) < v.dockerfile.index("COPY rise-wheels /opt/rise-wheels")
    # the verifier's venv is made by the release's own python3 (python3-venv from apt)
    assert f"python3 -m venv --system-site-packages {VENV}" in v.dockerfile
    assert "python3-venv" in v.dockerfile.split(f"python3 -m venv --system-site-packages {VENV}")[0]


def test_the_verifier_and_uv_use_the_mapped_releases_python(tmp_path):
    noble = plan(shape(tmp_path, "sum-column", "ubuntu:24.04"), lambda _image: False)  # uvx -p 3.13
    assert noble.python == "3.12" and noble.base_image == "rise-base:noble"
    assert "the verifier's Python 3.13 becomes 3.12 (Ubuntu noble)" in noble.notes
    jammy = plan(shape(tmp_path / "j", "json-keys", "ubuntu:22.04"), lambda _image: False)
    assert "uv venv /app/.venv --python 3.10" in jammy.dockerfile and BREAK not in jammy.dockerfile
    trixie = plan(shape(tmp_path / "t", "json-keys", "python:3.13-slim-trixie"), lambda _image: False)
    assert "uv venv /app/.venv --python 3.13" in trixie.dockerfile
    assert not [n for n in trixie.notes if n.startswith("Python 3.13 of")]  # trixie's python3 is 3.13


def test_the_import_fetches_wheels_for_the_bases_python_and_names_the_bases_to_build(tmp_path, monkeypatch):
    from trials.tasks import adapt_import

    shape(tmp_path, "word-count", "ubuntu:24.04")
    shape(tmp_path, "render-table", "python:3.12-slim-bullseye")
    shape(tmp_path, "sum-column", "python:3.13-slim-bookworm")
    calls: list[tuple[str, tuple[str, ...]]] = []

    def fake_pip(requirements, dest, python="3.11"):
        calls.append((python, tuple(requirements)))
        dest.mkdir(parents=True, exist_ok=True)
        for req in requirements:
            (dest / f"{req.replace('==', '-')}-py3-none-any.whl").write_text(req)

    monkeypatch.setattr(adapt_import, "pip_download", fake_pip)
    manifest = import_tasks(tmp_path / "set", tmp_path / "out", lambda image: image == "rise-base:bookworm")
    assert {t.name: t.status for t in manifest.tasks} == {"word-count": "adapted", "render-table": "adapted",
                                                          "sum-column": "adapted"}
    assert {python for python, _ in calls} == {"3.12", "3.9", "3.11"}
    assert ("3.12", ("pytest==8.4.1",)) in calls
    assert manifest.missing_bases == ["rise-base:bullseye", "rise-base:noble"]  # in the order of the tasks
    record = json.loads((tmp_path / "out" / "word-count" / RECORD).read_text())
    assert (record["base_image"], record["python"]) == ("rise-base:noble", "3.12")


def test_rise_tasks_check_names_each_tasks_local_base(tmp_path):
    from rise.cli import app

    shape(tmp_path, "word-count", "ubuntu:24.04")
    shape(tmp_path, "render-table", "python:3.12-slim-trixie")
    result = CliRunner().invoke(app, ["tasks", "check", str(tmp_path / "set")], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "local base" in out and "rise-base:noble (python3 3.12)" in out
    assert "rise-base:trixie (python3 3.13)" in out


# ---------------------------------------------------------------------------------------------- the docker path


def test_the_base_image_map_keeps_a_local_base_and_the_sandbox_builds_that_release(tmp_path, monkeypatch):
    from trials.environments import docker

    m = BaseImageMap()
    assert m.resolve("rise-base:noble", present=lambda _i: False) == "rise-base:noble"
    assert m.resolve("ubuntu:24.04", present=lambda _i: False) == "rise-base:bookworm"  # unadapted: as before
    built = []
    monkeypatch.setattr(docker, "image_exists", lambda _client, _name: False)
    monkeypatch.setattr(docker, "ensure_base_image", lambda client, release: built.append(release.codename))
    cfg = SimpleNamespace(allow_internet=False, workdir=None, env={})
    env = docker.DockerEnvironment(SimpleNamespace(name="t", config=SimpleNamespace(environment=cfg)),
                                   tmp_path / "trial", base_image_map=m, client=object())
    assert env._resolve_from("rise-base:noble") == "rise-base:noble"
    assert env._resolve_from("python:3.12-slim-bookworm") == "rise-base:bookworm"
    assert built == ["noble", "bookworm"]


# ---------------------------------------------------------------------------------------------- the build


class FakeRun:
    """Stands in for subprocess.run: records each command; tar writes its output file."""

    def __init__(self):
        self.commands: list[list[str]] = []
        self.sources: str | None = None
        self.fail: str | None = None  # the program that exits 1
        self.apt_fails_for: set[str] = set()  # suites whose apt-get update exits 1
        self.package_in: set[str] = set()  # suites whose index has ubuntu-keyring

    def __call__(self, cmd, cwd=None, **_kwargs):
        self.commands.append(list(cmd))
        if cmd[0] == self.fail:
            return SimpleNamespace(returncode=1)
        if cmd[0] == "apt-get":  # the keyring fetch: the suite is in the private sources.list
            listed = next(o.split("=", 1)[1] for o in cmd if o.startswith("Dir::Etc::SourceList="))
            suite = Path(listed).read_text().split()[-2]
            if cmd[-1] == "update":
                return SimpleNamespace(returncode=1 if suite in self.apt_fails_for else 0)
            if suite not in self.package_in:
                return SimpleNamespace(returncode=100)  # apt: "Unable to locate package"
            (Path(cwd) / f"ubuntu-keyring_2023.11.28.1-{suite}_all.deb").write_bytes(b"deb " + suite.encode())
        if cmd[0] == "dpkg-deb":  # -x DEB DEST
            member = Path(cmd[3]) / "usr/share/keyrings/ubuntu-archive-keyring.gpg"
            member.parent.mkdir(parents=True)
            member.write_text("ubuntu key from " + Path(cmd[2]).name)
        if cmd[0] == "tar":
            listed = Path(cmd[2]) / "etc" / "apt" / "sources.list"
            self.sources = listed.read_text() if listed.exists() else None
            Path(cmd[5]).write_text("rootfs")
        return SimpleNamespace(returncode=0)


@pytest.fixture
def build_host(tmp_path, monkeypatch):
    """Keyrings and scripts where the build looks, fixed mirrors, debootstrap 'installed', subprocess faked."""
    (keys := tmp_path / "keys").mkdir()
    for name in ("debian", "ubuntu"):
        (keys / f"{name}.gpg").write_text("key")
        monkeypatch.setitem(releases.KEYRINGS, name, (str(keys / f"{name}.gpg"), releases.KEYRINGS[name][1]))
    (scripts := tmp_path / "scripts").mkdir()
    (scripts / "gutsy").write_text("")
    monkeypatch.setattr(releases, "DEBOOTSTRAP_SCRIPTS", scripts)
    monkeypatch.setattr(images, "mirror_for", lambda r: f"http://mirror.test/{r.distribution}")
    monkeypatch.setattr(images.shutil, "which", lambda name: f"/usr/sbin/{name}")
    monkeypatch.setattr(images.subprocess, "run", run := FakeRun())
    return SimpleNamespace(keys=keys, scripts=scripts, run=run)


@pytest.mark.parametrize("codename", list(RELEASES))
def test_the_debootstrap_command_line_of_each_release(codename, build_host):
    release = RELEASES[codename]
    tarball = build_rootfs_tarball(release=release)
    rootfs = images.cache_dir() / f"rootfs-{codename}.tmp"
    debootstrap, tar = build_host.run.commands
    expected = ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}",
                f"--keyring={build_host.keys / (release.distribution + '.gpg')}", "--force-check-gpg", codename,
                str(rootfs), f"http://mirror.test/{release.distribution}"]
    if release.distribution == "ubuntu":
        expected.append(str(build_host.scripts / "gutsy"))
    assert debootstrap == expected
    assert tar[:5] == ["tar", "-C", str(rootfs), "--numeric-owner", "-cf"]
    assert tarball == images.cache_dir() / f"rise-base-{codename}-{release.recipe_hash()}.tar" and tarball.exists()
    assert images.build_log(release).name == f"build-{codename}.log"
    assert "$ debootstrap --variant=minbase" in images.build_log(release).read_text()
    if release.distribution == "ubuntu":  # universe as in the official images (python3-pip, python3-venv)
        assert build_host.run.sources == "".join(
            f"deb http://mirror.test/ubuntu {codename}{pocket} main restricted universe multiverse\n"
            for pocket in ("", "-updates", "-security"))
    else:
        assert build_host.run.sources is None  # debootstrap's own sources.list, as bookworm's always was
    build_host.run.commands.clear()
    assert build_rootfs_tarball(release=release) == tarball and build_host.run.commands == []  # cached


def test_without_the_ubuntu_keyring_the_build_stops_and_names_the_package(build_host, monkeypatch, tmp_path):
    monkeypatch.setitem(releases.KEYRINGS, "ubuntu", (str(tmp_path / "absent.gpg"), "ubuntu-keyring"))
    with pytest.raises(EnvironmentBuildError) as exc:
        build_rootfs_tarball(release=RELEASES["noble"])
    message = str(exc.value)
    for needed in ("rise-base:noble", "Ubuntu noble", "http://mirror.test/ubuntu", "ubuntu-keyring",
                   str(tmp_path / "absent.gpg"), "RISE_UBUNTU_KEYRING", "build-noble.log"):
        assert needed in message, needed
    assert "fetching it did not work either" in message and "bookworm-backports" in message and "trixie" in message
    assert exc.value.log_path == str(images.build_log(RELEASES["noble"]))
    assert [c[0] for c in build_host.run.commands] == ["apt-get"] * 4  # update, download per suite; nothing found
    assert not any("debootstrap" in c[0] for c in build_host.run.commands)  # debootstrap never ran unchecked
    build_host.run.commands.clear()
    monkeypatch.setenv("RISE_UBUNTU_KEYRING", str(tmp_path / "also-absent.gpg"))
    with pytest.raises(EnvironmentBuildError, match="also-absent.gpg"):
        build_rootfs_tarball(release=RELEASES["jammy"])
    monkeypatch.setenv("RISE_UBUNTU_KEYRING", str(build_host.keys / "debian.gpg"))  # any file: the env wins
    build_rootfs_tarball(release=RELEASES["jammy"])
    assert f"--keyring={build_host.keys / 'debian.gpg'}" in build_host.run.commands[0]


def test_the_ubuntu_keyring_is_fetched_from_the_debian_archive_once_and_recorded(build_host, monkeypatch,
                                                                                   tmp_path):
    """No Ubuntu keyring on the machine: apt, with files of its own, gets Debian's ubuntu-keyring (the index
    verified with the Debian keyring), only the keyring is unpacked, and debootstrap checks noble against it."""
    from trials.environments import keyrings

    monkeypatch.setitem(releases.KEYRINGS, "ubuntu", (str(tmp_path / "absent.gpg"), "ubuntu-keyring"))
    build_host.run.apt_fails_for = {"bookworm-backports"}  # the first suite's index cannot be had: the next one
    build_host.run.package_in = {"trixie"}
    build_rootfs_tarball(release=RELEASES["noble"])
    folder = images.ubuntu_keyring_dir()
    keyring = folder / "root" / keyrings.MEMBER
    programs = [c[0] for c in build_host.run.commands]
    assert programs == ["apt-get", "apt-get", "apt-get", "dpkg-deb", "debootstrap", "tar"]
    for cmd in build_host.run.commands[:3]:  # nothing of the machine's apt is read or written
        for option in ("Dir::Etc::SourceList=", "Dir::Etc::SourceParts=", "Dir::State::Lists=", "Dir::Cache="):
            value = next(o for o in cmd if o.startswith(option)).split("=", 1)[1]
            assert value.startswith(str(folder) + ".partial"), (option, value)
    assert build_host.run.commands[2][-2:] == ["download", "ubuntu-keyring"]
    assert f"--keyring={keyring}" in build_host.run.commands[4] and "--force-check-gpg" in build_host.run.commands[4]
    record = json.loads((folder / keyrings.RECORD).read_text())
    assert record["suite"] == "trixie" and record["verified_with"] == str(build_host.keys / "debian.gpg")
    assert record["keyring_sha256"] == keyrings._sha256(keyring) and record["deb"].endswith("trixie_all.deb")
    assert sorted(p.name for p in folder.iterdir()) == ["debs", "root", "sources.list", keyrings.RECORD]  # lists gone
    assert not folder.with_name(folder.name + ".partial").exists()
    log = images.build_log(RELEASES["noble"]).read_text()
    assert log.index("# ubuntu-keyring from") < log.index("$ debootstrap")  # the fetch is in the build's log
    build_host.run.commands.clear()  # jammy's build: the fetched keyring is reused, apt not run again
    build_rootfs_tarball(release=RELEASES["jammy"])
    assert [c[0] for c in build_host.run.commands] == ["debootstrap", "tar"]
    assert f"--keyring={keyring}" in build_host.run.commands[0]


def test_the_keyring_fetch_names_each_suite_when_none_gives_it(build_host, monkeypatch, tmp_path):
    monkeypatch.setitem(releases.KEYRINGS, "ubuntu", (str(tmp_path / "absent.gpg"), "ubuntu-keyring"))
    build_host.run.apt_fails_for = {"bookworm-backports"}
    with pytest.raises(EnvironmentBuildError) as exc:
        build_rootfs_tarball(release=RELEASES["jammy"])
    assert "bookworm-backports: apt-get update failed" in str(exc.value)
    assert "trixie: no ubuntu-keyring to download" in str(exc.value)
    folder = images.ubuntu_keyring_dir()
    assert not folder.exists() and not folder.with_name(folder.name + ".partial").exists()  # nothing half made
    monkeypatch.setitem(releases.KEYRINGS, "debian", (str(tmp_path / "no-debian.gpg"), "debian-archive-keyring"))
    build_host.run.commands.clear()
    with pytest.raises(EnvironmentBuildError, match="Debian archive keyring .*no-debian.gpg is missing"):
        build_rootfs_tarball(release=RELEASES["jammy"])
    assert build_host.run.commands == []  # unverifiable: apt never ran


@pytest.mark.skipif(any(shutil.which(p) is None for p in ("apt-get", "dpkg-deb", "gpg")),
                    reason="not a Debian machine: no apt-get/dpkg-deb to fetch the Ubuntu keyring with (or no gpg)")
def test_the_ubuntu_keyring_is_fetched_for_real(tmp_path):
    """Real apt against the Debian archive this machine's apt uses (the package registry the set-up also uses):
    the keyring file is an OpenPGP keyring that holds the Ubuntu archive's 2018 signing key."""
    import subprocess

    from trials.environments.keyrings import RECORD, fetch_ubuntu_keyring

    with (tmp_path / "fetch.log").open("w") as log:
        keyring = fetch_ubuntu_keyring(tmp_path / "ubuntu-keyring", log)
    record = json.loads((tmp_path / "ubuntu-keyring" / RECORD).read_text())
    assert record["suite"] in ("bookworm-backports", "trixie") and keyring.stat().st_size > 1000
    listed = subprocess.run(["gpg", "--show-keys", "--with-colons", str(keyring)], capture_output=True, text=True,
                            check=True).stdout
    assert "Ubuntu Archive Automatic Signing Key (2018)" in listed, listed


def test_a_failed_debootstrap_names_the_release_the_mirror_and_the_log(build_host):
    build_host.run.fail = "debootstrap"
    with pytest.raises(EnvironmentBuildError) as exc:
        build_rootfs_tarball(release=RELEASES["trixie"])
    message = str(exc.value)
    for needed in ("rise-base:trixie", "Debian trixie", "http://mirror.test/debian", "build-trixie.log"):
        assert needed in message, needed
    assert not list(images.cache_dir().glob("rise-base-trixie-*.tar"))


def test_mirrors(tmp_path, monkeypatch):
    etc = tmp_path / "apt"
    (etc / "sources.list.d").mkdir(parents=True)
    assert mirror_for(RELEASES["trixie"], etc_apt=etc) == "http://deb.debian.org/debian"  # no entry: the fallback
    (etc / "sources.list").write_text("deb http://local.test/debian trixie main\n")
    assert mirror_for(RELEASES["trixie"], etc_apt=etc) == "http://local.test/debian"
    assert mirror_for(RELEASES["bullseye"], etc_apt=etc) == "http://deb.debian.org/debian"
    assert mirror_for(RELEASES["noble"], etc_apt=etc) == "http://archive.ubuntu.com/ubuntu"
    monkeypatch.setenv("RISE_UBUNTU_MIRROR", "http://ubuntu.local.test/ubuntu")
    assert mirror_for(RELEASES["jammy"], etc_apt=etc) == "http://ubuntu.local.test/ubuntu"


def test_ensure_imports_each_release_under_its_own_name(build_host):
    import docker.errors

    have: dict[str, str] = {}

    def get(name):
        if name not in have:
            raise docker.errors.ImageNotFound(name)
        return SimpleNamespace(id=have[name])

    def import_image_from_file(path, repository, tag, changes):
        have[f"{repository}:{tag}"] = f"sha256:{Path(path).name}"

    client = SimpleNamespace(images=SimpleNamespace(get=get),
                             api=SimpleNamespace(import_image_from_file=import_image_from_file))
    jammy = ensure_base_image(client=client, release=RELEASES["jammy"])
    assert jammy == f"sha256:rise-base-jammy-{RELEASES['jammy'].recipe_hash()}.tar"
    assert ensure_base_image(client=client).startswith("sha256:rise-base-bookworm-")  # the default release
    build_host.run.commands.clear()
    assert ensure_base_image(client=client, release=RELEASES["jammy"]) == jammy  # present: kept, nothing run
    assert sorted(have) == ["rise-base:bookworm", "rise-base:jammy"] and build_host.run.commands == []


# ---------------------------------------------------------------------------------------------- real


@pytest.mark.docker
@pytest.mark.timeout(2700)
def test_noble_base_is_built_and_has_python_3_12(monkeypatch):
    """debootstrap of Ubuntu noble from its archive (verified with the Ubuntu keyring), docker import, and its
    python3 is 3.12. Uses the machine's real cache: the image stays for the tasks that need it."""
    from trials.environments.images import docker_client, image_exists

    monkeypatch.undo()  # this one builds into the real cache, not the private one the fixture set
    if shutil.which("debootstrap") is None:
        pytest.skip("debootstrap is not installed (apt-get install debootstrap)")
    try:
        client = docker_client()
    except InfraError as exc:
        pytest.skip(f"no Docker engine: {exc}")
    noble = RELEASES["noble"]
    if not image_exists(client, noble.image):
        from trials.environments.keyrings import fetched_keyring

        try:
            releases.keyring_for(noble)
        except EnvironmentBuildError as exc:  # not a part scripts/setup.sh builds: minutes of Ubuntu's archive
            if fetched_keyring(images.ubuntu_keyring_dir()) is None:
                pytest.skip(f"optional: not built on this machine yet (`rise images base --release noble` fetches "
                            f"the keyring and builds it): {exc}")
    ensure_base_image(client=client, release=noble)
    version = client.containers.run(noble.image, ["python3", "--version"], remove=True).decode()
    assert version.startswith("Python 3.12."), version
    sources = client.containers.run(noble.image, ["cat", "/etc/apt/sources.list"], remove=True).decode()
    assert "noble main restricted universe multiverse" in sources, sources
