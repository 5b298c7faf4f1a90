"""A ``rise evolve`` round whose recorded real proposer chooses a settings-tier mechanism: the candidate is made
from the proposal with no coding agent, passes its checks, is screened, evaluated and decided on a scripted grid.

- The grid: hello-file and write-json × r = 2, local sandbox, the agent's model the early-claiming test double
  :class:`~tests.test_evolve_support.FlakyClaimer` over real HTTP (write-json flips, hello-file is a stable pass).
- The proposer replays ``tests/data/evolve/recordings/settings-tier``: ONE call recorded from the real bundled
  Qwen2.5-Coder-1.5B on llama.cpp in this very round (the inputs are deterministic, so the request must match
  its recording exactly; a miss fails by name).
- Analyst, grouper and reviewer are :class:`~tests.test_evolve_support.ScriptedRoles` (a test double, named as
  one: well-formed findings about a claim made without a check, behaviour ``completion.handshake``); research is
  off; the implementer is the same double, and the test shows it is never called.
- The loop runs with ``tiers = ["settings"]``, the configuration for a model that cannot write code (the bundled
  1.5B never has): the answer's schema offers the settings tier only, so the model chooses which switches and
  which values. Offered all three tiers in this round, the same model chose the code tier (a ``verify-completion``
  mechanism); in tests/test_evolve_replayed_round.py's round it chose code too.
- The recorded answer names the switch as ``completion.handshake.terminus.confirmations`` with the value ``"1"``
  (the behaviour id glued to the key, as the prompt lists them side by side, and the number as text): the
  platform reads a ``<behaviour id>.<switch>`` that the behaviour lists as that switch, and text as the switch's
  type, so the candidate sets ``terminus.confirmations = 1``. Any other unlisted key is still refused.

The test asserts what the platform does with the recorded answer, never what a 1.5B model "should" say.
Re-record (after changing the proposer's prompt, its tools, the seed's Handbook or settings) with the 1.5B
served: ``python tests/test_evolve_settings_round.py [BASE_URL]``.
"""

from __future__ import annotations

import json
import os
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
from tests.test_evolve_replayed_round import MODEL, recording_name
from tests.test_evolve_support import FlakyClaimer, ScriptedRoles, calls_logged, make_experiment

RECORDINGS = REPO / "tests" / "data" / "evolve" / "recordings" / "settings-tier"
EXPECTED = RECORDINGS / "expected.json"


def evolution(exp, calls: Path, recordings: Path = RECORDINGS, record_url: str | None = None):
    """The loop of this round on ``exp``: the proposer replayed (or recorded at ``record_url``), every other
    role the scripted double; real checks (smoke; contracts run only where code changed)."""
    from evolve.round.checks import Checks
    from trials.endpoints.spec import EndpointSpec

    scripted = ScriptedRoles({}, calls)
    endpoint = EndpointSpec(base_url=record_url or "http://127.0.0.1:9/v1", model=MODEL, max_output_tokens=1024,
                            timeout_sec=1200)

    def backends(role: str, key: str):
        if role != "proposer":
            return scripted
        return make_backend("replay", endpoint, recording=recordings / recording_name(role, key),
                            record=record_url is not None)

    return Evolution(exp, EvolveOptions(rounds=1, external_research=False, tiers=["settings"]), backends,
                     checks=Checks.default())


def summary(exp) -> dict:
    led = exp.ledger
    (prop,) = led.find("proposal")
    impls = led.find("implementation")
    decisions = led.find("adoption") + led.find("rejection")
    return {"proposal": [prop.slug, prop.status, prop.proposal.get("tier"), prop.proposal.get("settings")],
            "implementations": [[e.slug, e.status, e.report.get("tier", "code")] for e in impls],
            "checks": [f"{e.stage}:{'passed' if e.passed else 'failed'}" for e in led.find("check_result")],
            "screenings": ["passed" if e.passed else "failed" for e in led.find("screening")],
            "decisions": [[e.kind, e.decision.get("tier"), e.decision.get("reason")] for e in decisions],
            "rounds": [[e.round, e.adopted] for e in led.find("round_end")],
            "trials": sorted(f"{e.purpose}:{e.task}:{e.rep}:{e.status}" for e in led.find("trial_done"))}


