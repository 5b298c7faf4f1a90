"""The first prompt carries the reference's content, section by section, in our wording (issue 16 item 1)."""

from __future__ import annotations

import json
import re

import pytest

from harness_seed import parsing, templates


def render(fmt: str, refine: str | None = None) -> str:
    return templates.render(f"prompt_{fmt}", instruction="TASK-TEXT", terminal_state="SCREEN-TEXT",
                            refine_context=refine, max_duration=60.0)


@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_sections_in_the_reference_order(fmt):
    text = render(fmt)
    headings = ["Linux environment", f"as {fmt.upper()} in this structure", "Required ",
                "IMPORTANT", "Important notes:", "Task Description:\nTASK-TEXT",
                "Current terminal state:\nSCREEN-TEXT"]
    positions = [text.find(h) for h in headings]
    assert -1 not in positions and positions == sorted(positions), dict(zip(headings, positions))
    assert text.rstrip().endswith("SCREEN-TEXT")


@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_example_reply_is_the_reference_example_and_parses(fmt):
    """The example claims completion (as the reference's does), runs `ls -la` then `cd project`, and is
    itself a valid reply in its format."""
    text = render(fmt)
    if fmt == "json":
        example = text[text.index("{\n"):text.index("\n}\n") + 2]
        json.loads(example)
    else:
        example = text[text.index("<response>"):text.index("</response>") + len("</response>")]
    result = parsing.parse_response(example, fmt)
    assert result.error is None and result.warnings == []
    assert [(c.keystrokes, c.duration) for c in result.commands] == [("ls -la\n", 0.1), ("cd project\n", 0.1)]
    assert result.task_complete


@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_the_confirmation_step_is_not_announced_and_duration_advice_is_whole(fmt):
    text = render(fmt)
    assert "confirm" not in text.lower() and "cd /app" not in text
    for item in ("cd, ls, echo, cat", "gcc, find, rustc", "make, python3", "wget", "0.1 seconds", "1.0 seconds",
                 "Never wait more than 60 seconds", "C-c", "C-d"):
        assert item in text, item
    assert len(re.findall(r"duration\W+10\.0", text)) == 1  # how to wait again


def test_xml_prompt_lists_task_complete_forms_and_escaping_rule():
    text = render("xml")
    for form in ("<task_complete>true</task_complete>", "<task_complete>false</task_complete>",
                 "<task_complete/>", "<task_complete></task_complete>"):
        assert form in text
    assert "&lt;" in text and "&amp;" in text and "&quot;" in text
    assert "Avoid any text before or after" in text and "Avoid XML tags other than" in text
    assert "tolerated" not in text


def test_json_prompt_says_extra_text_is_tolerated_and_json_must_be_valid():
    text = render("json")
    assert "produces warnings but is tolerated" in text and "escape quotes" in text


def test_refine_context_block_only_when_set():
    assert "A previous attempt" not in render("json")
    assert "A previous attempt at this task ended" in render("json", refine="it stopped at step 3")
