"""Both response parsers: every error, warning and auto-fix of TERMINUS2.md, and XML salvage."""

from __future__ import annotations

import json

import pytest

from harness_seed.parsing import Command, parse_response, salvage_truncated


def js(obj) -> str:
    return json.dumps(obj)


GOOD = {"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\n", "duration": 0.1}], "task_complete": False}


def parse(text):
    return parse_response(text, "json")


# -- JSON: the clean case ----------------------------------------------------------------------------


def test_json_clean_reply_has_no_warnings():
    r = parse(js(GOOD))
    assert r.error is None and r.warnings == []
    assert r.commands == [Command("ls\n", 0.1)] and not r.task_complete
    assert (r.analysis, r.plan) == ("a", "p")


def test_json_task_complete_string_and_absent():
    assert parse(js({**GOOD, "task_complete": "true"})).task_complete
    assert not parse(js({k: v for k, v in GOOD.items() if k != "task_complete"})).task_complete


def test_json_empty_keystrokes_is_a_wait():
    r = parse(js({**GOOD, "commands": [{"keystrokes": "", "duration": 5}]}))
    assert r.error is None and r.commands == [Command("", 5.0)]


# -- JSON errors -------------------------------------------------------------------------------------


def test_json_error_no_json():
    r = parse("I will list the files.")
    assert r.error == "No valid JSON found in response" and r.commands == []


def test_json_error_invalid_json_with_preview():
    short = '{"analysis": "a", "plan": "p", "commands": [}'
    r = parse(short)
    assert r.error.startswith("Invalid JSON: ") and f"| Content: {short!r}" in r.error
    long = '{"analysis": "' + "x" * 300 + '", "plan": bad}'
    r = parse(long)
    assert "| Content preview: " in r.error and r.error.endswith("...") and len(r.error) < 300


def test_json_error_missing_required_fields():
    r = parse(js({"analysis": "a"}))
    assert r.error == "Missing required fields: plan, commands"


def test_json_error_commands_not_array():
    assert parse(js({**GOOD, "commands": "ls"})).error == "Field 'commands' must be an array"


def test_json_error_command_without_keystrokes_or_not_object():
    assert parse(js({**GOOD, "commands": [{"duration": 1}]})).error == \
        "Command 1 missing required 'keystrokes' field"
    assert parse(js({**GOOD, "commands": ["ls"]})).error == "Command 1 must be an object"
    assert parse(js({**GOOD, "commands": [{"keystrokes": 3}]})).error == "Command 1 'keystrokes' must be a string"


def test_json_command_errors_become_warnings_when_completing():
    r = parse(js({**GOOD, "commands": [{"duration": 1}], "task_complete": True}))
    assert r.error is None and r.task_complete and r.commands == []
    assert "Command 1 missing required 'keystrokes' field" in r.warnings


# -- JSON warnings -----------------------------------------------------------------------------------


def test_json_warning_text_before_and_after():
    r = parse("Sure! " + js(GOOD) + " hope that helps")
    assert r.error is None
    assert r.warnings == ["Extra text detected before JSON object", "Extra text detected after JSON object"]


def test_json_warning_missing_and_invalid_duration():
    r = parse(js({**GOOD, "commands": [{"keystrokes": "ls\n"}, {"keystrokes": "pwd\n", "duration": "soon"}]}))
    assert r.commands == [Command("ls\n", 1.0), Command("pwd\n", 1.0)]
    assert "Command 1: Missing duration field, using default 1.0" in r.warnings
    assert any(w.startswith("Command 2: Invalid duration value 'soon'") for w in r.warnings)


def test_json_warning_unknown_command_fields():
    r = parse(js({**GOOD, "commands": [{"keystrokes": "ls\n", "duration": 1, "shell": "zsh", "cwd": "/"}]}))
    assert "Command 1: Unknown fields: cwd, shell" in r.warnings


def test_json_warning_fields_out_of_order():
    r = parse(js({"plan": "p", "analysis": "a", "commands": []}))
    assert r.error is None
    assert r.warnings == [("Fields appear in the wrong order: found plan -> analysis -> commands, expected "
                          "analysis -> plan -> commands")]


def test_json_warning_non_final_command_without_newline():
    r = parse(js({**GOOD, "commands": [{"keystrokes": "ls", "duration": 1}, {"keystrokes": "C-c", "duration": 1}]}))
    assert len([w for w in r.warnings if "should end with a newline" in w]) == 1
    assert r.warnings[0].startswith("Command 1 should end with a newline")


