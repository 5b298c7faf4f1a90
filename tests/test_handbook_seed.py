"""The seed's own Handbook: aligned with the code, broken by an unrecorded rename or an ungoverned setting,
diffed exactly, and every span of a real seed trial mapped to a behaviour."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from handbook.check import check_harness
from handbook.diff import diff_handbooks, render_diff_markdown
from handbook.lookup import SpanIndex, map_trial, read_spans, spans_of_behaviour
from handbook.model import load_handbook
from handbook.render import rendering_is_current
from handbook.resync import affected_behaviours
from handbook.source import HarnessSource

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "harness_seed"
REQUIRED_STAGES = {  # the list, by the words each stage name must contain
    "main loop", "parsing", "dispatch", "observation", "completion", "context", "mid-harness",
}


@pytest.fixture
def seed_copy(tmp_path) -> Path:
    copy = tmp_path / "harness_seed"
    shutil.copytree(SEED, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def test_seed_handbook_passes_the_check():
    report = check_harness(SEED)
    assert report.ok, "\n".join(str(p) for p in report.problems)
    assert report.boundaries >= 14 and report.settings >= 30
    assert rendering_is_current(SEED), "harness_seed/HANDBOOK.md is stale: run `rise handbook render harness_seed`"


def test_seed_handbook_has_the_required_stages():
    names = " | ".join(s.name.lower() for s in load_handbook(SEED).stages)
    for words in REQUIRED_STAGES:
        assert words in names, f"no stage about {words!r} in: {names}"


def test_renamed_function_fails_naming_behaviour_and_function(seed_copy):
    _edit(seed_copy / "observation.py", "def new_content(", "def added_content(")
    _edit(seed_copy / "observation.py", "added = new_content(", "added = added_content(")
    report = check_harness(seed_copy)
    assert not report.ok
    assert [(p.kind, p.behaviour, p.name) for p in report.problems] == [
        ("missing-function", "observe.incremental", "observation:new_content")]
    assert "behaviour 'observe.incremental'" in report.problems[0].message
    assert "observation:new_content" in report.problems[0].message


def test_renamed_recorded_method_fails_for_every_behaviour_naming_it(seed_copy):
    _edit(seed_copy / "completion.py", "def on_reply(", "def observe_reply(")
    problems = check_harness(seed_copy).problems
    missing = {(p.behaviour, p.name) for p in problems if p.kind == "missing-function"}
    assert missing == {("completion.handshake", "completion:CompletionHandshake.on_reply")}
    assert any(p.kind == "unknown-span" and p.behaviour == "completion.handshake" for p in problems)


def test_setting_nobody_governs_fails(seed_copy):
    _edit(seed_copy / "settings.toml", "[observation]\n", "[observation]\nstrip_ansi = true\n")
    problems = check_harness(seed_copy).problems
    assert [(p.kind, p.name) for p in problems] == [("ungoverned-setting", "observation.strip_ansi")]


def test_diff_against_copy_with_one_behaviour_changed_shows_exactly_that(seed_copy):
    toml = seed_copy / "HANDBOOK.toml"
    _edit(toml, 'functions = ["observation:limit_output"]',
          'functions = ["observation:limit_output", "observation:new_content"]')
    _edit(toml, 'settings = ["observation.limit_bytes", "terminus.initial_screen_bytes"]',
          'settings = ["observation.limit_bytes"]')
    diff = diff_handbooks(load_handbook(SEED), load_handbook(seed_copy), "seed", "copy")
    assert not (diff.added or diff.removed or diff.stages_added or diff.stages_removed or diff.stages_changed
                or diff.handbook_changes)
    (change,) = diff.changed
    assert change.id == "observe.truncate"
    fields = {c.field: (c.added, c.removed) for c in change.changes}
    assert fields == {"functions": (["observation:new_content"], []),
                      "settings": ([], ["terminus.initial_screen_bytes"])}
    md = render_diff_markdown(diff)
    assert "0 behaviour(s) added, 0 removed, 1 changed" in md
    assert "### Output truncation (`observe.truncate`, stage `observe`)" in md
    assert md.count("### ") == 1


def test_affected_by_a_change_to_the_seed(seed_copy):
    _edit(seed_copy / "observation.py", "half = limit // 2", "half = max(limit // 2, 1)")
    report = affected_behaviours(HarnessSource.from_dir(SEED), HarnessSource.from_dir(seed_copy))
    assert report.functions == {"observation:limit_output": "modified"}
    assert [a.behaviour for a in report.affected] == ["observe.truncate"]


# -- a real trial -------------------------------------------------------------------------------------------


def _trial_parts_missing() -> str | None:
    if shutil.which("tmux") is None:
        return "tmux is not installed"
    from trials.environments.local import bwrap_available

    if not bwrap_available():
        return "bubblewrap cannot create a sandbox here"
    if not (REPO / "data" / "starter" / "hello-file" / "task.toml").is_file():
        return "the starter task hello-file is missing"
    return None


def _reply(keys: str | None, done: bool = False) -> str:
    return json.dumps({"analysis": "Reading the screen.", "plan": "Write the greeting file.",
                       "commands": [{"keystrokes": keys, "duration": 0.3}] if keys else [],
                       "task_complete": done})


class _Script:
    """Generator replies in order (the last repeats); one-token verifier duels answer B; prose otherwise."""

    def __init__(self, replies: list):
        self.replies = list(replies)

    def __call__(self, body: dict):
        if body.get("max_tokens") == 1:
            return "B"
        if self.replies:
            return self.replies.pop(0)
        return "The greeting file /app/hello.txt exists; the task is done."


def _run(tmp_path: Path, script: _Script, settings: dict) -> Path:
    from monitor.agents import resolve_agent
    from tests.fakes.openai_server import ScriptedServer
    from trials.endpoints.spec import EndpointSpec
    from trials.runner import run_trial
    from trials.tasks.load import load_task

    task = load_task(REPO / "data" / "starter" / "hello-file")
    trial_dir = tmp_path / "job" / "hello-file__r1"
    with ScriptedServer(script, model="scripted") as srv:
        endpoint = EndpointSpec(base_url=srv.base_url, model="scripted")
        result = asyncio.run(run_trial(task, resolve_agent("seed"), endpoint, trial_dir, "local", None,
                                       settings=settings))
    assert result.status == "passed", result.model_dump_json(indent=1)
    return trial_dir


@pytest.mark.tmux
@pytest.mark.sandbox
def test_every_span_of_a_real_seed_trial_maps_to_a_behaviour(tmp_path):
    if (why := _trial_parts_missing()):
        pytest.skip(why)
    from tests.fakes.openai_server import ScriptedError

    solve = _reply("echo 'Hello, world!' > /app/hello.txt\n")
    done = _reply(None, done=True)
    overflow = ScriptedError.context_length_vllm(limit=8192, requested=9000)
    trials = [
        _run(tmp_path / "base", _Script([solve, done, done]), {}),
        # Mid-Harness with two candidates, and a context overflow that summarizes
        _run(tmp_path / "mid", _Script([[solve, _reply("printf 'Hello, world!\\n' > /app/hello.txt\n")],
                                        overflow, "summary", "questions", "answers", [done, done],
                                        [done, done]]), {"midharness.n": 2}),
    ]
    hb = load_handbook(SEED)
    source = HarnessSource.from_dir(SEED)
    index = SpanIndex(hb, source)
    boundaries: set[str] = set()
    for trial in trials:
        spans = read_spans(trial)
        assert spans.spans and spans.skipped_lines == 0
        mapping = map_trial(hb, trial, source)
        assert mapping.unmapped == [], [(s.name, s.function) for s in mapping.unmapped]
        for span in spans.spans:
            boundaries.add(index.boundary(span))
            # the code location alone (no rise.boundary) places the span on the same behaviours
            located = dict(span.attributes)
            located.pop("rise.boundary", None)
            plain = {"name": span.name, "attributes": located}
            assert [b.id for b in index.behaviours(plain)] == [b.id for b in index.behaviours(span)]
        steps = spans_of_behaviour(hb, trial, "completion.handshake")
        assert steps and all(s.episode is not None for s in steps)
    recorded = set(source.boundaries() or [])
    assert "rise.trial" in boundaries  # the monitor's root span, evidence of loop.process
    assert boundaries - {"rise.trial"} <= recorded
    # the two trials exercise the loop, parsing, dispatch, observation, completion, context and Mid-Harness
    for needed in ("loop:Agent.step", "parsing:parse_response", "tmux:TmuxSession.send_keys",
                   "observation:build_observation", "completion:CompletionHandshake.on_reply",
                   "context:ContextManager.summarize", "midharness.actor:MidHarnessActor.act",
                   "midharness.verifiers:VerifierCalls.ask", "midharness.actor:PassthroughActor.act"):
        assert needed in boundaries, f"no {needed} span in the trials"
