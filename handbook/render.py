"""Render a Handbook to the Markdown a person reads (``HANDBOOK.md`` beside ``HANDBOOK.toml``).

The Markdown is generated, never edited: :func:`write_rendered` regenerates it and :func:`rendering_is_current`
tells whether the stored copy still matches its TOML (the check and the tests use it).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import jinja2

from .model import HANDBOOK_FILE, RENDERED_FILE, Behaviour, Handbook, load_handbook

TEMPLATES = Path(__file__).parent / "templates"


def template_env(autoescape: bool = False) -> jinja2.Environment:
    """The jinja2 environment of the Handbook templates (HTML templates autoescape)."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=autoescape,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )


def _anchor(title: str) -> str:
    # GitHub-style heading anchors: lower case, punctuation dropped, spaces to hyphens
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def _code(items: list[str]) -> list[str]:
    return [f"`{item}`" for item in items]


def _sections(b: Behaviour) -> list[tuple[str, list[str]]]:
    """Prose lists, one bullet each."""
    return [
        ("Triggers", b.triggers),
        ("State read", b.state_read),
        ("State written", b.state_written),
        ("Exit conditions", b.exit_conditions),
    ]


def _references(b: Behaviour) -> list[tuple[str, list[str]]]:
    """Names of code, settings and spans, on one line each."""
    return [
        ("Implementing functions", _code(b.functions)),
        ("Settings", _code(b.settings)),
        ("Recorded spans", _code(b.spans)),
    ]


def render_markdown(handbook: Handbook) -> str:
    """The Markdown rendering of ``handbook``."""
    settings: dict[str, list[str]] = {}
    spans: dict[str, list[str]] = {}
    for _, b in handbook.iter_behaviours():
        for key in b.settings:
            settings.setdefault(key, []).append(b.id)
        for ref in b.spans:
            spans.setdefault(ref, []).append(b.id)
    anchors = {s.id: _anchor(f"{i}. {s.name}") for i, s in enumerate(handbook.stages, 1)}
    text = template_env().get_template("handbook.md.j2").render(
        hb=handbook, anchors=anchors, sections=_sections, references=_references,
        settings_index=sorted(settings.items()), spans_index=sorted(spans.items()),
    )
    return re.sub(r"\n{3,}", "\n\n", text).rstrip("\n") + "\n"


def write_rendered(harness_dir: str | os.PathLike) -> Path:
    """Regenerate ``HANDBOOK.md`` from ``HANDBOOK.toml`` in ``harness_dir``; returns the written file."""
    root = Path(harness_dir)
    out = root / RENDERED_FILE
    out.write_text(render_markdown(load_handbook(root / HANDBOOK_FILE)))
    return out


def rendering_is_current(harness_dir: str | os.PathLike) -> bool:
    """Whether the stored ``HANDBOOK.md`` is exactly what its ``HANDBOOK.toml`` renders to."""
    root = Path(harness_dir)
    out = root / RENDERED_FILE
    return out.is_file() and out.read_text() == render_markdown(load_handbook(root / HANDBOOK_FILE))