def test_json_braces_inside_strings_do_not_confuse_the_scan():
    body = {**GOOD, "commands": [{"keystrokes": "awk '{print $1}' f | sed 's/}/x/'\n", "duration": 0.1}]}
    r = parse(js(body))
    assert r.error is None and r.commands[0].keystrokes.startswith("awk '{print $1}'")


# -- JSON auto-fixes ---------------------------------------------------------------------------------


def test_json_autofix_missing_closing_brace():
    r = parse(js(GOOD)[:-1])
    assert r.error is None and r.commands == [Command("ls\n", 0.1)]
    assert r.warnings[0] == ("AUTO-CORRECTED: Fixed incomplete JSON by adding missing closing brace - please fix "
                             "this in future responses")


def test_json_autofix_two_missing_braces():
    text = '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n", "duration": 1}'
    r = parse(text + "]")
    assert r.error is None and r.warnings[0].startswith("AUTO-CORRECTED: Fixed incomplete JSON")


def test_json_autofix_json_embedded_in_other_text():
    r = parse("My plan {roughly}: " + js(GOOD))
    assert r.error is None and r.commands == [Command("ls\n", 0.1)]
    assert r.warnings == ["AUTO-CORRECTED: Extracted JSON from mixed content - please fix this in future responses"]


def test_json_unfixable_keeps_the_original_error():
    r = parse('{"analysis": "a", "plan": ')
    assert r.error is not None and not r.error.startswith("AUTO")


# -- XML ---------------------------------------------------------------------------------------------

XML = """<response>
<analysis>the dir is empty</analysis>
<plan>write the file</plan>
<commands>
<keystrokes duration="0.1">cat > /app/f.sh <<'EOF'
if [ 1 < 2 ] && true; then echo "&amp; stays"; fi
<b>tags in a heredoc are text</b>
EOF
</keystrokes>
<keystrokes duration="0.5">C-c</keystrokes>
</commands>
<task_complete>false</task_complete>
</response>"""


def xml(text):
    return parse_response(text, "xml")


def test_xml_clean_reply_contents_are_raw():
    r = xml(XML.replace("&amp; stays", "and stays"))
    assert r.error is None and r.warnings == []
    assert r.commands[0].keystrokes.startswith("cat > /app/f.sh <<'EOF'\nif [ 1 < 2 ] && true")
    assert "<b>tags in a heredoc are text</b>" in r.commands[0].keystrokes
    assert r.commands[1] == Command("C-c", 0.5)
    assert (r.analysis, r.plan, r.task_complete) == ("the dir is empty", "write the file", False)


def test_xml_warning_entities_are_typed_literally():
    r = xml(XML)
    assert any("&amp; is typed literally" in w for w in r.warnings)
    assert "&amp; stays" in r.commands[0].keystrokes


def test_xml_errors():
    assert xml("no xml here").error == "No <response> tag found"
    assert xml("<response><analysis>a</analysis><plan>p</plan></response>").error == "Missing <commands> section"


def test_xml_unclosed_sections_warn_and_the_commands_still_run():
    r = xml('<response><analysis>a<plan>p</plan><commands><keystrokes duration="1">ls\n</keystrokes>'
            "</commands></response>")
    assert r.error is None and r.commands == [Command("ls\n", 1.0)]
    assert r.warnings == ["Missing <analysis> section"]
    r = xml('<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1">ls\n'
            "</commands></response>")
    assert r.error is None and r.commands == []
    assert r.warnings == ["A <keystrokes> element without </keystrokes> was not run"]


def test_xml_missing_commands_allowed_when_complete():
    r = xml("<response><analysis>a</analysis><plan>p</plan><task_complete>true</task_complete></response>")
    assert r.error is None and r.task_complete and "Missing <commands> section" in r.warnings


def test_xml_task_complete_is_the_literal_true_outside_the_commands():
    base = "<response><analysis>a</analysis><plan>p</plan><commands>{c}</commands>{t}</response>"
    assert xml(base.format(c="", t="<task_complete> TRUE </task_complete>")).task_complete
    assert not xml(base.format(c="", t="<task_complete>yes</task_complete>")).task_complete
    typed = '<keystrokes duration="1">echo "<task_complete>true</task_complete>"\n</keystrokes>'
    assert not xml(base.format(c=typed, t="<task_complete>false</task_complete>")).task_complete


