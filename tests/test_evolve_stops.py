"""``rise evolve`` stopping conditions on crafted reference corpora (no trials run): no flipping task, no group
left after analysis, patience. The analysis and the ledger are the real ones; roles are the scripted role
backend of tests/test_evolve_support.py (a test double)."""

from __future__ import annotations

from evolve.experiment.ledger import Evaluation
from evolve.loop import Evolution, EvolveOptions
from evolve.round.candidates import set_toml_value
from tests.test_analysis_support import make_experiment
from tests.test_evolve_support import ScriptedRoles, calls_logged


def _with_reference(tmp_path, grid):
    exp = make_experiment(tmp_path, grid)
    commit = exp.commit_of("v0")  # the crafted corpus stands for v0's finished reference runs
    exp.ledger.append(Evaluation(key=f"{commit}:reference", commit=commit, purpose="reference", complete=True,
                                 metrics={}, job_dir="versions/v0/reference"))
    return exp


def test_no_flipping_task_stops_for_good_without_a_role_call(tmp_path):
    exp = _with_reference(tmp_path, {"alpha": "pp", "beta": "ff"})
    roles = ScriptedRoles({}, tmp_path / "calls.log")
    report = Evolution(exp, EvolveOptions(rounds=3, external_research=False), roles).run()
    assert report.final and report.stopped == "no flipping tasks in the reference corpus of v0"
    assert calls_logged(tmp_path / "calls.log") == []
    (end,) = exp.ledger.find("round_end")
    assert end.round == 1 and end.adopted is None
    assert (exp.root / "rounds" / "r01" / "evolve.md").is_file()


def test_no_group_left_stops_after_the_analysis(tmp_path):
    exp = _with_reference(tmp_path, {"alpha": "pf"})
    roles = ScriptedRoles({}, tmp_path / "calls.log", bad_findings=True)
    report = Evolution(exp, EvolveOptions(rounds=3, external_research=False), roles).run()
    assert report.final and report.stopped == "no group of findings to propose for"
    # the finding cited a step that does not exist: sent back once, then dropped; no proposer call
    assert [c.split()[0] for c in calls_logged(tmp_path / "calls.log")] == ["analyst", "analyst"]
    assert exp.ledger.find("proposal") == []


def test_patience_stops_after_rounds_without_adoption(tmp_path):
    exp = _with_reference(tmp_path, {"alpha": "pf"})
    assert set_toml_value(exp.config_path, "tasks.development", ["alpha"])  # the crafted task has no folder
    failing = {"mechanism": "x-y", "summary": "a proposal whose implementation fails",
               "behaviour_change": "nothing at all", "setting": "x.y"}
    roles = ScriptedRoles({1: [failing], 2: [failing]}, tmp_path / "calls.log")
    report = Evolution(exp, EvolveOptions(rounds=5, patience=2, external_research=False), roles).run()
    # the scripted implementer knows no mechanism "x-y": its call fails, the round adopts nothing
    assert report.stopped == "2 round(s) in a row without adoption (patience 2)" and report.final
    assert [r["round"] for r in report.rounds] == [1, 2]
    assert [e.status for e in exp.ledger.find("implementation")] == ["failed", "failed"]


def test_research_references_reach_the_proposer(tmp_path):
    """Research on: the researcher (scripted, through the real search_corpus and read_reference tools on a
    local corpus) cites a reference; the loop records it and the proposer's prompt carries it."""
    from evolve.roles.runtime import read_transcript
    from research.api import Research, ResearchSettings

    (tmp_path / "alpha").mkdir()
    (tmp_path / "alpha" / "agent.py").write_text(
        'def finish(agent, claim):\n    """Confirm a completion claim once, then run the checks."""\n'
        '    return agent.run_checks()\n')
    corpus = tmp_path / "corpus.toml"
    corpus.write_text('version = 1\n[[sources]]\nkind = "local"\nname = "alpha"\npath = "alpha"\n')
    research = Research(ResearchSettings(corpus=str(corpus)), root=tmp_path / "cache")
    research.sync(log=lambda m: None)
    exp = _with_reference(tmp_path / "x", {"alpha": "pf"})
    assert set_toml_value(exp.config_path, "tasks.development", ["alpha"])
    failing = {"mechanism": "x-y", "summary": "a proposal whose implementation fails",
               "behaviour_change": "nothing at all", "setting": "x.y"}
    roles = ScriptedRoles({1: [failing]}, tmp_path / "calls.log")
    Evolution(exp, EvolveOptions(rounds=1), roles, research=research).run()
    (ev,) = exp.ledger.find("research")
    assert ev.outcome["outcome"] == "references" and ev.role_call["role"] == "researcher"
    ref = ev.outcome["references"][0]["reference"]
    assert ref["framework"] == "alpha" and ref["path"] == "agent.py"
    (proposer,) = (exp.root / "rounds" / "r01" / "transcripts").glob("proposer-*.jsonl")
    prompt = next(r["text"] for r in read_transcript(proposer) if r["kind"] == "prompt")
    assert ref["id"] in prompt and "confirm once, then runs the checks" in prompt


def test_a_failed_proposal_or_implementation_passes_the_turn_to_the_next_group(tmp_path):
    """The night of 2026-12-07 ended its round on the one selected group's invalid proposal, five groups untried.
    Now, with one candidate wanted, the next ranked groups are tried (spare_groups, 2 by default) until one is
    implemented; with spare_groups 0 only the first is."""
    failing = {"mechanism": "x-y", "summary": "a proposal whose implementation fails",
               "behaviour_change": "nothing at all", "setting": "x.y"}
    bad = {"mechanism": "NOT A SLUG", "summary": "short"}  # invalid: the proposer's call fails
    for spare, tried in ((2, 3), (0, 1)):
        exp = _with_reference(tmp_path / f"spare{spare}", {"alpha": "pf", "beta": "pf", "gamma": "pf", "delta": "pf"})
        assert set_toml_value(exp.config_path, "tasks.development", ["alpha", "beta", "gamma", "delta"])
        roles = ScriptedRoles({1: [bad, failing, failing, failing]}, tmp_path / f"calls{spare}.log", split_groups=True)
        report = Evolution(exp, EvolveOptions(rounds=1, external_research=False, spare_groups=spare), roles).run()
        assert report.final and report.rounds[0]["adopted"] is None
        proposals = exp.ledger.find("proposal")
        assert len(proposals) == tried, [(p.key, p.status) for p in proposals]
        assert len({p.key for p in proposals}) == tried  # each a group of its own
        assert proposals[0].status == "failed"
        assert [e.status for e in exp.ledger.find("implementation")] == ["failed"] * (tried - 1)
        # the morning page says why the round has no power line (no candidate reached the evaluation)
        from evolve.views.power import NOT_NEEDED, round_power

        assert round_power(exp, 1).measured == NOT_NEEDED
        # resumed, nothing is tried again
        again = Evolution(exp, EvolveOptions(rounds=1, resume=True, external_research=False, spare_groups=spare),
                          roles).run()
        assert again.final and len(exp.ledger.find("proposal")) == tried
