"""The prompt tier: a candidate that changes only the text of prompt templates, each of which must still render
with the variables the harness passes it.

Which variables: the harness's own call sites, read with ``ast`` (never imported: a harness is untrusted). A call
``render("summary", instruction=...)`` or ``render("pairwise.j2", task=..., a=...)`` passes those keyword names to
``summary.j2`` / ``pairwise.j2``; an f-string name (``f"prompt_{fmt}"``) matches every template it can spell.

The check of a candidate (:func:`check_prompt_candidate`):

1. only ``*.j2`` files changed (a prompt-tier candidate carries no code, settings or Handbook change);
2. every changed template parses, and uses no variable that its call sites do not pass;
3. every template of a changed folder that the harness renders is rendered, in jinja2's sandbox with the
   harness's strict undefined, with a stand-in value for each variable its call sites pass. A template whose
   incumbent version does not render with stand-ins either (it reads structures a stand-in cannot imitate) is
   held to steps 1 and 2 only, and the report says so.
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path
from typing import Any, Self

import jinja2
from jinja2 import meta
from jinja2.sandbox import SandboxedEnvironment

SUFFIX = ".j2"


def prompt_templates(harness: str | Path) -> list[str]:
    """The prompt templates of the harness at ``harness``, as paths relative to it."""
    root = Path(harness)
    return sorted(str(p.relative_to(root)) for p in root.rglob(f"*{SUFFIX}")
                  if "contracts" not in p.relative_to(root).parts and not p.name.startswith("."))


class _Sites(ast.NodeVisitor):
    """``render(NAME, **kw)`` call sites and ``X.filters["name"] = ...`` registrations of one module."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, set[str] | None]] = []  # (name pattern, keywords; None: a ** splat)
        self.filters: set[str] = set()

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name == "render" and node.args:
            pattern = _pattern(node.args[0])
            if pattern:
                kws = {k.arg for k in node.keywords if k.arg}
                self.calls.append((pattern, None if any(k.arg is None for k in node.keywords) else kws))
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            if (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute)
                    and target.value.attr == "filters" and isinstance(target.slice, ast.Constant)):
                self.filters.add(str(target.slice.value))
        self.generic_visit(node)


def _pattern(arg: ast.expr) -> str:
    """The template name a call's first argument spells (``*`` for the parts an f-string fills in)."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        name = arg.value
    elif isinstance(arg, ast.JoinedStr):
        name = "".join(v.value if isinstance(v, ast.Constant) else "*" for v in arg.values)
    else:
        return ""
    return name if name.endswith(SUFFIX) else name + SUFFIX


def harness_sites(harness: str | Path) -> tuple[dict[str, set[str] | None], set[str]]:
    """Template file name -> the variables its call sites pass (None: unknown, a ``**`` splat), and the custom
    filter names the harness registers."""
    root = Path(harness)
    sites = _Sites()
    for path in sorted(root.rglob("*.py")):
        try:
            sites.visit(ast.parse(path.read_text(), str(path)))
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue  # the smoke check reports a module that does not parse
    names = {Path(t).name for t in prompt_templates(root)}
    out: dict[str, set[str] | None] = {}
    for pattern, kws in sites.calls:
        for name in names:
            if fnmatch.fnmatchcase(name, pattern):
                known = out.get(name, set())
                out[name] = None if kws is None or (name in out and known is None) else {*(known or set()), *kws}
    return out, sites.filters


class _Stand(str):
    """A stand-in value: prints as its name, and reads as a list, a record or a number where a template asks."""

    def __new__(cls, name: str) -> Self:
        return super().__new__(cls, f"<{name}>")

    def __getattr__(self, item: str) -> _Stand:
        if item.startswith("_"):
            raise AttributeError(item)
        return _Stand(item)

    def __getitem__(self, item: Any) -> _Stand:  # type: ignore[override]
        return _Stand(str(item))

    def __iter__(self):  # type: ignore[override]
        return iter([_Stand("item")])

    def __int__(self) -> int:
        return 1

    def __float__(self) -> float:
        return 1.0


def _env(folder: Path, filters: set[str]) -> jinja2.Environment:
    env = SandboxedEnvironment(loader=jinja2.FileSystemLoader(str(folder)), undefined=jinja2.StrictUndefined,
                               trim_blocks=True, autoescape=False)
    env.filters.update({f: (lambda value, *a, **k: str(value)) for f in filters if f not in env.filters})
    return env


def _render(folder: Path, name: str, variables: set[str], filters: set[str]) -> str | None:
    """None when ``folder/name`` renders with stand-ins for ``variables``, else the error."""
    try:
        _env(folder, filters).get_template(name).render({v: _Stand(v) for v in variables})
    except Exception as exc:  # noqa: BLE001 - any failure of an untrusted template is the finding
        return f"{type(exc).__name__}: {exc}"
    return None


def check_prompt_candidate(incumbent: str | Path, candidate: str | Path,
                           changed: list[str]) -> tuple[list[str], list[str]]:
    """(problems, notes) of a prompt-tier candidate whose ``changed`` files (relative to the harness) differ from
    the incumbent's; a problem refuses the candidate and names the file."""
    inc, cand = Path(incumbent), Path(candidate)
    problems: list[str] = []
    notes: list[str] = []
    code = [f for f in changed if not f.endswith(SUFFIX)]
    if code:
        problems.append(f"a prompt-tier candidate may change only prompt templates (*{SUFFIX}); it changed "
                        f"{', '.join(code)}")
    sites, filters = harness_sites(inc)
    templates = [f for f in changed if f.endswith(SUFFIX)]
    broken: set[str] = set()
    if not templates:
        problems.append("a prompt-tier candidate must change a prompt template; it changed none")
    for rel in templates:
        path = cand / rel
        if not path.is_file():
            problems.append(f"{rel}: the prompt tier may edit templates, not remove them")
            continue
        try:
            used = meta.find_undeclared_variables(_env(path.parent, filters).parse(path.read_text()))
        except jinja2.TemplateSyntaxError as exc:  # an unknown filter or test too (TemplateAssertionError)
            problems.append(f"{rel}: not a valid template (line {exc.lineno}: {exc.message})")
            broken.add(rel)
            continue
        passed = sites.get(path.name)
        if passed is not None and used - passed:
            problems.append(f"{rel}: uses {', '.join(sorted(used - passed))}, which the harness does not pass "
                            f"(it passes: {', '.join(sorted(passed)) or 'nothing'})")
    for folder in sorted({str(Path(t).parent) for t in templates}):
        for name, passed in sorted(sites.items()):
            if passed is None or not (cand / folder / name).is_file() or str(Path(folder) / name) in broken:
                continue
            error = _render(cand / folder, name, passed, filters)
            if error is None:
                continue
            if (inc / folder / name).is_file() and _render(inc / folder, name, passed, filters) is not None:
                notes.append(f"{folder}/{name}: not rendered with stand-ins (the incumbent's does not render "
                             "with them either); checked for syntax and variables only")
                continue
            problems.append(f"{folder}/{name}: does not render with the variables the harness passes "
                            f"({', '.join(sorted(passed)) or 'none'}): {error}")
    return problems, notes