def test_xml_warnings():
    text = ("Here you go:\n<response><plan>p</plan><analysis>a</analysis><foo>x</foo><commands>"
            "<keystrokes duration=2>ls</keystrokes><keystrokes duration='fast' shell=\"sh\">pwd\\r\\n"
            "</keystrokes></commands><task_complete>maybe</task_complete></response>\nbye")
    r = xml(text)
    assert r.error is None
    w = "\n".join(r.warnings)
    assert "Extra text detected before <response> tag" in w
    assert "Extra text detected after </response> tag" in w
    assert "Unknown tag found: <foo>" in w
    assert "Command 1: Attribute 'duration' value should be quoted" in w
    assert "Command 1: Missing duration attribute, using default 1.0" in w
    assert "Command 2: Use double quotes for attribute 'duration'" in w
    assert "Command 2: Invalid duration value 'fast'" in w
    assert "Command 2: Unknown attribute 'shell'" in w
    assert "Command 1 should end with a newline" in w
    assert "Sections appear in the wrong order" in w
    assert "\\r\\n line endings are not needed" in w
    assert r.commands == [Command("ls", 1.0), Command("pwd\\r\\n", 1.0)]
    assert not r.task_complete


def test_xml_single_quoted_duration_is_read():
    r = xml("<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration='3'>ls\n"
            "</keystrokes></commands></response>")
    assert r.commands == [Command("ls\n", 3.0)]


def test_xml_missing_analysis_plan_are_warnings_and_empty_commands_warn():
    r = xml("<response><commands></commands></response>")
    assert r.error is None and r.commands == []
    assert r.warnings[:2] == ["Missing <analysis> section", "Missing <plan> section"]
    assert r.warnings[2].startswith("Commands section is empty")
    done = xml("<response><commands></commands><task_complete>true</task_complete></response>")
    assert len(done.warnings) == 2 and done.task_complete


def test_xml_several_blocks_run_only_the_first():
    r = xml(XML + "\n" + XML)
    assert any("You issued 2 and only the first was executed" in w for w in r.warnings)
    twice = xml('<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1">one\n'
                '</keystrokes></commands><commands><keystrokes duration="1">two\n</keystrokes></commands>'
                "</response>")
    assert [c.keystrokes for c in twice.commands] == ["one\n"]
    assert any("Only issue one <commands> block" in w for w in twice.warnings)


def test_xml_autofix_missing_response_close():
    r = xml(XML.removesuffix("</response>"))
    assert r.error is None
    assert r.warnings[0] == ("AUTO-CORRECTED: Missing </response> tag was automatically inserted - please fix "
                             "this in future responses")


def test_xml_salvage_truncated_after_commands():
    cut = XML[: XML.index("<task_complete>") + 8]
    salvaged, multiple = salvage_truncated(cut, "xml")
    assert salvaged is not None and not multiple
    assert salvaged.endswith("</commands>\n</response>")
    assert xml(salvaged).error is None and len(xml(salvaged).commands) == 2


def test_xml_salvage_impossible_inside_commands():
    cut = XML[: XML.index("C-c")]
    assert salvage_truncated(cut, "xml") == (None, False)
    assert salvage_truncated(XML + "\n" + XML[:40], "xml") == (XML, False)  # the first block, cut clean


def test_json_is_never_salvaged():
    assert salvage_truncated(js(GOOD)[:-5], "json") == (None, False)


def test_unknown_format_is_refused():
    with pytest.raises(ValueError, match="unknown response format"):
        parse_response("{}", "yaml")  # type: ignore[arg-type]


def test_json_reference_decisions_on_odd_values():
    """task_complete 1 claims completion (with a type warning), a boolean duration is a number, an empty
    (wait) keystroke needs no newline: the reference's decisions (tests/test_harbor_diff.py checks more)."""
    r = parse('{"analysis": "a", "plan": "p", "commands": [], "task_complete": 1}')
    assert r.task_complete and r.warnings == ["Field 'task_complete' should be a boolean or string"]
    r = parse('{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "", "duration": true}, '
              '{"keystrokes": "ls\\n", "duration": 0.1}]}')
    assert r.commands == [Command("", 1.0), Command("ls\n", 0.1)] and r.warnings == []
