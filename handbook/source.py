"""A harness package read as source text, never imported: its modules, definitions, settings and recording config.

Everything the Handbook checks against code goes through :class:`HarnessSource`, which can be read from a
directory or from a git revision (GitPython), so two versions of a harness compare the same way whether they sit
in two folders or in two commits of an experiment's harness repository.
"""

from __future__ import annotations

import ast
import difflib
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trials import harness_settings

from .model import FUNCTION_REF, HANDBOOK_FILE, Handbook, HandbookError, loads_handbook

SETTINGS_FILE = harness_settings.SETTINGS_FILE
RECORDING_FILE = "recording.toml"
_SKIP_DIRS = {"__pycache__", "tests", ".git"}
_WANTED = {SETTINGS_FILE, RECORDING_FILE, HANDBOOK_FILE}
# Keys under which a recording config may list its boundaries (the monitor's format, read tolerantly).
_BOUNDARY_KEYS = ("boundaries", "boundary", "spans", "span")
_BOUNDARY_FIELDS = ("function", "target", "qualname", "boundary", "ref", "name", "path")


@dataclass
class Definition:
    """A function or method defined in the package."""

    module: str
    qualname: str
    node: ast.FunctionDef | ast.AsyncFunctionDef
    file: str
    class_name: str | None = None  # qualname of the enclosing class for methods

    @property
    def ref(self) -> str:
        return f"{self.module}:{self.qualname}"

    @property
    def kind(self) -> str:
        is_async = isinstance(self.node, ast.AsyncFunctionDef)
        return ("async " if is_async else "") + ("method" if self.class_name else "function")

    def fingerprint(self) -> str:
        """The function's syntax tree without positions: changes of layout and comments do not count."""
        return ast.dump(self.node, include_attributes=False)


@dataclass
class Module:
    """One module of the package: ``name`` is dotted and relative (``midharness.actor``)."""

    name: str
    file: str
    tree: ast.Module | None
    error: str | None = None
    functions: dict[str, Definition] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    # local name -> (module, name) for names imported from inside the package; name None = a module itself
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)


@dataclass
class Resolution:
    """Result of looking up ``module:qualname``: the definition, or why there is none."""

    ref: str
    definition: Definition | None
    problem: str | None = None


