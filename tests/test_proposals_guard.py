"""The overfitting guard and the proposal spec: a proposal or patch quoting a development task's instruction
or tests is refused (with the task and file named); general text and the candidate patches of the tests pass."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from evolve.roles.proposals import OverfitGuard, ProposalSpec, ProposerAnswer

REPO = Path(__file__).resolve().parents[1]
STARTER = REPO / "data" / "starter"
DEV = ["hello-file", "write-json"]


@pytest.fixture(scope="module")
def guard():
    return OverfitGuard(STARTER, DEV)


def test_quoting_an_instruction_line_is_refused(guard):
    line = (STARTER / "write-json" / "instruction.md").read_text().splitlines()[0]
    report = guard.check(f"When the task says {line} the harness should check the keys.")
    assert report.refused
    assert report.quotes[0].task == "write-json" and report.quotes[0].file == "instruction.md"
    assert "overfitting guard" in report.reason() and "write-json/instruction.md" in report.reason()


def test_quoting_eight_words_of_a_test_file_is_refused(guard):
    words = (STARTER / "write-json" / "tests" / "test.sh").read_text().split()[:40]
    report = guard.check("prefix " + " ".join(words[-8:]) + " suffix")
    assert report.refused and report.quotes[0].file.startswith("tests/")


def test_general_text_passes(guard):
    report = guard.check("Withhold the first completion claim once and ask the model to run a command that "
                         "verifies the result and show its output before claiming again.")
    assert not report.refused and report.reason() == ""


def test_the_test_candidate_patches_pass_and_a_patch_adding_a_task_line_is_refused(guard):
    for name in ("verify-completion.patch", "keystroke-trim.patch"):
        assert not guard.check_patch((REPO / "tests" / "data" / "candidates" / name).read_text()).refused
    line = (STARTER / "hello-file" / "instruction.md").read_text().strip().splitlines()[0]
    diff = f"--- a/prompts.py\n+++ b/prompts.py\n@@ -1,1 +1,2 @@\n x = 1\n+HINT = {line!r}\n-{line}\n"
    assert guard.check_patch(diff).refused
    # removed or context lines are the incumbent's own: not counted
    assert not guard.check_patch(f"--- a/p\n+++ b/p\n@@ -1 +1 @@\n-{line}\n+x = 1\n").refused


def test_spec_keeps_development_tasks_only_and_screens_its_predicted_fixes():
    answer = ProposerAnswer(mechanism="verify-completion", summary="verify before a claim is accepted",
                            behaviour_change="the first claim is withheld once", setting="completion.verify",
                            predicted_fixes=["write-json", "count-lines"], tasks_at_risk=["hello-file", "x"])
    spec = ProposalSpec.from_answer(answer, {"id": "g1", "signature": "completion.handshake", "extra": 1}, DEV)
    assert spec.predicted_fixes == ["write-json"] and spec.tasks == ["write-json"]
    assert spec.tasks_at_risk == ["hello-file"] and spec.group == {"id": "g1", "signature": "completion.handshake"}
    assert "withheld once" in spec.text()
    with pytest.raises(ValidationError) as err:
        ProposerAnswer(mechanism="Bad Slug", summary="x" * 12, behaviour_change="y" * 12, setting="a.b")
    assert "mechanism" in str(err.value)
