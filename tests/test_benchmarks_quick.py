"""Every benchmark under benchmarks/ runs in its ``--quick`` mode and exits 0, so one that no longer imports or
crashes fails CI instead of rotting until someone runs it by hand. Benchmarks are found by glob (a new one is
covered without editing this file); modules whose names start with ``_`` are shared support, not benchmarks.
Benchmarks import the package and ``benchmarks/_support.py`` only, never ``tests``.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
MISSING_PART = 77  # benchmarks/_support.py: a part the benchmark needs (bwrap, tmux) is missing
QUICK_TIMEOUT_SEC = 180


def benchmark_scripts(folder: Path = BENCHMARKS) -> list[Path]:
    """The benchmark scripts in ``folder``: every ``*.py`` but shared support modules (``_*.py``)."""
    return sorted(p for p in folder.glob("*.py") if not p.name.startswith("_"))


def run_quick(script: Path, timeout: float = QUICK_TIMEOUT_SEC) -> subprocess.CompletedProcess:
    """``python <script> --quick`` from the repository root, as a user would run it."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}  # this checkout, whatever is installed
    return subprocess.run([sys.executable, str(script), "--quick"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def check_quick_run(script: Path) -> None:
    """Fail with the benchmark's output unless its quick run exits 0; skip (with the reason) on a missing part."""
    proc = run_quick(script)
    if proc.returncode == MISSING_PART:
        pytest.skip(f"{script.name}: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'a part'}")
    assert proc.returncode == 0, (f"{script.name} --quick exited {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}"
                                  f"\n--- stderr\n{proc.stderr[-6000:]}")
    assert proc.stdout.strip(), f"{script.name} --quick printed nothing"


def imported_modules(script: Path) -> set[str]:
    """Top-level names of every module ``script`` imports (anywhere in the file)."""
    names = set()
    for node in ast.walk(ast.parse(script.read_text(), filename=str(script))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_benchmarks_are_found():
    names = {p.name for p in benchmark_scripts()}
    assert {"monitor_overhead.py", "verification.py", "seed_overhead.py"} <= names
    assert "_support.py" not in names


@pytest.mark.parametrize("script", benchmark_scripts(BENCHMARKS), ids=lambda p: p.stem)
def test_benchmark_imports_no_test_module(script):
    assert "tests" not in imported_modules(script), f"{script.name} imports from tests/: move the shared part"


def _part_marks(script: Path) -> list:
    """The heavy shared part a benchmark's quick run starts: a local Ray cluster (``ray_*``) or real bundled model
    servers (``ServerProcess.bundled``, as inference.py does)."""
    if script.stem.startswith("ray_"):
        return [pytest.mark.ray]
    return [pytest.mark.model] if "ServerProcess.bundled(" in script.read_text() else []


def _quick_params() -> list:
    """One case per benchmark, marked with the part it starts, so ``-m "not ray"`` / ``-m "not model"`` keep it out
    as they do the Ray and model tests, and under xdist it runs on that part's worker (tests/xdist_groups.py):
    the inference benchmark's two llama-servers never beside a model test's, whose turn limits assume a server
    with the machine to itself."""
    return [pytest.param(p, marks=_part_marks(p), id=p.stem) for p in benchmark_scripts(BENCHMARKS)]


@pytest.mark.parametrize("script", _quick_params())
def test_benchmark_quick_mode_runs(script):
    check_quick_run(script)


def test_a_broken_benchmark_fails_the_check(tmp_path):
    # What CI would meet if a benchmark's import were renamed away: the check must fail, not skip or pass.
    broken = tmp_path / "broken_bench.py"
    broken.write_text("from trials.endpoints.scripted import NoSuchServer\n")
    assert benchmark_scripts(tmp_path) == [broken]
    with pytest.raises(AssertionError, match="ImportError"):
        check_quick_run(broken)
    (tmp_path / "_helper.py").write_text("raise SystemExit(1)\n")
    assert benchmark_scripts(tmp_path) == [broken]


def _load_benchmark(name: str, monkeypatch):
    """Import benchmarks/<name>.py as a module (its sibling ``_support`` on the path, as when run)."""
    import importlib.util

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # a dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_monitor_overhead_states_only_what_it_compared(monkeypatch, capsys):
    # It used to call the instrumented-minus-bare wall difference "noise" whatever its size (issue 15, item 11).
    bench = _load_benchmark("monitor_overhead", monkeypatch)

    def run(wall: float, spans: int = 100, hooks: float = 0.002, writer: float = 0.001) -> dict:
        return {"wall": wall, "spans": spans, "hooks_sec": hooks, "hook_calls": 2 * spans, "writer_sec": writer}

    sdk = [run(1.0, hooks=0.010, writer=0.0)]
    bench.report_trial({"bare": [run(1.0), run(1.1)], "sdk": sdk, "monitor": [run(3.0)]})
    out = capsys.readouterr().out
    assert "outside the 0.10 s spread of the bare rounds" in out and "noise" not in out
    bench.report_trial({"bare": [run(1.0), run(1.1)], "sdk": sdk, "monitor": [run(1.05)]})
    assert "within the 0.10 s spread" in capsys.readouterr().out
    # 30 µs per span against a 100 µs SDK span: met in µs and as a ratio; 300 µs: neither
    bench.report_trial({"bare": [run(1.0)], "sdk": sdk, "monitor": [run(1.0, hooks=0.002, writer=0.001)]})
    out = capsys.readouterr().out
    assert "30.0 µs per span" in out and "≤ 30 µs per span: met" in out and "): met" in out
    bench.report_trial({"bare": [run(1.0)], "sdk": sdk, "monitor": [run(1.0, hooks=0.02, writer=0.01)]})
    out = capsys.readouterr().out
    assert "NOT met in µs" in out and "): NOT met" in out


def test_inference_reports_each_arm_against_the_first(monkeypatch, capsys):
    bench = _load_benchmark("inference", monkeypatch)
    today, prefix = bench.Arm("today"), bench.Arm("prefix", warm_prefix=True)
    for value in (10.0, 12.0, 11.0):
        today.add("first_cold_s", value)
    prefix.add("first_cold_s", 2.2)
    prefix.add("warm_prefix_s", 8.0)
    bench.report([today, prefix], {"first": [6.1, 6.5]})
    out = capsys.readouterr().out
    first = next(line for line in out.splitlines() if line.startswith("first_cold_s"))
    assert "11.00" in first and "2.20" in first and "0.20x" in first  # medians, ratio to the first arm
    assert next(line for line in out.splitlines() if line.startswith("warm_prefix_s")).rstrip().endswith("—")
    assert "first 6.1–6.5" in out  # the load beside the figures
    with pytest.raises(SystemExit, match="unknown arm"):
        bench.arms_for(["today", "fast"], "qwen2.5-coder-0.5b")