pytestmark = [pytest.mark.tmux, pytest.mark.sandbox]


@pytest.mark.timeout(1200)  # about 3 min here; room for a loaded CI host
def test_the_recorded_proposer_chooses_a_settings_mechanism_made_and_decided_without_a_coding_agent(
        tmp_path, flaky_server):
    from evolve.views.report import build_report, render_report
    from evolve.views.show import render_text, version_view

    expected = json.loads(EXPECTED.read_text())
    exp = make_experiment(tmp_path / "runs", flaky_server.base_url)
    report = evolution(exp, tmp_path / "calls.log").run()
    assert report.final, report.stopped
    got = summary(exp)
    if os.environ.get("RISE_WRITE_EXPECTED"):  # after a deliberate change of what a round books
        EXPECTED.write_text(json.dumps({**expected, "summary": got}, indent=1) + "\n")
    assert got == expected["summary"]
    slug, status, tier, settings = got["proposal"]
    assert status == "valid" and tier == "settings" and settings
    # made from the proposal: no implementer call, no tokens, a commit holding only the values and the Handbook
    assert [c.split()[0] for c in calls_logged(tmp_path / "calls.log")] == ["analyst"]  # scripted analysis only
    (impl,) = exp.ledger.find("implementation")
    assert impl.status == "done" and impl.role_call == {} and impl.report["tier"] == "settings"
    assert set(impl.report["changes"]) == set(settings)
    base = exp.commit_of("v0")
    assert sorted(exp.repo.git.diff("--name-only", base, impl.commit).split()) == \
        ["HANDBOOK.md", "HANDBOOK.toml", "settings.toml"]
    # its checks: the real smoke check, contracts with nothing to run (no code), screening by the values it set
    assert got["checks"] == ["smoke:passed", "contracts:passed"] and got["screenings"] == ["passed"]
    (contracts,) = exp.ledger.find("check_result", stage="contracts")
    assert contracts.details.get("skipped") is True
    (scr,) = exp.ledger.find("screening")
    assert all(v == settings for v in scr.details["settings_seen"].values()) and scr.details["settings_seen"]
    # decided on the scripted grid, the tier on the decision and in every view
    (decision,) = got["decisions"]
    assert decision[1] == "settings" and decision[0] in ("adoption", "rejection")
    evolve_md = (exp.root / "rounds" / "r01" / "evolve.md").read_text()
    assert "tier **settings**" in evolve_md and "no coding agent, no model call" in evolve_md
    view = version_view(exp, f"cand/r01-{slug}")
    assert view.tier == "settings" and f"candidate {slug}, tier settings" in render_text(view)
    assert 'data-tier="settings"' in render_report(build_report(exp))
    # the one recorded call was replayed, in full
    (tr,) = (exp.root / "rounds" / "r01" / "transcripts").glob("proposer-*.jsonl")
    assert [r["status"] for r in read_transcript(tr) if r["kind"] == "end"] == ["ok"]


def record(base_url: str, work: Path) -> None:
    """Record the proposer's call against the real model at ``base_url``; write the recording and expected.json."""
    fresh = work / "recordings"
    with ScriptedServer(FlakyClaimer(), model="scripted") as srv:
        exp = make_experiment(work / "runs", srv.base_url)
        evolution(exp, work / "calls.log", fresh, record_url=base_url).run()
    got = summary(exp)
    print(json.dumps(got, indent=1))
    print((exp.root / "rounds" / "r01" / "evolve.md").read_text())
    (prop,) = exp.ledger.find("proposal")
    expected = {"note": f"rise evolve round 1, the proposer on {MODEL} (llama.cpp), recorded "
                        f"{__import__('datetime').date.today()}; the other roles scripted",
                "proposal": prop.proposal, "summary": got}
    shutil.rmtree(RECORDINGS, ignore_errors=True)
    shutil.copytree(fresh, RECORDINGS)
    EXPECTED.write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        record(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080/v1", Path(tmp))
