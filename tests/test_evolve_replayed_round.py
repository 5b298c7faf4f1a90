"""A ``rise evolve`` round in which every role but the implementer runs from a recording of a real run.

The round is the CI round of ``tests/test_evolve_loop.py`` (hello-file and write-json × r = 2, local sandbox, the
agent's model the early-claiming test double :class:`~tests.test_evolve_support.FlakyClaimer` over real HTTP),
with its roles split:

- analyst, grouper, reviewer, researcher and proposer replay ``tests/data/evolve/recordings/bundled-1.5b``: one
  recording per role call, made by the real bundled Qwen2.5-Coder-1.5B on llama.cpp in this very round (the
  round's inputs are deterministic: the same trials, traces, Handbook and pinned research corpus give the same
  prompts, so each request must match its recording exactly; a miss fails the call by name);
- the implementer is :class:`~tests.test_evolve_support.ScriptedRoles`, a **scripted coding agent** (a test
  double, named as one) that issues through the real tools the calls a capable coding agent would make to build
  a known-good mechanism, executable completion verification (``tests/data/candidates/build.py``), whatever name
  the recorded proposal gave its mechanism: a 1.5B model cannot yet build a working one.

The test asserts what the platform does with the recorded answers (the same findings, groups, research outcome and
proposal come out; the candidate is implemented through the real tools, passes the real smoke check, is screened,
evaluated against the baseline and adopted as v1; its predictions are graded; no recorded call is made twice or
left unplayed), never what a 1.5B model "should" say.

Re-record (after changing a role's prompt, its tools, the seed's Handbook, settings or code, the research corpus
pins or the index's ranking; a replay miss names the call) with the 1.5B served, e.g. by ``scripts/run.sh``:

    python tests/test_evolve_replayed_round.py [BASE_URL]
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if __name__ == "__main__":  # run as a script (re-recording): the repository root on the path
    sys.path.insert(0, str(REPO))

from evolve.loop import Evolution, EvolveOptions
from evolve.roles.runtime import make_backend, read_transcript
from tests.fakes.openai_server import ScriptedServer
from tests.test_evolve_support import (
    FlakyClaimer,
    ScriptedRoles,
    calls_logged,
    kill_at_each_stage_then_resume,
    make_experiment,
    repairing_checks,
)

RECORDINGS = REPO / "tests" / "data" / "evolve" / "recordings" / "bundled-1.5b"
EXPECTED = RECORDINGS / "expected.json"
MODEL = "qwen2.5-coder-1.5b"
BUILT = "verify-completion"  # what the scripted implementer builds


def recording_name(role: str, key: str) -> str:
    """One file per role call: ``<role>--<call key>.yaml`` with the key made file-safe."""
    return f"{role}--{re.sub(r'[^A-Za-z0-9_.-]+', '-', key)}.yaml"


def factory(recordings: Path, implementer: ScriptedRoles, record_url: str | None = None,
            record_roles: set[str] | None = None):
    """The round's backends: the scripted implementer, and a replay (or, with ``record_url``, a recording against
    the real model there) of every other role call (``record_roles``: record only these, replay the others)."""
    from trials.endpoints.spec import EndpointSpec

    # the same request settings when replaying (the base URL is not matched: a replay never connects)
    endpoint = EndpointSpec(base_url=record_url or "http://127.0.0.1:9/v1", model=MODEL, max_output_tokens=1024,
                            timeout_sec=1200)

    def backends(role: str, key: str):
        if role == "implementer":
            return implementer
        return make_backend("replay", endpoint, recording=recordings / recording_name(role, key),
                            record=record_url is not None and (record_roles is None or role in record_roles))

    return backends


def default_corpus():
    from tests.test_research_bundled_replay import default_corpus as corpus

    return corpus()


def replayed_evolution(exp, calls: Path, recordings: Path = RECORDINGS, record_url: str | None = None, *,
                       rounds: int = 1, resume: bool = False, run_check: tuple[str, ...] = (BUILT,),
                       record_roles: set[str] | None = None):
    """The loop of this round on ``exp`` (also tests/evolve_driver.py's ``replayed``), and its scripted
    implementer (``run_check``: the mechanisms whose implementer calls the real, slow ``check()``)."""
    implementer = ScriptedRoles({}, calls, run_check=run_check, build_as=BUILT)
    evolution = Evolution(exp, EvolveOptions(rounds=rounds, resume=resume),
                          factory(recordings, implementer, record_url, record_roles),
                          checks=repairing_checks(set()),
                          research=default_corpus())
    return evolution, implementer


def run_round(work: Path, base_url: str, recordings: Path, record_url: str | None = None,
              record_roles: set[str] | None = None):
    exp = make_experiment(work / "runs", base_url)
    evolution, implementer = replayed_evolution(exp, work / "calls.log", recordings, record_url,
                                                record_roles=record_roles)
    return exp, evolution.run(), implementer


def summary(exp) -> dict:
    """What the round made of the recorded answers, from the ledger and the analysis (compared between the
    recording run and every replay)."""
    led = exp.ledger
    analysis = json.loads((exp.root / "rounds" / "r01" / "analysis" / "analysis.json").read_text())
    (research,) = led.find("research") or [None]
    props = led.find("proposal")
    return {"rounds": [[e.round, e.adopted] for e in led.find("round_end")],
            "stopped": [e.reason for e in led.find("evolve_stop")],
            "findings": len(analysis["findings"]), "groups": [g["name"] for g in analysis["groups"]],
            "research": research.outcome["outcome"] if research else None,
            "references": [c["reference"]["id"] for c in research.outcome.get("references", [])] if research else [],
            "proposals": [[p.slug, p.status] for p in props],
            "mechanism": props[0].proposal.get("mechanism") if props else None,
            "tier": props[0].proposal.get("tier") if props else None,
            "settings": props[0].proposal.get("settings") if props else None,
            "implementations": [[e.slug, e.status, e.report.get("tier", "code")] for e in led.find("implementation")],
            "checks": [f"{e.stage}:{'passed' if e.passed else 'failed'}" for e in led.find("check_result")],
            "screenings": ["passed" if e.passed else "failed" for e in led.find("screening")],
            "decisions": [e.kind for e in led.find("adoption") + led.find("rejection")],
            "grades": [g.grade.get("grade") for g in led.find("grade")],
            "trials": sorted(f"{e.purpose}:{e.task}:{e.rep}:{e.status}" for e in led.find("trial_done"))}


def role_transcripts(exp) -> list[Path]:
    return [p for p in (exp.root / "rounds").rglob("transcripts/*.jsonl") if not p.name.startswith("implementer")]



pytestmark = [pytest.mark.tmux, pytest.mark.sandbox]


@pytest.mark.timeout(1200)  # about 2 min here; room for a loaded CI host
def test_a_round_with_recorded_real_roles_adopts_the_scripted_implementers_mechanism(tmp_path, flaky_server):
    expected = json.loads(EXPECTED.read_text())
    exp, report, implementer = run_round(tmp_path, flaky_server.base_url, RECORDINGS)
    assert report.final, report.stopped
    got = summary(exp)
    assert got == expected["summary"]
    # the decision: the candidate built by the scripted implementer from the recorded proposal, adopted as v1
    assert got["rounds"] == [[1, "v1"]] and exp.versions() == ["v0", "v1"]
    (impl,) = exp.ledger.find("implementation")
    (adoption,) = exp.ledger.find("adoption")
    assert impl.status == "done" and exp.repo.is_ancestor(impl.commit, adoption.commit)
    used = [name for name, _ in implementer.tool_results]
    assert {"edit_file", "write_file", "run", "check"} <= set(used)
    (checked,) = [text for name, text in implementer.tool_results if name == "check"]
    assert "smoke check" in checked and ": passed" in checked
    # every recorded call was replayed once, in full, and nothing else called a model
    calls = sorted(p.name for p in RECORDINGS.glob("*.yaml"))
    assert calls == expected["calls"]
    ends = [r for p in role_transcripts(exp) for r in read_transcript(p) if r["kind"] == "end"]
    assert len(ends) == len(calls) and all(r["status"] == "ok" for r in ends), ends
    assert [c.split()[0] for c in calls_logged(tmp_path / "calls.log")] == ["implementer"]
    keys = [e.key for e in exp.ledger.events]
    assert len(keys) == len(set(keys))


# every stage of the round (the research unit's kill point too: its call is a recorded one here)
STAGES = ["reference:trial@2", "analysis-finding", "evolve-research", "evolve-proposal", "evolve-implementation",
          "smoke", "evaluation:trial@2", "evolve-grade"]


@pytest.mark.timeout(1800)  # 3-6 min here; room for a loaded CI host
def test_kill_9_at_each_stage_then_resume_same_decision_no_call_or_trial_twice(tmp_path, flaky_server):
    """kill -9 at each stage of the recorded round, then --resume: the recorded decision, every recorded role call
    made once (one transcript each, and a repeated call would have no recording left to play in its transcript
    count) and every trial once."""
    expected = json.loads(EXPECTED.read_text())
    runs, calls = tmp_path / "runs", tmp_path / "calls.log"
    exp = make_experiment(runs, flaky_server.base_url)
    assert "ADOPTED ['v1']" in kill_at_each_stage_then_resume(runs, calls, "replayed", STAGES)
    from evolve.experiment.audit import audit

    checked = audit(exp)  # rise audit: nothing finished done twice, nothing finished lost
    assert checked.problems == [] and checked.trials == len(expected["summary"]["trials"]), checked.lines()

    led = exp.ledger  # (no ledger key twice: the audit's check)
    # each recorded call once: one ended transcript per recording; the implementer (scripted) once
    ends = [r for p in role_transcripts(exp) for r in read_transcript(p) if r["kind"] == "end"]
    assert len(ends) == len(expected["calls"]) and all(r["status"] == "ok" for r in ends)
    assert [c.split()[0] for c in calls_logged(calls)] == ["implementer"]
    # every trial ran once (reference, screening, evaluation: the recorded run's trials), one folder each
    done = led.find("trial_done")
    folders = {p.resolve() for p in exp.root.rglob("result.json")
               if "checks" not in p.parts and "worktrees" not in p.parts}
    assert len(done) == len(folders) == len(expected["summary"]["trials"])
    assert all(e.status != "infra" for e in done)
    assert summary(exp) == expected["summary"]


def record(base_url: str, work: Path, roles: set[str] | None = None) -> None:
    """Make the recordings and expected.json again against the real model at ``base_url`` (``roles``: re-record
    only these roles' calls, replaying the others' stored recordings)."""
    fresh = work / "recordings"
    fresh.mkdir(parents=True)
    if roles:
        for p in RECORDINGS.glob("*.yaml"):
            if p.name.split("--", 1)[0] not in roles:
                shutil.copy(p, fresh / p.name)
    with ScriptedServer(FlakyClaimer(), model="scripted") as srv:
        exp, _, _ = run_round(work, srv.base_url, fresh, record_url=base_url, record_roles=roles)
    got = summary(exp)
    print(json.dumps(got, indent=1))
    print((exp.root / "rounds" / "r01" / "evolve.md").read_text())
    expected = {"note": f"rise evolve round 1, every role but the implementer on {MODEL} (llama.cpp), recorded "
                        f"{__import__('datetime').date.today()}",
                "summary": got, "calls": sorted(p.name for p in fresh.glob("*.yaml"))}
    shutil.rmtree(RECORDINGS, ignore_errors=True)
    shutil.copytree(fresh, RECORDINGS)
    EXPECTED.write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    import tempfile

    args = [a for a in sys.argv[1:] if not a.startswith("--only=")]
    only = {r for a in sys.argv[1:] if a.startswith("--only=") for r in a.split("=", 1)[1].split(",")}
    with tempfile.TemporaryDirectory() as tmp:
        record(args[0] if args else "http://127.0.0.1:8080/v1", Path(tmp), only or None)
