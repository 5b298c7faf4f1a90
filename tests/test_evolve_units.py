"""Every paid call is a unit (issue 30 item 5), without trials: the repair bound and booking (the controller's
checks with stand-in smoke and contracts, real git), the researcher's configured role, a saved call result used
instead of a second call, patience counted across invocations from the ledger, and ``rise audit`` on repairs.
The kill -9 runs are in tests/test_evolve_kill_units.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from evolve.experiment.ledger import RoundEnd, RoundStart
from evolve.loop import Evolution, EvolveOptions
from evolve.roles.runtime import RoleError
from evolve.round.controller import CandidateInput, Checks, Controller, Proposal
from evolve.round.model import Stop
from tests.test_controller_support import GOOD
from tests.test_evolve_support import make_experiment

URL = "http://127.0.0.1:9/v1"  # no trial runs here: nothing listens


def test_repairs_are_booked_units_at_most_max_repairs_per_candidate(tmp_path):
    """A smoke check that fails until the first repair, then contracts that never pass: two repairs in all (the
    README's bound), each a ``repair`` event under the candidate's one identity, then a final rejection."""
    exp = make_experiment(tmp_path / "runs", URL)
    calls: list[list[str]] = []

    async def smoke(harness_dir, out_dir):
        ok = (harness_dir / "FIXED.md").is_file()
        return ok, {"summary": "stand-in smoke", "failures": [] if ok else ["crashed at start"]}

    async def contracts(candidate, incumbent, frozen, repair, max_repairs, out_dir):
        for _ in range(max_repairs):  # a contracts loop that repairs by itself would call the hook here
            repair(candidate, ["inner"])
        return False, {"summary": "stand-in contracts failed", "failures": ["case x failed"]}

    def repair(candidate, failures):
        calls.append(list(failures))
        (candidate / "FIXED.md").write_text(f"repair {len(calls)}\n")
        return True

    ctl = Controller(exp, checks=Checks(smoke, contracts), repair=repair, max_repairs=2)
    commit, wt = ctl.creation.create(1, "v0", CandidateInput("verify", str(GOOD), Proposal()))
    with pytest.raises(Stop) as stop:
        asyncio.run(ctl.checking.run_checks("v0", commit, wt))
    assert stop.value.status == "rejected" and "contracts failed" in stop.value.reason
    assert len(calls) == 2 and "smoke check" in calls[0][0] and calls[1] == ["case x failed"]
    reps = exp.ledger.find("repair")
    assert [(r.stage, r.number, r.candidate) for r in reps] == [("smoke", 1, "r01:verify"),
                                                               ("contracts", 2, "r01:verify")]
    assert reps[0].commit == commit and reps[1].commit == reps[0].repaired_to
    (rej,) = exp.ledger.find("rejection")
    assert rej.commit == reps[1].repaired_to and rej.decision["final"]


def test_a_saved_repair_result_is_booked_on_resume_without_calling_again(tmp_path):
    """The repair's result is saved before its commit and event; a resume that finds it (a kill came between)
    commits the worktree's edits and books them, and the hook is not called again."""
    exp = make_experiment(tmp_path / "runs", URL)
    calls: list = []

    async def smoke(harness_dir, out_dir):
        ok = (harness_dir / "FIXED.md").is_file()
        return ok, {"summary": "stand-in smoke", "failures": [] if ok else ["crashed"]}

    async def contracts(candidate, incumbent, frozen, repair, max_repairs, out_dir):
        return True, {"summary": "passed"}

    def repair(candidate, failures):
        calls.append(failures)
        (candidate / "FIXED.md").write_text("fixed\n")
        return {"changed": True, "role_call": {"role": "implementer", "transcript": "implementer-x.jsonl"}}

    class Killed(Exception):
        pass

    def killed(candidate, failures):  # the first invocation dies in its repair call, before any edit
        raise Killed

    ctl = Controller(exp, checks=Checks(smoke, contracts), repair=killed)
    commit, wt = ctl.creation.create(1, "v0", CandidateInput("verify", str(GOOD), Proposal()))
    with pytest.raises(Killed):
        asyncio.run(ctl.checking.run_checks("v0", commit, wt))
    assert not exp.ledger.find("check_result", key=f"{commit}:smoke")[0].passed
    # what a kill right after a call's return leaves: the call's edits in the worktree and its saved result
    (wt / "FIXED.md").write_text("fixed\n")
    saved = exp.root / "checks" / commit[:12] / "repair.json"
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.write_text('{"changed": true, "role_call": {"role": "implementer", "transcript": "implementer-a.jsonl"}}')
    ctl.repair = repair
    new, _ = asyncio.run(ctl.checking.run_checks("v0", commit, wt))
    assert calls == [] and new != commit
    (rep,) = exp.ledger.find("repair")
    assert rep.repaired_to == new and rep.role_call["transcript"] == "implementer-a.jsonl"
    assert "FIXED.md" in [b.path for b in exp.repo.commit(new).tree.blobs]


class _Refusing:
    """A role backend test double that records the role it was given and fails at once (a refused call)."""

    name = "refusing"

    def __init__(self):
        from trials.endpoints.spec import PriceTable

        self.price, self.roles = PriceTable(), []

    async def run(self, job):
        self.roles.append(job.role)
        raise RoleError(job.role.name, "backend", "refused by the test double")

    def __call__(self, role, key):
        return self


def test_the_researcher_runs_its_configured_role_and_its_failure_is_saved(tmp_path):
    from evolve.roles.analysis.models import Group

    exp = make_experiment(tmp_path / "runs", URL, agents={"roles": {"researcher": {"limits": {"max_turns": 3}}}})
    corpus = tmp_path / "index.json"
    corpus.write_text("{}")
    backend = _Refusing()
    research = SimpleNamespace(enabled=True, index_path=corpus)
    evo = Evolution(exp, EvolveOptions(rounds=1), backend, research=research)
    g = Group(id="g1", name="verify", wish="check before a claim", members=["f1"], tasks=["write-json"],
              failing_runs=["write-json__2"], behaviours=[], signature="wish:check")
    rdir = exp.root / "rounds" / "r01"
    rdir.mkdir(parents=True)  # the analysis made it
    out = evo.steps.research(1, g, rdir)
    assert [r.limits.max_turns for r in backend.roles] == [3]  # the experiment's limits, not the registered 10
    assert out["outcome"] == "no_precedent" and "research failed" in out["statement"]
    (ev,) = exp.ledger.find("research")
    assert ev.role_call["error"] == "backend"
    (saved,) = (rdir / "units").glob("*.json")  # the failed call was saved before its event
    # a resume that finds it raises the saved failure again: no second call
    from evolve.roles.researcher import inputs_from_group, research_group

    with pytest.raises(RoleError, match="refused by the test double"):
        research_group(inputs_from_group(g), rdir, backend, research, saved=saved)
    assert len(backend.roles) == 1


def test_research_for_the_same_inputs_is_paid_once_and_a_failed_call_is_asked_again(tmp_path, monkeypatch):
    """A round that ended without a candidate leaves the incumbent, its analysis and its groups as they were, so
    the next round asks the researcher the same question: its finished answer is booked again with reused_from
    (the night of 2026-12-07 paid for one group's identical inputs four times); a failed call is not an answer."""
    from evolve.roles import researcher
    from evolve.roles.analysis.models import Group
    from evolve.views.rounds import round_record

    exp = make_experiment(tmp_path / "runs", URL)
    corpus = tmp_path / "index.json"
    corpus.write_text("{}")
    backend = _Refusing()
    evo = Evolution(exp, EvolveOptions(rounds=3), backend, research=SimpleNamespace(enabled=True, index_path=corpus))

    def group(gid, wish):
        return Group(id=gid, name=f"group {gid}", wish=wish, members=["f1"], tasks=["write-json"],
                     failing_runs=["write-json__2"], behaviours=["b.x"], signature=f"wish:{gid}")

    def rdir(n):
        (d := exp.root / "rounds" / f"r{n:02d}").mkdir(parents=True, exist_ok=True)
        return d

    # a failed call (the refusing backend, through the real research_group) is asked again the next round
    for n in (1, 2):
        assert "research failed" in evo.steps.research(n, group("g1", "check before a claim"), rdir(n))["statement"]
    assert len(backend.roles) == 2

    asked = []

    def answered(inputs, workspace, backend, research, **kw):
        asked.append(inputs.wish)
        return researcher.ResearchOutcome(group=inputs.group, wish=inputs.wish, outcome="no_precedent",
                                          statement=researcher.NO_PRECEDENT, call_id=f"call-{len(asked)}")

    monkeypatch.setattr(researcher, "research_group", answered)
    first = evo.steps.research(1, group("g2", "read the output before the next command"), rdir(1))
    assert asked == ["read the output before the next command"] and first["call_id"] == "call-1"
    for n in (2, 3):  # the same inputs: the first answer, no call; a chain names the event that paid for it
        assert evo.steps.research(n, group("g2", "read the output before the next command"), rdir(n)) == first
    assert len(asked) == 1
    reused = [e for e in exp.ledger.find("research", group="g2")]
    assert [e.role_call.get("reused_from") for e in reused] == [None, "r01:research:g2", "r01:research:g2"]
    assert all(e.inputs["wish"] == "read the output before the next command" for e in reused)
    # other inputs (another wish, as a new analysis after an adoption would give) are asked
    evo.steps.research(3, group("g2b", "wait for a long command"), rdir(3))
    assert asked == ["read the output before the next command", "wait for a long command"]
    # the morning's round page says where a reused answer came from
    (line,) = [r["statement"] for r in round_record(exp, 2).research if r["group"] == "g2"]
    assert "the answer of r01:research:g2" in line


def test_patience_counts_the_rounds_of_earlier_invocations(tmp_path, monkeypatch):
    """``--max-hours`` runs are resumed invocation after invocation: patience 2 stops after the second round
    without adoption even when each invocation ran one round."""
    exp = make_experiment(tmp_path / "runs", URL)

    def round_without_adoption(self, n):
        self.led.append(RoundStart(key=f"r{n:02d}:start", round=n, incumbent="v0"))
        self.led.append(RoundEnd(key=f"r{n:02d}:end", round=n, adopted=None, reason="nothing adopted"))
        return None, "nothing adopted", None

    monkeypatch.setattr(Evolution, "round", round_without_adoption)
    first = Evolution(exp, EvolveOptions(rounds=1, patience=2)).run()
    assert first.stopped == "1 round(s) done"
    second = Evolution(exp, EvolveOptions(rounds=5, patience=2, resume=True)).run()
    assert "patience 2" in second.stopped and [r["round"] for r in second.rounds] == [2]
    assert max(e.round for e in exp.ledger.find("round_end")) == 2


def test_audit_counts_repairs_and_flags_a_repair_paid_outside_the_books(tmp_path):
    from evolve.experiment.audit import audit
    from evolve.experiment.ledger import RepairEvent
    from evolve.roles.runtime.transcript import Transcript

    exp = make_experiment(tmp_path / "runs", URL)
    tr = exp.root / "rounds" / "r01" / "transcripts"

    def call(failures: str, end: bool = True) -> Path:
        t = Transcript.create(tr, "implementer")
        t.write("start", call_id=t.call_id, role="implementer", inputs={"proposal": {}, "failures": failures})
        if end:
            t.write("end", status="ok", role="implementer")
        t.close()
        return t.path

    booked = call("- case x failed")
    call("- case x failed", end=False)  # cut off by a kill, made again: allowed
    exp.ledger.append(RepairEvent(key="c1:repair", commit="c1", candidate="r01:v", stage="contracts", number=1,
                                  repaired_to="c2", role_call={"transcript": str(booked)}))
    a = audit(exp)
    assert a.problems == [] and a.repairs["contracts"] == 1 and a.repair_calls == {"ok": 1, "interrupted": 1}
    assert "repairs: 1 booked (contracts 1; 0 changed nothing); repair calls: 1 interrupted, 1 ok" in a.lines()
    call("- smoke failed")  # a repair that finished and that no event books
    a = audit(exp)
    assert len(a.problems) == 1 and "outside the books" in a.problems[0]
