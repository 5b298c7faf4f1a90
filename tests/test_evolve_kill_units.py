"""Every paid call is a unit (issue 30 item 5): ``rise evolve`` (tests/evolve_driver.py, real processes) killed by
SIGKILL right after the implementer's call returned (before its commit and event), inside a repair call (its edit
made, its answer not given), and right after the repair call returned (before its commit and event), then
resumed: no call is paid twice, the repair is booked once with its transcript, and ``rise audit`` counts it.

Test doubles and real parts as in tests/test_evolve_resume.py (tests/test_evolve_support.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evolve.experiment.audit import audit
from evolve.roles.runtime import read_transcript
from rise.cli import app
from tests.test_evolve_support import calls_logged, kill_at_each_stage_then_resume, make_experiment

pytestmark = [pytest.mark.tmux, pytest.mark.sandbox]
# `commit@1` is the driver's kill point before the first worktree commit of a process: in the first invocation
# the implementer's (its call returned), in the third a repair's (its call returned, after the second
# invocation was killed inside the first try of that repair)
STAGES = ["commit@1", "implementer-repair-edit", "commit@1"]


def _implementer_calls(root: Path) -> Counter:
    out: Counter = Counter()
    for path in (root / "rounds").rglob("transcripts/implementer-*.jsonl"):
        rows = read_transcript(path)
        start = next(r for r in rows if r["kind"] == "start")
        end = next((r for r in rows if r["kind"] == "end"), None)
        kind = "repair" if start["inputs"].get("failures") else "implementation"
        out[(kind, end["status"] if end else "interrupted")] += 1
    return out


@pytest.mark.timeout(1200)  # 2.5-5 min on this shared 2-core machine
def test_kill_after_the_implementer_returned_and_inside_a_repair_then_resume_pays_no_call_twice(tmp_path,
                                                                                              flaky_server):
    runs, calls = tmp_path / "runs", tmp_path / "calls.log"
    exp = make_experiment(runs, flaky_server.base_url)
    assert "ADOPTED ['v1']" in kill_at_each_stage_then_resume(runs, calls, "verify-completion+repair", STAGES)
    led = exp.ledger

    # the implementation: called once although the first invocation died before its commit and event
    implementer = [c for c in calls_logged(calls) if c.startswith("implementer ")]
    assert len(implementer) == 3 and len(set(implementer)) == 2  # the repair's prompt twice: once cut off
    assert _implementer_calls(exp.root) == {("implementation", "ok"): 1, ("repair", "interrupted"): 1,
                                            ("repair", "ok"): 1}
    (impl,) = led.find("implementation")
    assert impl.status == "done" and Path(impl.role_call["transcript"]).is_file()

    # the repair: booked once, with the transcript of the call that finished, although the third invocation died
    # after that call returned and before its commit and event
    (rep,) = led.find("repair")
    assert rep.commit == impl.commit and rep.candidate == "r01:verify-completion" and rep.number == 1
    ends = [r for r in read_transcript(Path(rep.role_call["transcript"])) if r["kind"] == "end"]
    assert [r["status"] for r in ends] == ["ok"]
    (adoption,) = led.find("adoption")
    assert adoption.commit == rep.repaired_to
    assert "# repaired" in exp.repo.git.show(f"{adoption.commit}:contracts/verify-completion.toml")

    # rise audit counts the repair and finds nothing paid twice or outside the books
    a = audit(exp)
    assert a.problems == [] and a.repairs["contracts"] == 1
    assert a.repair_calls == {"ok": 1, "interrupted": 1}
    out = CliRunner().invoke(app, ["audit", "evo", "--runs-dir", str(runs)])
    assert out.exit_code == 0, out.output
    assert "repairs: 1 booked (contracts 1; 0 changed nothing); repair calls: 1 interrupted, 1 ok" in out.output
