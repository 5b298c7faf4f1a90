"""`rise audit`: what it counts, and each way of paying twice it must catch (a forged experiment; the real
kill -9 runs audit themselves in tests/test_evolve_replayed_round.py)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from evolve.experiment.audit import audit
from evolve.experiment.ledger import TrialDone
from evolve.roles.runtime.transcript import Transcript
from rise.cli import app
from tests.test_evolve_support import make_experiment


def _call(folder: Path, role: str, inputs: dict, end: str | None = "ok") -> None:
    t = Transcript.create(folder, role)
    t.write("start", call_id=t.call_id, role=role, inputs=inputs)
    t.write("system", text=f"you are the {role}")
    if end:
        t.write("end", status=end, role=role)
    t.close()


def _trial(exp, key: str, task: str, rep: int, status: str = "passed", folder: str | None = None) -> None:
    rel = folder or f"reference/{task}__{rep}"
    d = exp.root / rel
    d.mkdir(parents=True, exist_ok=True)
    (d / "result.json").write_text(json.dumps({"status": status}))
    exp.ledger.append(TrialDone(key=key, commit="c" * 40, purpose="reference", task=task, rep=rep, status=status,
                                trial_dir=rel))


def _clean(tmp_path):
    exp = make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1")
    tr = exp.root / "rounds" / "r01" / "transcripts"
    _call(tr, "analyst", {"pair": "a"})
    _call(tr, "analyst", {"pair": "b"})
    _call(tr, "researcher", {"group": "g1"}, end=None)  # cut off by a kill
    _call(tr, "researcher", {"group": "g1"})            # and made again by the resume: allowed
    _call(tr, "proposer", {"group": "g1"}, end="invalid_output")
    cut = Transcript.create(tr, "grouper")  # killed while writing its last line: cut off, not corrupt
    cut.write("start", call_id=cut.call_id, role="grouper", inputs={})
    cut.close()
    with cut.path.open("a") as fh:
        fh.write('{"seq": 2, "kind": "mod')
    _trial(exp, "c:reference:hello-file:1", "hello-file", 1)
    _trial(exp, "c:reference:hello-file:2:infra1", "hello-file", 2, status="infra",
           folder="reference/hello-file__2.attempt-1")
    _trial(exp, "c:reference:hello-file:2", "hello-file", 2, status="failed")
    return exp, tr


def test_a_clean_experiment_counts_calls_and_trials_and_lists_no_problem(tmp_path):
    exp, _ = _clean(tmp_path)
    a = audit(exp)
    assert a.problems == []
    assert (a.trials, a.infra_attempts, a.moved_aside) == (2, 1, 1)
    assert a.calls == {("analyst", "ok"): 2, ("researcher", "interrupted"): 1, ("researcher", "ok"): 1,
                       ("proposer", "invalid_output"): 1, ("grouper", "interrupted"): 1}
    res = CliRunner().invoke(app, ["audit", "evo", "--runs-dir", str(tmp_path / "runs")])
    assert res.exit_code == 0, res.output
    assert "role calls: researcher: 1 interrupted, 1 ok" in res.output
    assert "nothing finished was done twice" in res.output


def test_each_way_of_doing_finished_work_twice_is_a_problem_and_exit_1(tmp_path):
    exp, tr = _clean(tmp_path)
    _call(tr, "analyst", {"pair": "a"})                                       # a finished call made again
    _trial(exp, "c:reference:hello-file:1:again", "hello-file", 1, folder="reference/again")  # a cell run twice
    stray = exp.root / "reference" / "write-json__1"                          # finished, never booked
    stray.mkdir(parents=True)
    (stray / "result.json").write_text("{}")
    a = audit(exp)
    assert len(a.problems) == 3, a.problems
    assert any("role call (same role and inputs) finished 2 times" in p for p in a.problems)
    assert any("hello-file/1 finished 2 times" in p for p in a.problems)
    assert any("write-json__1 finished but never booked" in p for p in a.problems)
    res = CliRunner().invoke(app, ["audit", "evo", "--runs-dir", str(tmp_path / "runs")])
    assert res.exit_code == 1
    assert res.output.count("PROBLEM:") == 3


def test_a_bad_line_before_the_last_is_a_problem_naming_the_file(tmp_path):
    exp, tr = _clean(tmp_path)
    bad = tr / "analyst-bad.jsonl"
    bad.write_text('{"seq": 1, "kind": "start", "role": "analyst"}\nnot json\n{"seq": 3, "kind": "end"}\n')
    assert [p for p in audit(exp).problems if "analyst-bad.jsonl:2: not a JSON line" in p]


def test_an_unknown_experiment_is_a_clear_error(tmp_path):
    res = CliRunner().invoke(app, ["audit", "nope", "--runs-dir", str(tmp_path)])
    assert res.exit_code == 1
    assert "nope" in res.output
