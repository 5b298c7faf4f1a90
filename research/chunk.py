"""Split a file into searchable units: Python into functions, classes and methods (``ast``); Markdown and
reStructuredText into sections; other text into line windows. Line numbers are 1-based and inclusive, and a
unit's hash is :func:`content_hash` of exactly those lines, so a reference can be re-read and checked later."""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass

CODE_EXT = {".py", ".pyi"}
DOC_EXT = {".md", ".markdown", ".rst"}
TEXT_EXT = {".txt", ".j2", ".jinja", ".jinja2", ".tmpl", ".yaml", ".yml", ".toml", ".sh", ".cfg", ".ini",
            ".json", ".scm", ".tcss"}
MAX_FILE_BYTES = 256_000   # larger files are generated data or bundles, not design
WINDOW = 60                # lines per window for text without structure
MAX_UNIT = 150             # a longer function or section is cut into windows (one hit = one readable place)
_SKIP_NAMES = {"RECORD", "WHEEL", "INSTALLER"}


@dataclass(frozen=True)
class Unit:
    kind: str      # function, class, method, module, section, window
    name: str      # qualified name, section title or file name
    start: int
    end: int
    text: str
    hash: str


def indexable(path: str, size: int) -> bool:
    """Whether a file is worth indexing (known text kinds, not huge, not packaging metadata)."""
    name = path.rsplit("/", 1)[-1]
    if size > MAX_FILE_BYTES or name in _SKIP_NAMES or size == 0:
        return False
    ext = "." + name.rsplit(".", 1)[-1].lower() if "." in name else ""
    return ext in CODE_EXT | DOC_EXT | TEXT_EXT or name in ("METADATA", "PKG-INFO", "README", "Dockerfile")


def split_lines(text: str) -> list[str]:
    """Lines as ``ast`` counts them (universal newlines), so ranges agree between indexing and re-reading."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def decode(data: bytes) -> str | None:
    """UTF-8 text (a leading byte-order mark dropped, as Python's own reader does), or None for binary content."""
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None


def content_hash(lines: list[str], start: int, end: int) -> str:
    """sha256 of lines ``start..end`` (1-based, inclusive) joined by newlines."""
    return hashlib.sha256("\n".join(lines[start - 1:end]).encode()).hexdigest()


def _unit(lines: list[str], kind: str, name: str, start: int, end: int) -> Unit:
    return Unit(kind, name, start, end, "\n".join(lines[start - 1:end]), content_hash(lines, start, end))


def _windows(lines: list[str], kind: str, name: str, start: int, end: int) -> list[Unit]:
    out = []
    for a in range(start, end + 1, WINDOW):
        b = min(end, a + WINDOW - 1)
        if any(line.strip() for line in lines[a - 1:b]):
            out.append(_unit(lines, kind, name, a, b))
    return out


def _sized(lines: list[str], kind: str, name: str, start: int, end: int) -> list[Unit]:
    if end - start + 1 <= MAX_UNIT:
        return [_unit(lines, kind, name, start, end)]
    return _windows(lines, kind, name, start, end)


def _first_line(node: ast.AST) -> int:
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno] + [d.lineno for d in decorators])  # type: ignore[attr-defined]


def _defs(lines: list[str], body: list[ast.stmt], prefix: str, start: int, end: int) -> list[Unit]:
    """Units for a block: each def/class its own unit, the statements between them grouped into windows."""
    out: list[Unit] = []
    gap_start = start
    for node in body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        a, b = _first_line(node), node.end_lineno or node.lineno
        if a > gap_start:
            out += _windows(lines, "module" if not prefix else "class", prefix or "<module>", gap_start, a - 1)
        qual = f"{prefix}.{node.name}" if prefix else node.name
        if isinstance(node, ast.ClassDef):
            if b - a + 1 <= MAX_UNIT:
                out.append(_unit(lines, "class", qual, a, b))
            else:  # a big class: its header and attributes, then each method
                out += _defs(lines, node.body, qual, a, b)
        else:
            out += _sized(lines, "method" if prefix else "function", qual, a, b)
        gap_start = b + 1
    if gap_start <= end:
        out += _windows(lines, "module" if not prefix else "class", prefix or "<module>", gap_start, end)
    return out


def _python(lines: list[str], text: str, path: str) -> list[Unit] | None:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None  # newer syntax than this Python, or not Python at all: fall back to windows
    return _defs(lines, tree.body, "", 1, len(lines))


_MD_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_RST_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+])\1{2,}\s*$")


def _sections(lines: list[str], rst: bool) -> list[Unit]:
    starts: list[tuple[int, str]] = []
    fenced = False
    for i, line in enumerate(lines, 1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if fenced:
            continue
        if not rst and (m := _MD_HEADING.match(line)):
            starts.append((i, m.group(2)))
        elif rst and i > 1 and _RST_UNDERLINE.match(line) and lines[i - 2].strip() \
                and len(line.rstrip()) >= len(lines[i - 2].rstrip()):
            starts.append((i - 1, lines[i - 2].strip()))
    bounds = [(1, "<preamble>")] + starts if not starts or starts[0][0] > 1 else starts
    out: list[Unit] = []
    for k, (a, title) in enumerate(bounds):
        b = bounds[k + 1][0] - 1 if k + 1 < len(bounds) else len(lines)
        if b >= a and any(line.strip() for line in lines[a - 1:b]):
            out += _sized(lines, "section", title, a, b)
    return out


def split_file(path: str, text: str) -> list[Unit]:
    """All units of one file's text."""
    lines = split_lines(text)
    while len(lines) > 1 and lines[-1] == "":
        lines.pop()  # a trailing newline is not a line of its own
    name = path.rsplit("/", 1)[-1]
    ext = "." + name.rsplit(".", 1)[-1].lower() if "." in name else ""
    if ext in CODE_EXT:
        units = _python(lines, text, path)
        if units is not None:
            return units
    if ext in DOC_EXT:
        return _sections(lines, rst=ext == ".rst")
    return _windows(lines, "window", name, 1, len(lines))
