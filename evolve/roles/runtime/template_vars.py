"""What a role's template reads, and whether its input model declares it.

:func:`template_reads` walks a template's jinja2 syntax tree and lists every path it reads from its variables:
``proposal.tier``, ``findings[].wish`` (``[]``: an item of a list the template loops over), ``group``.
:func:`uncovered` lists the paths the role's input model does not declare, or declares without a type that says
what lies below (``dict[str, Any]``): a template reading such a path would fail at render time, or print empty
text, on inputs the model let through. The runtime's own variables (``inputs``, ``workspace``) are not the
model's to declare.
"""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import meta, nodes
from pydantic import BaseModel

from evolve.roles.runtime.role import Role

RUNTIME_VARIABLES = frozenset({"inputs", "workspace"})  # render_prompts passes them to every role template
ITEM = "[]"


def _parse(template: Path) -> nodes.Template:
    return jinja2.Environment().parse(template.read_text(encoding="utf-8"))


def template_variables(template: Path) -> set[str]:
    """The top-level variables ``template`` reads (jinja2's own analysis), less the runtime's."""
    return meta.find_undeclared_variables(_parse(template)) - RUNTIME_VARIABLES


def template_reads(template: Path) -> set[tuple[str, ...]]:
    """Every path the template reads from its variables (see the module docstring)."""
    top = template_variables(template)
    found: set[tuple[str, ...]] = set()
    _visit(_parse(template), {name: (name,) for name in top}, found)
    return found


def _path(node: nodes.Node, env: dict[str, tuple[str, ...]]) -> tuple[str, ...] | None:
    """The path an expression reads (``a.b``, ``a["b"]``, a loop variable's item path), or None."""
    if isinstance(node, nodes.Name):
        return env.get(node.name)
    if isinstance(node, nodes.Getattr):
        base = _path(node.node, env)
        return base + (node.attr,) if base is not None else None
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
        base = _path(node.node, env)
        return base + (node.arg.value,) if base is not None else None
    return None


def _visit(node: nodes.Node, env: dict[str, tuple[str, ...]], found: set[tuple[str, ...]]) -> None:
    if isinstance(node, nodes.For):
        _visit(node.iter, env, found)
        inner = dict(env)
        source = _path(node.iter, env)
        if isinstance(node.target, nodes.Name) and source is not None:
            inner[node.target.name] = source + (ITEM,)
        for child in [*node.body, *node.else_, *([node.test] if node.test else [])]:
            _visit(child, inner, found)
        return
    path = _path(node, env)
    if path is not None:
        if path[-1] != ITEM:  # a bare loop variable reads what its loop's source already names
            found.add(path)
        return
    for child in node.iter_child_nodes():
        _visit(child, env, found)


def _unwrap(annotation: Any) -> Any:
    """``X | None`` and ``Annotated[X, ...]`` as ``X``."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _unwrap(args[0]) if len(args) == 1 else annotation
    return annotation


def _problem(model: type[BaseModel], path: tuple[str, ...]) -> str | None:
    """Why ``model`` does not declare ``path`` (None: it does)."""
    current: Any = model
    for i, part in enumerate(path):
        current = _unwrap(current)
        where = ".".join(path[:i]) or model.__name__
        if part == ITEM:
            if typing.get_origin(current) not in (list, tuple, set):
                return f"{where} is looped over but is not a list"
            current = typing.get_args(current)[0] if typing.get_args(current) else Any
            continue
        if isinstance(current, type) and issubclass(current, BaseModel):
            if part not in current.model_fields:
                return f"{current.__name__} has no field {part!r}"
            current = current.model_fields[part].annotation
            continue
        return f"{where} is {getattr(current, '__name__', current)!s}: nothing declares its {part!r}"
    return None


def uncovered(role: Role) -> list[str]:
    """What ``role``'s template reads that its input model does not declare, one line each (empty: all of it)."""
    if role.inputs is None:
        return [f"role {role.name} has no input model"]
    out = []
    for path in sorted(template_reads(role.template)):
        problem = _problem(role.inputs, path)
        if problem:
            out.append(f"{'.'.join(path).replace('.[]', '[]')}: {problem}")
    return out
