"""Static call graph of a harness package (``ast`` only), and implementing-function suggestions from it.

Edges are resolved the way a reader would: ``f()`` and ``mod.f()`` through the package's relative imports,
``self.m()`` in the class (and its package base classes), ``self.attr.m()`` through the type ``attr`` gets in
``__init__`` (``self.attr = Cls(...)``, an annotation, or an annotated parameter), ``Cls()`` to ``Cls.__init__``,
a local ``x = Cls(...)`` then ``x.m()``, and functions passed by reference (``parse_fn=parsing.parse_response``).
A module-level table of functions (``MECHANISMS = {"a": f, ...}``) links whoever uses the table to all of them.
A method call on an object of unknown type links to the package's only method of that name when there is exactly
one; such edges are marked ``by-name`` so a suggestion built on them reads as a guess.
"""

from __future__ import annotations

import ast
from collections import deque
from dataclasses import dataclass, field

from .model import Handbook
from .source import Definition, HarnessSource, Module

# Method names too common to link by name alone (they are mostly str/list/dict/file methods).
_GENERIC = {"get", "set", "append", "extend", "pop", "items", "keys", "values", "update", "copy", "close", "open",
            "read", "write", "join", "split", "strip", "format", "run", "start", "stop", "send", "add", "remove",
            "replace", "encode", "decode", "load", "loads", "dump", "dumps", "exec", "wait", "result", "call"}


@dataclass(frozen=True)
class Edge:
    caller: str
    callee: str
    how: str  # "call", "ref" (passed by reference), "table" (through a module-level table) or "by-name"


@dataclass
class CallGraph:
    """Who calls whom among the package's functions, by ``module:qualname``."""

    source: HarnessSource
    edges: dict[str, dict[str, Edge]] = field(default_factory=dict)

    @classmethod
    def build(cls, source: HarnessSource) -> CallGraph:
        graph = cls(source)
        methods_by_name: dict[str, list[str]] = {}
        for ref, definition in source.definitions().items():
            if definition.class_name:
                methods_by_name.setdefault(definition.node.name, []).append(ref)
        registries = {m.name: _registries(source, m) for m in source.modules.values()}
        for module in source.modules.values():
            attr_types = _attribute_types(source, module)
            for definition in module.functions.values():
                graph.edges[definition.ref] = {}
                _Resolver(source, module, definition, attr_types, methods_by_name, graph, registries).run()
        return graph

    def add(self, caller: str, callee: str, how: str) -> None:
        if caller == callee:
            return
        known = self.edges.setdefault(caller, {})
        old = known.get(callee)
        # a certain edge beats a guessed one
        if old is None or (old.how == "by-name" and how != "by-name"):
            known[callee] = Edge(caller, callee, how)

    def callees(self, ref: str) -> list[Edge]:
        return sorted(self.edges.get(ref, {}).values(), key=lambda e: e.callee)

    def callers(self, ref: str) -> list[Edge]:
        return sorted((e for out in self.edges.values() for e in out.values() if e.callee == ref),
                      key=lambda e: e.caller)

    def reachable(self, entries: list[str], stop: set[str] | None = None,
                  depth: int | None = None) -> dict[str, list[str]]:
        """Functions reachable from ``entries``: each with the call path that reaches it first (BFS).

        Functions in ``stop`` are reported when reached but not entered.
        """
        stop = stop or set()
        paths: dict[str, list[str]] = {e: [e] for e in entries if e in self.edges}
        queue = deque(paths)
        while queue:
            ref = queue.popleft()
            if (ref in stop and ref not in entries) or (depth is not None and len(paths[ref]) > depth):
                continue
            for edge in self.callees(ref):
                if edge.callee not in paths:
                    paths[edge.callee] = paths[ref] + [edge.callee]
                    queue.append(edge.callee)
        return paths


def _registries(source: HarnessSource, module: Module) -> dict[str, list[str]]:
    """Module-level tables of functions (``MECHANISMS = {"pairwise": pairwise, ...}``): name -> functions."""
    out: dict[str, list[str]] = {}
    if module.tree is None:
        return out
    for node in module.tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else (
            node.target if isinstance(node, ast.AnnAssign) else None)
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if not isinstance(target, ast.Name) or value is None:
            continue
        items = value.values if isinstance(value, ast.Dict) else (
            value.elts if isinstance(value, ast.List | ast.Tuple | ast.Set) else [])
        refs = []
        for item in items:
            if isinstance(item, ast.Name):
                if item.id in module.functions:
                    refs.append(f"{module.name}:{item.id}")
                elif item.id in module.imports and module.imports[item.id][1]:
                    res = source.resolve("{}:{}".format(*module.imports[item.id]))
                    if res.definition:
                        refs.append(res.definition.ref)
        if refs:
            out[target.id] = refs
    return out


