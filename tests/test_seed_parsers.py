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
</commands> inside a heredoc is fine
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
    assert "</commands> inside a heredoc" in r.commands[0].keystrokes
    assert r.commands[1] == Command("C-c", 0.5)
    assert (r.analysis, r.plan, r.task_complete) == ("the dir is empty", "write the file", False)


def test_xml_warning_entities_are_typed_literally():
    r = xml(XML)
    assert any("XML entities" in w for w in r.warnings)
    assert "&amp; stays" in r.commands[0].keystrokes


def test_xml_errors():
    assert xml("no xml here").error == "No <response> tag found in response"
    assert xml("<response><analysis>a</analysis><plan>p</plan></response>").error == "Missing <commands> section"
    r = xml('<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1">ls\n'
            "</commands></response>")
    assert r.error == "Command 1: missing </keystrokes> closing tag"
    assert xml("<response><analysis>a").error == "Missing </analysis> closing tag"


def test_xml_missing_commands_allowed_when_complete():
    r = xml("<response><analysis>a</analysis><plan>p</plan><task_complete>true</task_complete></response>")
    assert r.error is None and r.task_complete and "Missing <commands> section" in r.warnings


def test_xml_command_error_becomes_warning_when_completing():
    r = xml("<response><analysis>a</analysis><plan>p</plan><task_complete>true</task_complete>"
            '<commands><keystrokes duration="1">ls\n')
    assert r.error is None and r.task_complete
    assert "Command 1: missing </keystrokes> closing tag" in r.warnings


def test_xml_warnings():
    text = ("Here you go:\n<response><plan>p</plan><analysis>a</analysis><foo>x</foo><commands>"
            '<keystrokes>ls</keystrokes>stray<keystrokes duration="fast" shell="sh">pwd\n</keystrokes>'
            "</commands><task_complete>maybe</task_complete></response>\nbye")
    r = xml(text)
    assert r.error is None
    w = "\n".join(r.warnings)
    assert "Extra text detected before <response> tag" in w
    assert "Extra text detected after </response> tag" in w
    assert "Unknown tag <foo>" in w
    assert "Command 1: Missing duration attribute, using default 1.0" in w
    assert "Command 2: Invalid duration value 'fast'" in w
    assert "Command 2: Unknown attributes: shell" in w
    assert "Text outside <keystrokes>" in w
    assert "Command 1 should end with a newline" in w
    assert "Sections appear in the wrong order" in w
    assert "<task_complete> should be true or false" in w
    assert r.commands == [Command("ls", 1.0), Command("pwd\n", 1.0)]


def test_xml_missing_analysis_plan_are_warnings():
    r = xml("<response><commands></commands></response>")
    assert r.error is None and r.commands == []
    assert r.warnings == ["Missing <analysis> section", "Missing <plan> section"]


def test_xml_several_blocks_warns():
    r = xml(XML + "\n" + XML)
    assert any("blocks; only the first was used" in w for w in r.warnings)


def test_xml_autofix_missing_response_close():
    r = xml(XML.removesuffix("</response>"))
    assert r.error is None
    assert r.warnings[0] == ("AUTO-CORRECTED: Added missing </response> closing tag - please fix this in "
                             "future responses")


def test_xml_salvage_truncated_after_commands():
    cut = XML[: XML.index("<task_complete>") + 8]
    salvaged, multiple = salvage_truncated(cut, "xml")
    assert salvaged is not None and not multiple
    assert salvaged.endswith("</commands>\n</response>")
    assert xml(salvaged).error is None and len(xml(salvaged).commands) == 2


def test_xml_salvage_impossible_inside_commands():
    cut = XML[: XML.index("C-c")]
    assert salvage_truncated(cut, "xml") == (None, False)
    assert salvage_truncated("<response><response>", "xml") == (None, True)


def test_json_is_never_salvaged():
    assert salvage_truncated(js(GOOD)[:-5], "json") == (None, False)


def test_unknown_format_is_refused():
    with pytest.raises(ValueError, match="unknown response format"):
        parse_response("{}", "yaml")  # type: ignore[arg-type]