def _module_name(relpath: str) -> str:
    parts = relpath[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str | None:
    """The package-relative module an import ``from {'.'*level}{target} import ...`` in ``module`` names."""
    parts = module.split(".") if module else []
    base = parts if is_package else parts[:-1]
    if level - 1 > len(base):
        return None  # goes above the harness package
    base = base[: len(base) - (level - 1)]
    if target:
        base = base + target.split(".")
    return ".".join(base)


class HarnessSource:
    """The files of one harness version, parsed lazily into modules and definitions."""

    def __init__(self, name: str, files: dict[str, str], origin: str):
        self.name = name  # the package's directory name (harness_seed, harness, ...)
        self.files = files  # relative path -> text
        self.origin = origin  # where it was read from, for messages
        self.modules: dict[str, Module] = {}
        for relpath in sorted(p for p in files if p.endswith(".py")):
            self.modules[_module_name(relpath)] = self._parse_module(relpath)

    # -- reading ----------------------------------------------------------------------------------------------

    @classmethod
    def from_dir(cls, path: str | os.PathLike) -> HarnessSource:
        root = Path(path).resolve()
        if not root.is_dir():
            raise HandbookError(root, None, "not a harness directory")
        files: dict[str, str] = {}
        for file in sorted(root.rglob("*")):
            rel = file.relative_to(root)
            if not file.is_file() or any(part in _SKIP_DIRS for part in rel.parts):
                continue
            if file.suffix == ".py" or (len(rel.parts) == 1 and rel.name in _WANTED):
                files[rel.as_posix()] = file.read_text(errors="replace")
        return cls(root.name, files, str(root))

    @classmethod
    def from_git(cls, repo: str | os.PathLike, rev: str, subdir: str = "") -> HarnessSource:
        """Read the harness at ``subdir`` of revision ``rev`` of the git repository ``repo``."""
        import git  # GitPython; imported here so the plain directory path needs no git

        try:
            commit = git.Repo(repo, search_parent_directories=True).commit(rev)
        except (git.BadName, ValueError, git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
            raise HandbookError(repo, None, f"cannot read revision {rev!r}: {exc}") from None
        tree = commit.tree
        subdir = subdir.strip("/")
        if subdir:
            try:
                tree = tree / subdir
            except KeyError:
                raise HandbookError(repo, None, f"{subdir!r} does not exist at {rev}") from None
        files: dict[str, str] = {}
        for item in tree.traverse():
            if item.type != "blob":
                continue
            rel = Path(item.path).relative_to(subdir) if subdir else Path(item.path)
            if any(part in _SKIP_DIRS for part in rel.parts):
                continue
            if rel.suffix == ".py" or (len(rel.parts) == 1 and rel.name in _WANTED):
                files[rel.as_posix()] = item.data_stream.read().decode(errors="replace")
        name = Path(subdir).name if subdir else Path(str(repo)).resolve().name
        return cls(name, files, f"{repo}@{rev}:{subdir}")

    @classmethod
    def open(cls, spec: str, repo: str | os.PathLike | None = None, subdir: str = "") -> HarnessSource:
        """A directory path, or (with ``repo``, or when ``spec`` is not a directory) a git revision."""
        if repo is None and Path(spec).is_dir():
            return cls.from_dir(spec)
        return cls.from_git(repo or ".", spec, subdir)

    def _parse_module(self, relpath: str) -> Module:
        name = _module_name(relpath)
        try:
            tree = ast.parse(self.files[relpath], filename=relpath)
        except SyntaxError as exc:
            return Module(name, relpath, None, error=f"syntax error line {exc.lineno}: {exc.msg}")
        module = Module(name, relpath, tree)
        is_package = relpath.endswith("__init__.py")
        self._collect(module, tree.body, prefix="", class_name=None)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level > 0:
                base = _resolve_relative(name, is_package, node.level, node.module)
                if base is None:
                    continue
                for alias in node.names:
                    local = alias.asname or alias.name
                    # ``from . import parsing`` names a module; ``from .parsing import f`` a name in it
                    sub = f"{base}.{alias.name}" if base else alias.name
                    if sub in self._module_names():
                        module.imports[local] = (sub, None)
                    else:
                        module.imports[local] = (base, alias.name)
        return module

    def _module_names(self) -> set[str]:
        return {_module_name(p) for p in self.files if p.endswith(".py")}

    def _collect(self, module: Module, body: list[ast.stmt], prefix: str, class_name: str | None) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                qual = prefix + node.name
                module.functions[qual] = Definition(module.name, qual, node, module.file, class_name)
            elif isinstance(node, ast.ClassDef):
                qual = prefix + node.name
                module.classes[qual] = node
                self._collect(module, node.body, qual + ".", qual)
            elif isinstance(node, ast.If | ast.Try):  # definitions under `if TYPE_CHECKING:` / try-except
                for block in (node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])):
                    self._collect(module, block, prefix, class_name)
                for handler in getattr(node, "handlers", []):
                    self._collect(module, handler.body, prefix, class_name)

    # -- lookups ----------------------------------------------------------------------------------------------

    def definitions(self) -> dict[str, Definition]:
        """Every function and method of the package by ``module:qualname``."""
        return {d.ref: d for m in self.modules.values() for d in m.functions.values()}

    def resolve(self, ref: str, _depth: int = 0) -> Resolution:
        """Find the function ``module:qualname`` names, following the package's own re-exports."""
        if not FUNCTION_REF.match(ref):
            return Resolution(ref, None, "is not a module:qualname reference")
        mod_name, qualname = ref.split(":", 1)
        module = self.modules.get(mod_name)
        if module is None:
            wanted = mod_name.replace(".", "/")
            return Resolution(ref, None, f"module {mod_name!r} does not exist (no {wanted}.py or "
                                         f"{wanted}/__init__.py in {self.name}/)")
        if module.error:
            return Resolution(ref, None, f"module {module.file} cannot be read: {module.error}")
        if qualname in module.functions:
            return Resolution(ref, module.functions[qualname])
        if qualname in module.classes:
            return Resolution(ref, None, f"{qualname} in {module.file} is a class, not a function; "
                                         "name its methods")
        head, _, rest = qualname.partition(".")
        # a class whose method comes from a base class defined in the package
        if head in module.classes or ("." in qualname and qualname.rsplit(".", 1)[0] in module.classes):
            cls_name, _, method = qualname.rpartition(".")
            found = self._inherited(module, cls_name, method, _depth)
            if found is not None:
                return Resolution(ref, found)
        if head in module.imports and _depth < 8:
            target_mod, target_name = module.imports[head]
            target = f"{target_mod}:{target_name}" if target_name else None
            if target_name is None and rest:
                target = f"{target_mod}:{rest}"
            elif target_name and rest:
                target = f"{target_mod}:{target_name}.{rest}"
            if target:
                found = self.resolve(target, _depth + 1)
                if found.definition is not None:
                    return Resolution(ref, found.definition)
        close = difflib.get_close_matches(qualname, list(module.functions), n=1)
        hint = f" (did you mean {mod_name}:{close[0]}?)" if close else ""
        return Resolution(ref, None, f"no function {qualname} in {module.file}{hint}")

    def _inherited(self, module: Module, cls_name: str, method: str, depth: int) -> Definition | None:
        cls = module.classes.get(cls_name)
        if cls is None or depth > 8:
            return None
        for base in cls.bases:
            base_ref = self.class_ref(module, base)
            if base_ref is None:
                continue
            res = self.resolve(f"{base_ref}.{method}", depth + 1)
            if res.definition is not None:
                return res.definition
        return None

    def class_ref(self, module: Module, expr: ast.expr) -> str | None:
        """``module:Class`` for a class expression (``Foo``, ``mod.Foo``) defined in the package, else None."""
        if isinstance(expr, ast.Name):
            if expr.id in module.classes:
                return f"{module.name}:{expr.id}"
            if expr.id in module.imports:
                target_mod, target_name = module.imports[expr.id]
                other = self.modules.get(target_mod)
                if target_name and other is not None:
                    if target_name in other.classes:
                        return f"{target_mod}:{target_name}"
                    if target_name in other.imports:  # re-exported from a package __init__
                        return self.class_ref(other, ast.Name(id=target_name))
        elif isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            target = module.imports.get(expr.value.id)
            if target and target[1] is None:
                other = self.modules.get(target[0])
                if other is not None:
                    return self.class_ref(other, ast.Name(id=expr.attr))
        return None

    # -- settings, recording config, Handbook -----------------------------------------------------------------

    def _toml(self, name: str) -> dict[str, Any] | None:
        text = self.files.get(name)
        if text is None:
            return None
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise HandbookError(f"{self.origin}/{name}", None, f"not valid TOML: {exc}") from None

    def settings(self) -> dict[str, Any] | None:
        """``settings.toml`` flattened to dotted keys (``terminus.max_episodes``), None if there is none."""
        data = self._toml(SETTINGS_FILE)
        return None if data is None else harness_settings.flatten(data)

    def boundaries(self) -> list[str] | None:
        """The boundaries ``recording.toml`` records, None if there is no recording config."""
        data = self._toml(RECORDING_FILE)
        return None if data is None else recording_boundaries(data)

    def handbook(self) -> Handbook | None:
        text = self.files.get(HANDBOOK_FILE)
        return None if text is None else loads_handbook(text, f"{self.origin}/{HANDBOOK_FILE}")


def recording_boundaries(data: dict[str, Any]) -> list[str]:
    """Boundaries of a recording config: a list of refs, an array of tables, or a table keyed by ref."""
    found: list[str] = []
    for key in _BOUNDARY_KEYS:
        value = data.get(key)
        if isinstance(value, list):
            for item in value:
                if isinstance(item, str):
                    found.append(item)
                elif isinstance(item, dict):
                    for fld in _BOUNDARY_FIELDS:
                        if isinstance(item.get(fld), str) and FUNCTION_REF.match(item[fld]):
                            found.append(item[fld])
                            break
        elif isinstance(value, dict):
            found.extend(k for k in value if FUNCTION_REF.match(k))
    return list(dict.fromkeys(found))
