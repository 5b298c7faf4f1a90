"""The analysis pipeline on a real experiment store with crafted traces and a scripted role backend (a test
double for the model; the runtime, ledger, evidence checks, ranking and records are the real ones)."""

from __future__ import annotations

import json

from evolve.experiment.ledger import Ledger
from evolve.roles.analysis.pipeline import Analysis
from evolve.roles.runtime import read_transcript
from tests.test_analysis_support import ScriptedBackend, finding_answer, make_experiment


def answers(bad_first: set[str] = frozenset(), always_bad: set[str] = frozenset(), review="accept"):
    """An answer function: analyst cites the failed run (episode 99 when the task is in a 'bad' set)."""
    seen: dict[str, int] = {}

    def answer(role, prompt, job):
        if role == "analyst":
            success = prompt.split("Run **", 1)[1].split("**", 1)[0]
            failure = prompt.split("run\n**", 1)[1].split("**", 1)[0] if "run\n**" in prompt else \
                prompt.split("; run **", 1)[1].split("**", 1)[0]
            task = failure.split("__r")[0]
            seen[task] = seen.get(task, 0) + 1
            wrong = task in always_bad or (task in bad_first and seen[task] == 1)
            return finding_answer(success, failure, 99 if wrong else 0, step=2)
        if role == "grouper":
            ids = [ln.split()[1] for ln in prompt.splitlines() if ln.startswith("- f")]
            return {"groups": [{"name": "verify before claiming", "wish": "check before a claim", "members": ids}]}
        names = [ln[3:] for ln in prompt.splitlines() if ln.startswith("## ")]
        return {"reviews": [{"group": n, "verdict": review, "applies_to_all": True, "distinct": True,
                             "reason": "every member claimed without the named check"} for n in names]}
    return answer


def test_pipeline_end_to_end_with_sent_back_finding(tmp_path):
    exp = make_experiment(tmp_path, {"alpha": "pf", "beta": "fp", "gamma": "ff", "delta": "pp"})
    backend = ScriptedBackend(answers(bad_first={"beta"}))
    result = Analysis(exp, backend).run()
    assert result.pairs.flipping == ["alpha", "beta"] and result.pairs.all_failure == ["gamma"]
    assert result.pairs.at_risk == ["delta"]
    assert [r for r, _ in backend.calls] == ["analyst", "analyst", "analyst", "grouper", "reviewer"]
    assert [f.id for f in result.findings] == ["f1", "f2"]
    [g] = result.groups
    assert (g.rank, g.tasks, g.members, g.status) == (1, ["alpha", "beta"], ["f1", "f2"], "ranked")
    assert g.failing_runs == ["alpha__r2", "beta__r1"] and g.signature == "completion.handshake"
    kinds = [(e.kind, getattr(e, "status", None)) for e in Ledger(exp.root / "ledger.jsonl").events]
    assert kinds == [("finding", "valid"), ("finding", "sent_back"), ("finding", "valid"), ("group", None),
                     ("review", None)]
    sent_back = Ledger(exp.root / "ledger.jsonl").events[1]
    assert "no episode 99" in sent_back.reason
    out = exp.root / "rounds" / "r01" / "analysis"
    data = json.loads((out / "analysis.json").read_text())
    assert data["costs"]["analyst"]["calls"] == 3 and data["costs"]["analyst"]["usd"] > 0
    summary = (out / "summary.md").read_text()
    assert "### 1. verify before claiming" in summary and "gamma" in summary and "delta" in summary
    assert len(list((out / "transcripts").glob("*.jsonl"))) == 5


def test_a_finding_citing_missing_steps_is_sent_back_once_then_dropped(tmp_path, caplog):
    exp = make_experiment(tmp_path, {"alpha": "pf"})
    backend = ScriptedBackend(answers(always_bad={"alpha"}))
    result = Analysis(exp, backend).run()
    assert [r for r, _ in backend.calls] == ["analyst", "analyst"]  # sent back once, no grouping of nothing
    assert result.findings == [] and result.groups == []
    [dropped] = [e for e in Ledger(exp.root / "ledger.jsonl").events if getattr(e, "status", "") == "dropped"]
    assert "alpha__r2 has no episode 99" in dropped.reason
    assert "dropped" in caplog.text and "alpha:1:2" in caplog.text
    retry_prompt = backend.calls[1][1]
    assert "sent back" in retry_prompt and "no episode 99" in retry_prompt