def _attribute_types(source: HarnessSource, module: Module) -> dict[str, dict[str, str]]:
    """For each class of ``module``: attribute name -> ``module:Class`` it holds, when the code says so."""
    out: dict[str, dict[str, str]] = {}
    for cls_name, cls in module.classes.items():
        types: dict[str, str] = {}
        for node in cls.body:  # class-level annotations (dataclasses, pydantic)
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                ref = _annotation_class(source, module, node.annotation)
                if ref:
                    types[node.target.id] = ref
        for node in cls.body:
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            params = {a.arg: a.annotation for a in node.args.args + node.args.kwonlyargs if a.annotation}
            for stmt in ast.walk(node):
                targets: list[ast.expr] = []
                value: ast.expr | None = None
                annotation: ast.expr | None = None
                if isinstance(stmt, ast.Assign):
                    targets, value = stmt.targets, stmt.value
                elif isinstance(stmt, ast.AnnAssign):
                    targets, value, annotation = [stmt.target], stmt.value, stmt.annotation
                for target in targets:
                    if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                            and target.value.id == "self"):
                        continue
                    ref = None
                    if annotation is not None:
                        ref = _annotation_class(source, module, annotation)
                    if ref is None and isinstance(value, ast.Call):
                        ref = _call_type(source, module, value)
                    if ref is None and isinstance(value, ast.Name) and value.id in params:
                        ref = _annotation_class(source, module, params[value.id])
                    if ref:
                        types.setdefault(target.attr, ref)
        out[cls_name] = types
    return out


def _call_type(source: HarnessSource, module: Module, call: ast.Call) -> str | None:
    """The package class a call returns: ``Cls(...)``, or a package function annotated ``-> Cls``."""
    ref = source.class_ref(module, call.func)
    if ref is not None:
        return ref
    func: str | None = None
    if isinstance(call.func, ast.Name):
        if call.func.id in module.functions:
            func = f"{module.name}:{call.func.id}"
        elif call.func.id in module.imports and module.imports[call.func.id][1]:
            func = "{}:{}".format(*module.imports[call.func.id])
    elif (isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)
          and call.func.value.id in module.imports and module.imports[call.func.value.id][1] is None):
        func = f"{module.imports[call.func.value.id][0]}:{call.func.attr}"
    if func is None:
        return None
    res = source.resolve(func)
    if res.definition is None or res.definition.node.returns is None:
        return None
    home = source.modules[res.definition.module]
    return _annotation_class(source, home, res.definition.node.returns)


def _annotation_class(source: HarnessSource, module: Module, annotation: ast.expr) -> str | None:
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(annotation, ast.BinOp):  # Foo | None
        return _annotation_class(source, module, annotation.left) or _annotation_class(
            source, module, annotation.right)
    if isinstance(annotation, ast.Subscript):  # Optional[Foo]
        return _annotation_class(source, module, annotation.slice)
    return source.class_ref(module, annotation)


