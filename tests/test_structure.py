"""No import circles (issue 31): not between packages, not between the modules of one package.

The measure is scripts/structure.py (every import counts, module level or inside a function, except under
``if TYPE_CHECKING:``), loaded by path as a reader runs it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _structure():
    spec = importlib.util.spec_from_file_location("structure_script", ROOT / "scripts" / "structure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_import_circle_between_modules():
    structure = _structure()
    circles = structure.cycles(structure.imports())
    assert not circles, "import circles:\n" + "\n".join("  " + " <-> ".join(c) for c in circles)


def test_no_circle_between_the_rooms_of_a_package():
    """A room (``evolve/round/``, ``trials/environments/``, a top-level module) may use another only one way."""
    structure = _structure()
    circles = structure.cycles(structure.room_edges(structure.imports()))
    assert not circles, "room circles:\n" + "\n".join("  " + " <-> ".join(c) for c in circles)


def test_the_packages_depend_one_way():
    structure = _structure()
    edges = structure.package_edges(structure.imports())
    graph = {package: set(targets) for package, targets in edges.items()}
    circles = structure.cycles(graph)
    shown = "\n".join(f"  {a} -> {', '.join(sorted(graph[a]))}" for c in circles for a in c)
    assert not circles, "package circles: " + "; ".join(" <-> ".join(c) for c in circles) + "\n" + shown


def test_the_measure_sees_a_circle(tmp_path):
    """The checks above cannot pass vacuously: two modules importing each other, at module level or inside a
    function, are a circle; one hidden under TYPE_CHECKING is not."""
    structure = _structure()
    pkg = tmp_path / "trials"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from trials import b\n")
    (pkg / "b.py").write_text("def f():\n    from trials.a import x\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from trials import a\n")
    (pkg / "d.py").write_text("from trials import c\n")
    graph = structure.imports(structure.modules(tmp_path))
    assert structure.cycles(graph) == [["trials.a", "trials.b"]]
    assert structure.room("evolve.roles.analysis.pairs") == "evolve.roles.analysis"
    assert structure.room("evolve.round.controller") == "evolve.round"