def test_rerun_makes_no_call_and_gives_the_same_groups(tmp_path):
    exp = make_experiment(tmp_path, {"alpha": "pf", "beta": "pf"})
    first = Analysis(exp, ScriptedBackend(answers())).run()
    again = ScriptedBackend(answers())
    second = Analysis(exp, again).run()
    assert again.calls == [] and second.groups == first.groups and second.findings == first.findings


def test_disputed_groups_stop_and_rejected_groups_are_excluded(tmp_path):
    exp = make_experiment(tmp_path, {"alpha": "pf", "beta": "pf"})
    result = Analysis(exp, ScriptedBackend(answers(review="dispute"))).run()
    assert [g.status for g in result.groups] == ["disputed"] and result.groups[0].rank is None


def test_a_single_finding_is_not_sent_to_the_reviewer(tmp_path):
    """One finding makes one group whose wish is its own: nothing pooled, nothing to merge, so no reviewer call
    (a live 1.5B reviewer disputed such a group, giving its wish as the reason, and ended the round)."""
    exp = make_experiment(tmp_path, {"alpha": "pf"})
    backend = ScriptedBackend(answers(review="dispute"))  # it would dispute, if it were asked
    result = Analysis(exp, backend).run()
    assert [r for r, _ in backend.calls] == ["analyst"]
    [group] = result.groups
    assert group.status == "ranked" and group.rank == 1 and "no reviewer call" in group.reason
    [review] = Ledger(exp.root / "ledger.jsonl").find("review")
    assert review.role_call == {"role": "reviewer", "skipped": "one finding"}


def test_ablation_changes_only_what_the_analyst_is_given(tmp_path):
    exp = make_experiment(tmp_path, {"alpha": "pf"})
    full, abl = ScriptedBackend(answers()), ScriptedBackend(answers())
    r1 = Analysis(exp, full).run()
    r2 = Analysis(exp, abl, harness_evidence=False).run()
    assert r1.findings and r2.findings
    t_full = read_transcript(r1.events[0]["role_call"]["transcript"])
    t_abl = read_transcript(r2.events[0]["role_call"]["transcript"])
    start_full, start_abl = t_full[0], t_abl[0]
    assert {"spans", "handbook"} <= set(start_full["tools"]) and not {"spans", "handbook"} & set(start_abl["tools"])
    changed = {k for k in start_full["inputs"] if start_full["inputs"][k] != start_abl["inputs"][k]}
    assert changed <= {"success_digest", "failure_digest", "harness_evidence", "handbook", "behaviour_ids",
                       "success_path", "failure_path"}
    assert "handbook" in changed and "completion.handshake" in start_full["inputs"]["handbook"]
    assert start_abl["inputs"]["handbook"] == "" and "[" not in start_abl["inputs"]["failure_digest"].split("\n")[1]
    digest_full = next(r for r in t_full if r["kind"] == "tool_result")["result"]
    digest_abl = next(r for r in t_abl if r["kind"] == "tool_result")["result"]
    assert "[dispatch.commands]" in digest_full and "dispatch.commands" not in digest_abl
    ws = exp.root / "rounds" / "r01" / "analysis-no-harness-evidence" / "workspace-trajectories"
    assert not list(ws.rglob("spans.jsonl")) and not list(ws.rglob("HANDBOOK*"))
    assert (ws / "harness" / "loop.py").is_file()


def test_rise_analyze_names_bad_inputs(tmp_path):
    import shutil

    from typer.testing import CliRunner

    from rise.cli import app

    exp = make_experiment(tmp_path, {"alpha": "pf"})
    runner = CliRunner()
    out = runner.invoke(app, ["analyze", str(exp.root), "--version", "v7"])
    assert out.exit_code == 1 and "no version 'v7' (versions: v0)" in out.output
    shutil.rmtree(exp.root / "versions")
    out = runner.invoke(app, ["analyze", str(exp.root)])
    assert out.exit_code == 1 and "v0 has no reference corpus" in out.output
    out = runner.invoke(app, ["analyze", "nope", "--runs-dir", str(tmp_path)])
    assert out.exit_code == 1 and "no experiment 'nope'" in out.output


