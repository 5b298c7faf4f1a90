"""``rise evolve`` after kill -9 at each stage, and a $ budget that stops the loop before the unit that would
exceed it (real parts and test doubles as in tests/test_evolve_loop.py; see tests/test_evolve_support.py).

Counting: every role call the scripted backend receives is logged with a hash of its prompt, every finished
call has a transcript, every trial a ``trial_done`` event; after the kills and resumes each is there once."""

from __future__ import annotations

from pathlib import Path

import pytest

from evolve.loop import Evolution, EvolveOptions
from evolve.roles.runtime import read_transcript
from evolve.round.candidates import set_toml_value
from tests.test_evolve_support import (
    ScriptedRoles,
    calls_logged,
    kill_at_each_stage_then_resume,
    make_experiment,
)

pytestmark = [pytest.mark.tmux, pytest.mark.sandbox]
REPO = Path(__file__).resolve().parents[1]
# research is off here (its unit makes no call), so its kill point is left out to keep the test short
# the contracts fail once and are repaired: `repair` right after the repair's event, before the repaired commit's
# smoke check
STAGES = ["reference:trial@2", "analysis-finding", "evolve-proposal", "evolve-implementation", "smoke",
          "repair", "evaluation:trial@2", "control:trial@2", "evolve-grade"]  # control: grading runs



def _ends(root: Path) -> list[dict]:
    return [r for p in (root / "rounds").rglob("transcripts/*.jsonl") for r in read_transcript(p)
            if r["kind"] == "end"]


@pytest.mark.timeout(1200)  # 2.5-5 min on this shared 2-core machine; room for a loaded CI host
def test_kill_at_each_stage_then_resume_repeats_no_role_call_or_trial(tmp_path, flaky_server):
    runs, calls = tmp_path / "runs", tmp_path / "calls.log"
    exp = make_experiment(runs, flaky_server.base_url)
    assert "ADOPTED ['v1']" in kill_at_each_stage_then_resume(runs, calls, "verify-completion+repair", STAGES)

    led = exp.ledger
    keys = [e.key for e in led.events]
    assert len(keys) == len(set(keys))
    # each role called once (the implementer twice: the candidate, then the repair of its contract), each
    # finished call has one transcript (one finding: no grouper or reviewer call)
    logged = calls_logged(calls)
    assert sorted(c.split()[0] for c in logged) == ["analyst", "implementer", "implementer", "proposer"]
    assert len(set(logged)) == len(logged)
    # the repair was booked once, as a unit of its own, with its call's transcript; the repaired commit was then
    # checked from the smoke check on
    (impl,) = led.find("implementation")
    (rep,) = led.find("repair")
    assert rep.commit == impl.commit and rep.stage == "contracts" and rep.number == 1 and rep.repaired_to
    assert rep.role_call["transcript"] and rep.role_call["role"] == "implementer"
    assert not led.find("check_result", key=f"{impl.commit}:contracts")[0].passed
    assert led.find("check_result", key=f"{rep.repaired_to}:smoke")[0].passed
    assert led.find("check_result", key=f"{rep.repaired_to}:contracts")[0].passed
    ends = _ends(exp.root)
    assert len(ends) == len(logged) and all(r["status"] == "ok" for r in ends)
    # every trial ran once: 4 reference, 1 screening, 4 evaluation, 4 fresh incumbent runs the grade is graded
    # against (the predicted fix and the task at risk × r); one trial folder each
    done = led.find("trial_done")
    assert len(done) == 13 and all(e.status != "infra" for e in done)
    assert len([e for e in done if ":grading:r01:" in e.key]) == 4
    folders = [p for p in exp.root.rglob("result.json") if "checks" not in p.parts and "worktrees" not in p.parts]
    assert len({p.resolve() for p in folders}) == 13
    (adoption,) = led.find("adoption")
    (grade,) = led.find("grade")
    assert adoption.version == "v1" and grade.grade["grade"] == "effective"


def test_usd_budget_stops_before_the_unit_then_resume_after_raising_it(tmp_path, flaky_server):
    exp = make_experiment(tmp_path / "runs", flaky_server.base_url, budgets={"max_usd": 0.3},
                          agents={"roles": {"proposer": {"limits": {"max_usd": 0.5}}}})
    quote = (REPO / "data" / "starter" / "write-json" / "instruction.md").read_text().splitlines()[0]
    overfit = {"mechanism": "json-hint", "summary": f"Tell the model: {quote}", "behaviour_change": "a hint in "
               "the first prompt", "setting": "prompt.hint", "predicted_fixes": ["write-json"]}
    roles = ScriptedRoles({1: [overfit]}, tmp_path / "calls.log")
    first = Evolution(exp, EvolveOptions(rounds=1, external_research=False), roles).run()
    assert not first.final and "$ budget" in first.stopped and "reserved for proposal" in first.stopped
    assert "max_usd $0.3000" in first.stopped
    assert [c.split()[0] for c in calls_logged(tmp_path / "calls.log")] == ["analyst"]  # one finding: no reviewer
    assert exp.ledger.find("proposal") == [] and exp.ledger.find("evolve_stop")[0].final is False
    trials = len(exp.ledger.find("trial_done"))

    set_toml_value(exp.config_path, "budgets.max_usd", 5.0)
    second = Evolution(exp, EvolveOptions(rounds=1, resume=True, external_research=False), roles).run()
    assert second.final and second.stopped == "1 round(s) done"
    assert [c.split()[0] for c in calls_logged(tmp_path / "calls.log")] == ["analyst", "proposer"]
    assert len(exp.ledger.find("trial_done")) == trials  # nothing ran twice
    # the proposal quoted a development task's instruction: refused, recorded, nothing implemented
    (prop,) = exp.ledger.find("proposal")
    assert prop.status == "refused" and "write-json/instruction.md" in prop.reason
    assert exp.ledger.find("implementation") == []
    (end,) = exp.ledger.find("round_end")
    assert end.adopted is None and "no candidate was implemented" in end.reason
