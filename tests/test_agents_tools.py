"""The tools every backend shares: results, errors the model sees, confinement of paths (symlinks resolved)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from evolve.roles.runtime import Limits, ToolContext, ToolError, get_tool, list_tools, read_transcript, tool
from evolve.roles.runtime.tools import invoke
from evolve.roles.runtime.transcript import Transcript

TRIAL = Path(__file__).parent / "data" / "agents" / "trials" / "greet__r1"
SEED = Path(__file__).parents[1] / "harness_seed"


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    ws = tmp_path / "ws"
    shutil.copytree(TRIAL, ws / "greet__r1")
    (ws / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    (tmp_path / "secret.txt").write_text("outside\n")
    return ToolContext(workspace=ws, limits=Limits(tool_output_chars=10**6), transcript=Transcript(tmp_path / "t.jsonl", "t"),
                       harness=SEED)


def use(ctx: ToolContext, name: str, **args) -> str:
    return asyncio.run(invoke(get_tool(name), ctx, args))


def test_read_file_lines_and_list_dir(ctx: ToolContext) -> None:
    assert use(ctx, "read_file", path="notes.txt", start=2, end=3) == "notes.txt (lines 2-3 of 3)\n2: beta\n3: gamma"
    listing = use(ctx, "list_dir", path="greet__r1/agent")
    assert "trajectory.json (" in listing and "spans.jsonl (" in listing
    assert use(ctx, "list_dir").splitlines() == ["greet__r1/", "notes.txt (17 bytes)"]


def test_a_repeated_read_moves_on_until_the_file_changes(ctx: ToolContext) -> None:
    """The bundled 1.5B implementer read line 1 of a file 16 times in a row: the same read of an unchanged file
    shows the lines after it, then says it was all read; a changed file is shown again."""
    assert use(ctx, "read_file", path="notes.txt", start=1, end=1) == \
        "notes.txt (lines 1-1 of 3)\n1: alpha\n(2 more line(s) after line 1: leave out end to read to the end)"
    again = use(ctx, "read_file", path="notes.txt", start=1, end=1)
    assert again.startswith("You read notes.txt lines 1-1 already") and again.endswith("2: beta\n3: gamma")
    assert "already and the file has not changed" in use(ctx, "read_file", path="notes.txt", start=2)
    assert "already" in use(ctx, "read_file", path="notes.txt", start=1, end=1)  # now all of it was read
    import os
    (ctx.workspace / "notes.txt").write_text("alpha\nBETA\ngamma\n")
    os.utime(ctx.workspace / "notes.txt", ns=(1, 10**18))  # a changed file, whatever the clock's resolution
    assert use(ctx, "read_file", path="notes.txt", start=2, end=2).startswith("notes.txt (lines 2-2 of 3)\n2: BETA")


def test_grep_reports_file_and_line(ctx: ToolContext) -> None:
    assert use(ctx, "grep", pattern="^gam", path=".") == "notes.txt:3: gamma"
    assert use(ctx, "grep", pattern="(unclosed").startswith("error: invalid regular expression")


@pytest.mark.parametrize("path", ["../secret.txt", "{outside}/secret.txt", "/etc/passwd", "link/secret.txt",
                                  "greet__r1/../../secret.txt"])
def test_paths_outside_the_workspace_are_refused(ctx: ToolContext, path: str) -> None:
    (ctx.workspace / "link").symlink_to(ctx.workspace.parent)  # planted link pointing out
    text = use(ctx, "read_file", path=path.format(outside=ctx.workspace.parent))
    assert text.startswith("refused: ") and "outside the workspace" in text
    assert ctx.usage.refusals == 1
    rows = read_transcript(ctx.transcript.path)
    assert rows[-1]["kind"] == "tool_result" and rows[-1]["status"] == "refused"


def test_grep_does_not_follow_links_out(ctx: ToolContext) -> None:
    (ctx.workspace / "link.txt").symlink_to(ctx.workspace.parent / "secret.txt")
    assert use(ctx, "grep", pattern="^outside") == "no match for '^outside' under '.'"


def test_invalid_arguments_reach_the_model_naming_the_argument(ctx: ToolContext) -> None:
    text = use(ctx, "read_file", path="notes.txt", start=0)
    assert text.startswith("error: invalid arguments for read_file: start:")
    assert use(ctx, "read_file", nope=1).startswith("error: invalid arguments for read_file:")
    assert use(ctx, "read_file", path="missing.txt").startswith("error: no such file")


def test_trajectory_step_of_a_real_trial(ctx: ToolContext) -> None:
    steps = json.loads(use(ctx, "trajectory_step", trial="greet__r1", episode=0))
    assert steps and all(s["episode"] == 0 and s["trial_id"] == "greet__r1" for s in steps)
    assert "no episode 99" in use(ctx, "trajectory_step", trial="greet__r1", episode=99)


def test_spans_of_a_real_trial_filtered_by_episode_and_behaviour(ctx: ToolContext) -> None:
    all_spans = json.loads(use(ctx, "spans", trial="greet__r1"))
    first = json.loads(use(ctx, "spans", trial="greet__r1", episode=0))
    assert 0 < len(first) < len(all_spans) + 1 and {s["episode"] for s in first} == {0}
    assert "no behaviour 'no.such'" in use(ctx, "spans", trial="greet__r1", behaviour="no.such")


def test_handbook_entry_by_id_and_by_function(ctx: ToolContext) -> None:
    from handbook.model import load_handbook

    book = load_handbook(SEED / "HANDBOOK.toml")
    _, behaviour = next(book.iter_behaviours())
    entry = json.loads(use(ctx, "handbook", query=behaviour.id))
    assert entry[0]["id"] == behaviour.id
    if behaviour.functions:
        by_function = json.loads(use(ctx, "handbook", query=behaviour.functions[0]))
        assert behaviour.id in [b["id"] for b in by_function]


def test_registry_schemas_and_a_new_tool(ctx: ToolContext) -> None:
    names = {t.name for t in list_tools("read")}
    assert {"read_file", "list_dir", "grep", "trajectory_step", "spans", "handbook"} <= names
    assert {t.name for t in list_tools("write")} == {"write_file", "edit_file", "run", "check"}
    assert get_tool("read_file").json_schema()["required"] == ["path"]

    @tool(name="shout_test", group="read")
    def shout_test(ctx: ToolContext, word: str) -> str:
        """Upper-case a word."""
        if not word:
            raise ToolError("empty word")
        return word.upper()

    assert get_tool("shout_test").json_schema()["properties"]["word"]["type"] == "string"
    assert use(ctx, "shout_test", word="hi") == "HI"
    assert use(ctx, "shout_test", word="") == "error: empty word"
    with pytest.raises(ValueError, match="already registered"):
        tool(name="shout_test")(lambda ctx, word: word)


def test_trial_tools_find_a_bare_trial_name_in_the_trials_folder(tmp_path: Path) -> None:
    """Prompts and evidence name runs by folder name; the corpus lies deeper in the workspace (the 1.5B called
    digest('hello-file__r2') nine times against versions/v0/reference/hello-file__r2 and got 'no such file')."""
    ws = tmp_path / "ws"
    shutil.copytree(TRIAL, ws / "versions" / "v0" / "reference" / "greet__r1")
    (tmp_path / "greet__r9").mkdir()
    ctx = ToolContext(workspace=ws, limits=Limits(tool_output_chars=10**6),
                      transcript=Transcript(tmp_path / "t.jsonl", "t"), extra={"trials_dir": "versions/v0/reference"})
    assert '"episode": 0' in use(ctx, "trajectory_step", trial="greet__r1", episode=0)
    assert use(ctx, "spans", trial="greet__r1") == use(ctx, "spans", trial="versions/v0/reference/greet__r1")
    assert "no such trial: 'nope'" in use(ctx, "trajectory_step", trial="nope", episode=0)
    assert "outside the workspace" in use(ctx, "spans", trial="../../greet__r9")  # still confined
    bare = ToolContext(workspace=ws, limits=Limits(), transcript=Transcript(tmp_path / "u.jsonl", "u"))
    assert "no such file or folder" in use(bare, "trajectory_step", trial="greet__r1", episode=0)


def test_a_toml_write_that_leaves_entries_out_is_merged_and_one_that_does_not_parse_refused(ctx: ToolContext) -> None:
    """Seen live: the bundled 1.5B implementer rewrote settings.toml and recording.toml from memory, cut them,
    and the candidate failed its smoke check; refused, it wrote the same cut file 13 times more. A whole-file write
    that leaves entries out is now merged into the file: what it left out is kept, and the model told so."""
    import tomllib

    for name in ("settings.toml", "recording.toml"):
        shutil.copy(SEED / name, ctx.workspace / name)
    settings = (ctx.workspace / "settings.toml").read_text()
    before = tomllib.loads(settings)
    cut = "[terminus]\nmax_episodes = 7\n[completion]\nverify = true\n"
    text = use(ctx, "write_file", path="settings.toml", content=cut)
    assert text.startswith("wrote settings.toml") and "your content left out " in text
    assert "entries settings.toml holds (context, midharness, model, observation, terminus." in text  # tables first
    assert "tmux," in text and "context.context_limit" not in text  # a left-out table stands for its keys
    assert "(added: completion; changed: terminus.max_episodes)" in text
    after = tomllib.loads((ctx.workspace / "settings.toml").read_text())
    assert after["completion"] == {"verify": True} and after["terminus"]["max_episodes"] == 7
    assert {k: v for k, v in after.items() if k not in ("completion", "terminus")} == \
        {k: v for k, v in before.items() if k != "terminus"}
    assert {k: v for k, v in after["terminus"].items() if k != "max_episodes"} == \
        {k: v for k, v in before["terminus"].items() if k != "max_episodes"}
    assert settings.splitlines()[0] in (ctx.workspace / "settings.toml").read_text()  # comments kept (tomlkit)
    (ctx.workspace / "settings.toml").write_text(settings)

    # every entry kept, one added: written; an edit may still remove an entry on purpose
    assert use(ctx, "write_file", path="settings.toml", content=settings + "\n[completion]\nverify = true\n") \
        .startswith("wrote settings.toml")
    assert use(ctx, "edit_file", path="settings.toml", old="\n[completion]\nverify = true\n", new="\n") \
        .startswith("edited settings.toml")
    assert tomllib.loads((ctx.workspace / "settings.toml").read_text()) == tomllib.loads(settings)

    # an edit that breaks the syntax: refused, the file as it was
    text = use(ctx, "edit_file", path="settings.toml", old="[model]", new="[model")
    assert text.startswith("error: settings.toml would not be valid TOML after this change")
    assert tomllib.loads((ctx.workspace / "settings.toml").read_text()) == tomllib.loads(settings)

    # an array of tables: items are named by their target, so reordering loses nothing, dropping one does
    recording = (ctx.workspace / "recording.toml").read_text()
    head, _, rest = recording.partition("[[boundary]]")
    blocks = ["[[boundary]]" + b for b in rest.split("[[boundary]]")]
    assert use(ctx, "write_file", path="recording.toml", content=head + "".join(reversed(blocks))) \
        .startswith("wrote recording.toml")
    text = use(ctx, "write_file", path="recording.toml", content=head + "".join(blocks[1:]))
    assert "left out 2 entries" in text and "boundary[loop:Agent.run]" in text
    def by_target(text: str) -> dict:
        data = tomllib.loads(text)
        return {**data, "boundary": sorted(data["boundary"], key=lambda b: b["target"])}
    assert by_target((ctx.workspace / "recording.toml").read_text()) == by_target(recording)  # kept
    # a new file, or any other kind of file, is written as given
    assert use(ctx, "write_file", path="contracts/new.toml", content="a = 1\n").startswith("wrote")
    assert use(ctx, "write_file", path="notes.txt", content="x").startswith("wrote")


def test_an_edit_whose_old_text_is_missing_names_the_closest_lines_and_how_to_add(ctx: ToolContext) -> None:
    """Seen live: the bundled 1.5B implementer sent `old = "completion.verify_before_complete = false"` (a line
    settings.toml never had) 15 times, the error the same each time. The error now shows the file's closest lines
    and how to add an entry instead; the file is untouched."""
    shutil.copy(SEED / "settings.toml", ctx.workspace / "settings.toml")
    settings = (ctx.workspace / "settings.toml").read_text()
    text = use(ctx, "edit_file", path="settings.toml", old="max_episodes = 50\n", new="max_episodes = 5\n")
    assert text.startswith("error: `old` occurs 0 times in settings.toml")
    line = next(n for n, ln in enumerate(settings.splitlines(), 1) if ln.startswith("max_episodes ="))
    assert f"Its closest lines: {line}: max_episodes = " in text  # found despite the line's trailing comment
    assert "write_file settings.toml with only the tables and keys to add" in text
    text = use(ctx, "edit_file", path="settings.toml", old="completion.verify_before_complete = false", new="x")
    assert "Nothing in settings.toml resembles it" in text
    assert (ctx.workspace / "settings.toml").read_text() == settings
    (ctx.workspace / "m.py").write_text("def f():\n    return 1\n")
    text = use(ctx, "edit_file", path="m.py", old="return 2", new="return 3")
    assert "Its closest lines: 2:     return 1." in text and "write_file" not in text  # the TOML hint only