def test_a_span_cited_under_the_other_run_is_attributed_not_sent_back(tmp_path):
    """The real 1.5B analyst cited the passing run's span under the failing run (twice, so the finding was lost):
    a span id names its run, so the finding is kept with the reference attributed, and the summary says so."""
    from evolve.roles.analysis.evidence import TraceIndex
    from evolve.roles.analysis.records import render_groups

    exp = make_experiment(tmp_path, {"alpha": "pf"})
    ref = exp.root / "versions" / "v0" / "reference"
    passing_span = next(iter(TraceIndex.load(ref / "alpha__r1").spans))

    def with_review(role, prompt, job):  # one finding: no grouper call
        if role == "analyst":
            return finding_answer("alpha__r1", "alpha__r2", 0, span=passing_span)
        names = [ln[3:] for ln in prompt.splitlines() if ln.startswith("## ")]
        return {"reviews": [{"group": n, "verdict": "accept", "applies_to_all": True, "distinct": True,
                             "reason": "one member"} for n in names]}

    backend = ScriptedBackend(with_review)
    result = Analysis(exp, backend).run()
    assert [r for r, _ in backend.calls].count("analyst") == 1  # not sent back
    [f] = result.findings
    assert {r.trial for r in f.answer.evidence} == {"alpha__r1"} and f.answer.evidence[0].span == passing_span
    [valid] = [e for e in Ledger(exp.root / "ledger.jsonl").events if getattr(e, "status", "") == "valid"]
    assert "the span is alpha__r1's" in valid.reason
    assert f"corrected: pair {f.pair}: alpha__r2 ep0 span {passing_span}" in render_groups(result)


def test_a_garbled_span_is_cut_after_the_retry_and_the_finding_kept(tmp_path):
    """The live 1.5B analyst lost a finding for a span id no run recorded, cited again after being sent back:
    the reference keeps its step, the span is cut, and the finding is kept with a note saying so. A reference
    with any other problem is left out; a finding with nothing grounded left is still dropped (test above)."""
    from evolve.roles.analysis.records import render_groups

    exp = make_experiment(tmp_path, {"alpha": "pf"})

    def garbled(role, prompt, job):
        if role == "analyst":
            out = finding_answer("alpha__r1", "alpha__r2", 0, step=2, span="00000000deadbeef")
            out["evidence"].append({"trial": "alpha__r9", "episode": 0})  # not a run of the pair
            return out
        names = [ln[3:] for ln in prompt.splitlines() if ln.startswith("## ")]
        return {"reviews": [{"group": n, "verdict": "accept", "applies_to_all": True, "distinct": True,
                             "reason": "one member"} for n in names]}

    backend = ScriptedBackend(garbled)
    result = Analysis(exp, backend).run()
    assert [r for r, _ in backend.calls].count("analyst") == 2  # sent back once, as before
    assert "no span 00000000deadbeef" in backend.calls[1][1]
    [f] = result.findings
    assert [(r.trial, r.episode, r.step, r.span) for r in f.answer.evidence] == [("alpha__r2", 0, 2, None)]
    assert f.answer.differences[0].evidence[0].span is None
    events = Ledger(exp.root / "ledger.jsonl").events
    assert [getattr(e, "status", None) for e in events if e.kind == "finding"] == ["sent_back", "valid"]
    [valid] = [e for e in events if getattr(e, "status", "") == "valid"]
    assert "no run of the pair has span 00000000deadbeef; cited as alpha__r2 ep0 step2" in valid.reason
    assert "left out: alpha__r9 ep0: trial 'alpha__r9' is not one of this pair's runs" in valid.reason
    assert "corrected: pair alpha:1:2: left out: alpha__r9" in render_groups(result)


def test_a_finding_left_with_only_whole_run_references_is_dropped(tmp_path):
    """Cutting a garbled span from a reference that named no step leaves a whole-episode reference: that does not
    ground a finding, so it is dropped with the problems as the reason."""
    exp = make_experiment(tmp_path, {"alpha": "pf"})
    backend = ScriptedBackend(lambda role, prompt, job: finding_answer("alpha__r1", "alpha__r2", 0,
                                                                         span="00000000deadbeef"))
    result = Analysis(exp, backend).run()
    assert result.findings == [] and [r for r, _ in backend.calls] == ["analyst", "analyst"]
    [dropped] = [e for e in Ledger(exp.root / "ledger.jsonl").events if getattr(e, "status", "") == "dropped"]
    assert "has no span 00000000deadbeef" in dropped.reason
