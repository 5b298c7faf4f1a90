"""Guard and provenance: a patch that hard-codes write-json's reference answer (its ``solution/solve.sh``) is
refused, as the first implementation and as a repair commit (booked as the candidate's rejection before it
runs); ``task.toml`` is read too; and no role's file tools reach the held-out split. Real git, real experiment
repository; the checks are stand-ins (the guard runs before them)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from evolve.roles.proposals import OverfitGuard
from evolve.roles.runtime.tools import ToolRefused, confine
from evolve.round.model import Stop
from tests.test_controller_support import STARTER, make_experiment, pass_contracts

DEV = ["hello-file", "write-json"]
# write-json's answer, as an implementer might carry it into the harness in three spellings
HARDCODED = [
    'ANSWER = \'{"name": "demo", "version": 2, "enabled": true}\'\n',
    "ANSWER = {'name': 'demo', 'version': 2, 'enabled': True}\n",
    'ANSWER = dict(name="demo", version=2, enabled=True)  # what the checker wants\n',
]


@pytest.fixture(scope="module")
def guard():
    if not (STARTER / "write-json" / "solution" / "solve.sh").is_file():
        pytest.skip("the starter suite (data/starter) is not there")
    return OverfitGuard(STARTER, DEV)


def _patch(text: str, path: str = "harness/answers.py") -> str:
    added = "".join(f"+{ln}\n" for ln in text.splitlines())
    return f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{len(text.splitlines())} @@\n{added}"


@pytest.mark.parametrize("text", HARDCODED)
def test_a_patch_hardcoding_the_solution_is_refused(guard, text):
    report = guard.check_patch(_patch(text))
    assert report.refused, text
    assert any(q.task == "write-json" and q.file == "solution/solve.sh" for q in report.quotes), report.quotes
    assert "write-json/solution/solve.sh" in report.reason()


def test_task_toml_is_read_and_general_code_passes(guard):
    line = next(ln for ln in (STARTER / "write-json" / "task.toml").read_text().splitlines() if "description" in ln)
    report = guard.check(f"Per the config: {line} -- read it first.")
    assert report.refused and report.quotes[0].file == "task.toml"
    general = _patch("def verify(answer: dict) -> bool:\n    return bool(answer) and 'name' in answer\n")
    assert not guard.check_patch(general).refused
    # cli-calculator's solution ends like any script: five generic words are no quote of it
    entry = _patch("def main(argv):\n    return 0\n\n\nif __name__ == '__main__':\n    sys.exit(main(sys.argv[1:]))\n")
    assert not OverfitGuard(STARTER, ["cli-calculator"]).check_patch(entry).refused


def _candidate(tmp_path: Path):
    from evolve.round.controller import Checks, Controller

    exp = make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1", heldout=[])
    _, wt = exp.create_candidate(1, "answers")
    (wt / "NOTES.md").write_text("a general change: verify before claiming completion\n")
    first = exp.commit_worktree(wt, "candidate: notes")
    return exp, wt, first, Checks, Controller


def test_the_first_implementation_hardcoding_the_answer_is_rejected_before_it_runs(tmp_path, guard):
    exp, wt, _, Checks, Controller = _candidate(tmp_path)
    (wt / "answers.py").write_text(HARDCODED[1])
    commit = exp.commit_worktree(wt, "candidate: answers")
    ran: list[Path] = []

    async def smoke(harness_dir, out_dir):
        ran.append(harness_dir)
        return True, {}

    ctl = Controller(exp, checks=Checks(smoke, pass_contracts))
    with pytest.raises(Stop):
        asyncio.run(ctl.checking.run_checks("v0", commit, wt))
    (rej,) = exp.ledger.find("rejection")
    assert rej.commit == commit and rej.reason.startswith("overfitting guard")
    assert rej.decision["stage"] == "guard" and rej.decision["quotes"][0]["file"] == "solution/solve.sh"
    assert ran == []  # refused before the smoke check ran its code


def test_a_repair_commit_hardcoding_the_answer_is_rejected(tmp_path, guard):
    """The implementation is clean; the repair after the smoke check writes the answer in: the repaired commit
    is refused before its smoke check, and the rejection names it."""
    exp, wt, first, Checks, Controller = _candidate(tmp_path)
    smoked: list[str] = []

    async def smoke(harness_dir, out_dir):
        smoked.append(exp.commit_worktree(harness_dir, "noop"))
        return (harness_dir / "answers.py").is_file(), {"failures": ["write-json failed"]}

    def repair(candidate, failures):
        (candidate / "answers.py").write_text(HARDCODED[0])
        return True

    ctl = Controller(exp, checks=Checks(smoke, pass_contracts), repair=repair)
    with pytest.raises(Stop):
        asyncio.run(ctl.checking.run_checks("v0", first, wt))
    led = exp.ledger
    (rep,) = led.find("repair", key=f"{first}:repair")  # the repair unit (evolve.round.checks.repair_unit)
    repaired = rep.repaired_to
    assert repaired and repaired != first
    (rej,) = led.find("rejection")
    assert rej.commit == repaired and "solution/solve.sh" in rej.reason
    assert smoked == [first]  # the repaired commit never ran


def test_role_tools_never_reach_the_held_out_split(tmp_path):
    from evolve.roles.runtime.fs_tools import _walk, list_dir
    from evolve.roles.runtime.tools import ToolContext

    ws = tmp_path / "exp"
    trial = ws / "versions" / "v0" / "heldout" / "secret-task__r1" / "agent"
    trial.mkdir(parents=True)
    (trial / "trial_spec.json").write_text('{"instruction": "the sealed task"}')
    (ws / "versions" / "v0" / "reference").mkdir()
    (ws / "versions" / "v0" / "reference" / "result.json").write_text("{}")
    (ws / "peek").symlink_to(ws / "versions" / "v0" / "heldout")
    for path in ("versions/v0/heldout/secret-task__r1/agent/trial_spec.json", "versions/v0/heldout", "peek",
                 str(trial / "trial_spec.json")):
        with pytest.raises(ToolRefused, match="held-out"):
            confine(ws, path)
    ctx = ToolContext.__new__(ToolContext)
    ctx.workspace = ws
    listing = list_dir(ctx, "versions/v0")
    assert "reference/" in listing and "heldout" not in listing
    assert [p.name for p in _walk(ctx, ws) if "heldout" in p.parts] == []
    assert confine(ws, "versions/v0/reference/result.json").is_file()
