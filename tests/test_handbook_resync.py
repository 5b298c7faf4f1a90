"""Call-graph suggestions and the behaviours a change touches, from two directories or two git revisions."""

from __future__ import annotations

import shutil
from pathlib import Path

import git
import pytest

from handbook.callgraph import CallGraph, suggest, unclaimed
from handbook.model import load_handbook
from handbook.resync import affected_behaviours, changed_functions
from handbook.source import HarnessSource

TOY = Path(__file__).parent / "data" / "handbook_toy" / "toyharness"


@pytest.fixture
def toy(tmp_path) -> Path:
    copy = tmp_path / "new" / "toyharness"
    shutil.copytree(TOY, copy)
    return copy


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_call_graph_resolves_self_attributes_imports_and_references():
    graph = CallGraph.build(HarnessSource.from_dir(TOY))
    step = {e.callee: e.how for e in graph.callees("loop:Agent.step")}
    assert step == {"picker.pick:Picker.pick": "call",  # self.picker typed by build_picker's "-> Picker"
                    "parsing:parse_response": "call",  # module attribute through `from . import parsing`
                    "loop:Agent.execute_commands": "call", "loop:BaseAgent.log": "call"}
    init = {e.callee: e.how for e in graph.callees("loop:Agent.__init__")}
    assert init == {"picker.pick:build_picker": "call", "parsing:parse_response": "ref"}
    assert {e.callee for e in graph.callees("picker.pick:build_picker")} == {"picker.pick:Picker.__init__"}
    assert [e.caller for e in graph.callers("loop:_cap_duration")] == ["loop:Agent.execute_commands"]


def test_suggest_stops_at_other_behaviours():
    source = HarnessSource.from_dir(TOY)
    hb = load_handbook(TOY)
    by_id = {s.behaviour: s for s in suggest(hb, source)}
    assert [ref for ref, _ in by_id["loop.dispatch"].add] == ["loop:_cap_duration"]
    assert [ref for ref, _ in by_id["parse.json"].add] == ["parsing:_find_json"]
    assert by_id["parse.json"].add[0][1] == ["parsing:parse_response", "parsing:_find_json"]
    # the loop reaches parsing, but parsing's helper is parsing's to claim, not the loop's
    assert by_id["loop.episodes"].add == []
    assert ("parsing:parse_response", "parse.json") in by_id["loop.episodes"].calls_into
    assert unclaimed(hb, source) == ["loop:_cap_duration", "parsing:_find_json", "picker.pick:Picker.__init__",
                                     "picker.pick:_score"]


def test_layout_and_comment_changes_do_not_count(toy):
    _edit(toy / "parsing.py", "    body = _find_json(text)\n", "    # find it\n    body = _find_json(  text )\n")
    assert changed_functions(HarnessSource.from_dir(TOY), HarnessSource.from_dir(toy)) == {}


def test_affected_between_two_directories(toy):
    _edit(toy / "model_call.py", "return [await self.call(messages) for _ in range(n)]",
          "return [await self.call(messages) for _ in range(n + 0)]")
    _edit(toy / "parsing.py", 'start = text.find("{")', 'start = text.rfind("{")')  # unclaimed helper
    _edit(toy / "settings.toml", "temperature = 0.8", "temperature = 0.7")
    _edit(toy / "loop.py", "\ndef _cap_duration", "\ndef _unused() -> None:\n    pass\n\n\ndef _cap_duration")
    report = affected_behaviours(HarnessSource.from_dir(TOY), HarnessSource.from_dir(toy))
    assert report.functions == {"model_call:ModelCaller.sample": "modified", "parsing:_find_json": "modified",
                                "loop:_unused": "added"}
    assert report.settings == {"picker.temperature": "changed"}
    reasons = {a.behaviour: a.reasons for a in report.affected}
    assert reasons == {
        "parse.json": [("calls changed helper parsing:_find_json (modified) via "
                        "parsing:parse_response → parsing:_find_json")],
        "model.call": ["function model_call:ModelCaller.sample modified"],
        "model.pick": ["setting picker.temperature changed"],
    }
    assert report.uncovered == ["loop:_unused"]


def test_affected_between_git_revisions_with_rename(tmp_path):
    repo_dir = tmp_path / "repo"
    shutil.copytree(TOY, repo_dir / "harness")
    repo = git.Repo.init(repo_dir)
    repo.git.add(A=True)
    repo.index.commit("v1")
    loop = repo_dir / "harness" / "loop.py"
    _edit(loop, "def execute_commands(", "def dispatch(")
    _edit(loop, "self.execute_commands(", "self.dispatch(")
    _edit(repo_dir / "harness" / "HANDBOOK.toml", '"loop:Agent.execute_commands"', '"loop:Agent.dispatch"')
    repo.git.add(A=True)
    repo.index.commit("rename dispatch")
    old = HarnessSource.from_git(repo_dir, "HEAD~1", "harness")
    new = HarnessSource.from_git(repo_dir, "HEAD", "harness")
    assert old.name == "harness" and "loop.py" in old.files
    report = affected_behaviours(old, new, "HEAD~1", "HEAD")
    reasons = {a.behaviour: a.reasons for a in report.affected}
    assert reasons["loop.dispatch"] == ["function loop:Agent.dispatch added",
                                        "function loop:Agent.execute_commands removed"]
    assert reasons["loop.episodes"] == ["function loop:Agent.step modified"]
    assert set(reasons) == {"loop.dispatch", "loop.episodes"}


def test_unknown_revision_is_a_clear_error(tmp_path):
    from handbook.model import HandbookError

    git.Repo.init(tmp_path)
    with pytest.raises(HandbookError, match="cannot read revision"):
        HarnessSource.from_git(tmp_path, "nope")


def test_table_of_functions_links_its_user_to_every_entry(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "ways.py").write_text("def fast():\n    pass\n\n\ndef slow():\n    pass\n\n\n"
                                 "WAYS = {'fast': fast, 'slow': slow}\n")
    (pkg / "use.py").write_text("from .ways import WAYS\n\n\ndef go(kind):\n    return WAYS[kind]()\n")
    graph = CallGraph.build(HarnessSource.from_dir(pkg))
    assert {(e.callee, e.how) for e in graph.callees("use:go")} == {("ways:fast", "table"), ("ways:slow", "table")}