class _Resolver(ast.NodeVisitor):
    """Finds the package functions one definition calls or refers to."""

    def __init__(self, source: HarnessSource, module: Module, definition: Definition,
                 attr_types: dict[str, dict[str, str]], methods_by_name: dict[str, list[str]], graph: CallGraph,
                 registries: dict[str, dict[str, list[str]]]):
        self.source, self.module, self.definition = source, module, definition
        self.registries = registries
        self.attr_types, self.methods_by_name, self.graph = attr_types, methods_by_name, graph
        self.locals: dict[str, str] = {}  # local variable -> module:Class
        self.seen_calls: set[int] = set()

    def run(self) -> None:
        node = self.definition.node
        for stmt in ast.walk(node):
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
                ref = _call_type(self.source, self.module, stmt.value)
                for target in stmt.targets:
                    if ref and isinstance(target, ast.Name):
                        self.locals[target.id] = ref
        for stmt in node.body:
            self.visit(stmt)

    def visit_Call(self, node: ast.Call) -> None:
        self.seen_calls.add(id(node.func))
        self._link(node.func, "call")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load) and id(node) not in self.seen_calls:
            self._link(node, "ref", guess=False)
        if isinstance(node.ctx, ast.Load):
            for ref in self._registry(node):
                self.graph.add(self.definition.ref, ref, "table")

    def _registry(self, node: ast.Name) -> list[str]:
        """Functions of a module-level table this name refers to (a call through it may reach any)."""
        own = self.registries.get(self.module.name, {})
        if node.id in own:
            return own[node.id]
        target = self.module.imports.get(node.id)
        if target and target[1]:
            return self.registries.get(target[0], {}).get(target[1], [])
        return []

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.ctx, ast.Load) and id(node) not in self.seen_calls:
            self._link(node, "ref", guess=False)
        self.generic_visit(node)

    def _owner_class(self) -> str | None:
        return self.definition.class_name

    def _method(self, class_ref: str, name: str) -> str | None:
        res = self.source.resolve(f"{class_ref}.{name}")
        return res.definition.ref if res.definition else None

    def _link(self, expr: ast.expr, how: str, guess: bool = True) -> None:
        target = self._target(expr, guess)
        if target:
            ref, certain = target
            self.graph.add(self.definition.ref, ref, how if certain else "by-name")

    def _target(self, expr: ast.expr, guess: bool) -> tuple[str, bool] | None:
        module = self.module
        if isinstance(expr, ast.Name):
            if expr.id in module.functions and "." not in expr.id:
                return f"{module.name}:{expr.id}", True
            cls_ref = self.source.class_ref(module, expr)
            if cls_ref:
                init = self._method(cls_ref, "__init__")
                return (init, True) if init else None
            if expr.id in module.imports:
                mod, name = module.imports[expr.id]
                if name:
                    res = self.source.resolve(f"{mod}:{name}")
                    if res.definition:
                        return res.definition.ref, True
            return None
        if not isinstance(expr, ast.Attribute):
            return None
        value, attr = expr.value, expr.attr
        owner_cls: str | None = None
        if isinstance(value, ast.Name):
            if value.id in ("self", "cls") and self._owner_class():
                owner_cls = f"{module.name}:{self._owner_class()}"
            elif value.id in self.locals:
                owner_cls = self.locals[value.id]
            elif value.id in module.imports and module.imports[value.id][1] is None:
                res = self.source.resolve(f"{module.imports[value.id][0]}:{attr}")
                return (res.definition.ref, True) if res.definition else None
            else:
                owner_cls = self.source.class_ref(module, value)
        elif (isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name)
              and value.value.id == "self" and self._owner_class()):
            owner_cls = self.attr_types.get(self._owner_class() or "", {}).get(value.attr)
        if owner_cls:
            found = self._method(owner_cls, attr)
            if found:
                return found, True
            if isinstance(value, ast.Name) and value.id in ("self", "cls"):
                return None  # an attribute of self that is not a method (data)
        if guess and attr not in _GENERIC and not attr.startswith("__"):
            candidates = self.methods_by_name.get(attr, [])
            if len(candidates) == 1:
                return candidates[0], False
        return None


# -- suggestions ----------------------------------------------------------------------------------------------


@dataclass
class Suggestion:
    behaviour: str
    add: list[tuple[str, list[str]]]  # function, call path from one of the behaviour's functions
    calls_into: list[tuple[str, str]]  # functions of other behaviours it reaches: (function, behaviour id)


def suggest(handbook: Handbook, source: HarnessSource, behaviour_id: str | None = None,
            depth: int | None = None, graph: CallGraph | None = None) -> list[Suggestion]:
    """Per behaviour: functions its own functions reach that no behaviour claims yet (to add), and the
    functions of other behaviours it calls into (the boundary of its responsibility)."""
    graph = graph or CallGraph.build(source)
    owner: dict[str, str] = {}
    for _, b in handbook.iter_behaviours():
        for ref in b.functions:
            res = source.resolve(ref)
            owner.setdefault(res.definition.ref if res.definition else ref, b.id)
    out = []
    for _, behaviour in handbook.iter_behaviours():
        if behaviour_id and behaviour.id != behaviour_id:
            continue
        own = []
        for ref in behaviour.functions:
            res = source.resolve(ref)
            if res.definition:
                own.append(res.definition.ref)
        others = {ref for ref, b in owner.items() if b != behaviour.id}
        paths = graph.reachable(own, stop=others, depth=depth)
        add = [(ref, path) for ref, path in paths.items() if ref not in owner and ref not in own]
        into = [(ref, owner[ref]) for ref in paths if ref in others]
        out.append(Suggestion(behaviour.id, sorted(add), sorted(into)))
    return out


def unclaimed(handbook: Handbook, source: HarnessSource) -> list[str]:
    """Functions of the package that no behaviour lists (candidates for a Handbook entry, or dead code)."""
    claimed = set()
    for _, b in handbook.iter_behaviours():
        for ref in b.functions:
            res = source.resolve(ref)
            claimed.add(res.definition.ref if res.definition else ref)
    return sorted(ref for ref in source.definitions() if ref not in claimed)
