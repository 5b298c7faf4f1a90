"""Draw the project's structure from its imports: which packages use which, the import circles between modules, and
the size table (files over 400 lines, functions over 60 lines).

    python3 scripts/structure.py            # the whole drawing
    python3 scripts/structure.py --cycles   # only the circles (exit status 1 when there is one)

Every import counts, at module level or inside a function, except those under ``if TYPE_CHECKING:``: a circle
that a function-level import hides at run time is still a circle for a reader.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("trials", "harness_seed", "monitor", "handbook", "research", "validate", "evolve", "rise")
FILE_LIMIT = 400
FUNCTION_LIMIT = 60


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the product packages."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        base = root / package
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            if "__pycache__" in path.parts or "templates" in path.relative_to(base).parts:
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", "")
            if name == "TYPE_CHECKING":
                for child in node.body:
                    for sub in ast.walk(child):
                        if hasattr(sub, "lineno"):
                            lines.add(sub.lineno)
    return lines


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The longest known module that ``name`` names or lies inside."""
    while name:
        if name in known:
            return name
        if "." not in name:
            return None
        name = name.rsplit(".", 1)[0]
    return None


def imports(known: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """Module -> the project modules it imports (edges to a package's ``__init__`` count as edges to it)."""
    known = known if known is not None else modules()
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        hidden = _type_checking_lines(tree)
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) in hidden:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    prefix = ".".join(base + ([node.module] if node.module else []))
                else:
                    prefix = node.module or ""
                targets = [f"{prefix}.{alias.name}" for alias in node.names] + [prefix]
                # "from pkg import mod" names the module; "from pkg.mod import thing" names pkg.mod
                targets = [t for t in targets if t]
            for target in targets:
                hit = _resolve(target, known)
                if hit and hit != name:
                    graph[name].add(hit)
        # "from x import y" where y is an attribute resolves to x; both the module and x were added, which is
        # what an import does (it runs x's __init__ too)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted, largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found, key=lambda c: (-len(c), c))


def package_edges(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for source, targets in graph.items():
        for target in targets:
            a, b = source.split(".")[0], target.split(".")[0]
            if a != b:
                edges[a].add(b)
    return edges


ROOFS = ("evolve.roles",)  # folders that only group rooms: each of their children is a room of its own


def room(module: str) -> str:
    """The room a module lives in: its first-level subpackage or module (``trials.environments``, ``evolve.loop``),
    or one level deeper under a roof (``evolve.roles.analysis``)."""
    parts = module.split(".")
    for roof in ROOFS:
        if module.startswith(roof + "."):
            return ".".join(parts[: len(roof.split(".")) + 1])
    return ".".join(parts[:2])


def room_edges(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Edges between the rooms of one package (a subpackage using another, or a top-level module)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for source, targets in graph.items():
        for target in targets:
            a, b = room(source), room(target)
            if source.split(".")[0] == target.split(".")[0] and a != b and "." in a and "." in b:
                edges[a].add(b)
    return edges


def sizes(known: dict[str, Path]) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    files, functions = [], []
    for path in known.values():
        text = path.read_text()
        count = len(text.splitlines())
        rel = str(path.relative_to(ROOT))
        if count > FILE_LIMIT:
            files.append((rel, count))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > FUNCTION_LIMIT:
                    functions.append((f"{rel}:{node.name}", length))
    return sorted(files, key=lambda x: -x[1]), sorted(functions, key=lambda x: -x[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", action="store_true", help="print only the import circles")
    args = parser.parse_args(argv)
    known = modules()
    graph = imports(known)
    between_modules = cycles(graph)
    circles = between_modules + [c for c in cycles(room_edges(graph)) if c not in between_modules]
    if not args.cycles:
        print(f"{len(known)} modules in {len([p for p in PACKAGES if (ROOT / p).is_dir()])} packages")
        print("\npackages (who imports whom):")
        for package, targets in sorted(package_edges(graph).items()):
            print(f"  {package:13} -> {', '.join(sorted(targets))}")
        files, functions = sizes(known)
        print(f"\nfiles over {FILE_LIMIT} lines: {len(files)}")
        for rel, count in files:
            print(f"  {count:5}  {rel}")
        print(f"\nfunctions over {FUNCTION_LIMIT} lines: {len(functions)}")
        for rel, count in functions:
            print(f"  {count:5}  {rel}")
    print(f"\nimport circles (between modules, then between the rooms of a package): {len(circles)}")
    for circle in circles:
        print("  " + " <-> ".join(circle))
    return 1 if circles else 0


if __name__ == "__main__":
    raise SystemExit(main())
