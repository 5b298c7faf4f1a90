"""The scripted model of the control-arm round tests (no tests here): the early claimer of
``tests.test_controller_support`` that samples like a model at temperature, plus a verifier that judges.

- One sample (the base agent, N = 1): the early claimer's reply, so the incumbent passes hello-file only and the
  verify-completion candidate, which asks the model to check its claim, passes everything in more steps (it pays
  for them: its tokens per trial are above the incumbent's, so a matched arm needs N > 1).
- N samples in one request: the first is the early claimer's reply; the others do the work, each a distinct
  command line (a model at temperature does not repeat itself), so the N candidates reach the verifier unmerged.
  Once the task is done, every sample says so (identical, merged: no verifier call), as a sure model would.
- A verifier call (the seed's one-token listwise, pointwise, pairwise prompts): prefers an action that writes the
  task's file; its answer is one token, its prompt the seed's own, so its tokens are the seed's real cost.
"""

from __future__ import annotations

import json
import re

from tests.test_controller_support import MARK, SOLVE, early_claimer

_WORK = re.compile(r"printf|wc -l")


def _does_work(section: str) -> bool:
    return bool(_WORK.search(section))


def _verdict(prompt: str) -> str | None:
    """The verifier's answer, or None when ``prompt`` is no verifier prompt."""
    if "## Two candidate next actions" in prompt:
        actions = prompt.split("## Two candidate next actions", 1)[1]
        a, _, b = actions.partition("### Action B")
        return "B" if _does_work(b) and not _does_work(a) else "A"
    if "candidate next actions" in prompt and "Answer with the number" in prompt:
        actions = re.split(r"### Action (\d+)", prompt.split("candidate next actions", 1)[1])
        numbered = dict(zip(actions[1::2], actions[2::2], strict=False))
        return next((k for k, text in numbered.items() if _does_work(text)), "1")
    if "## Candidate next action" in prompt and "single digit" in prompt:
        return "9" if _does_work(prompt.split("## Candidate next action", 1)[1]) else "2"
    return None


def sampling_claimer(body: dict) -> str | list[str]:
    """The scripted model (a ScriptedServer responder): one reply, or one per sample when ``n`` > 1."""
    msgs = body.get("messages", [])
    if len(msgs) == 1 and (answer := _verdict(msgs[0].get("content") or "")) is not None:
        return answer
    base = early_claimer(body)
    n = int(body.get("n") or 1)
    if n == 1:
        return base
    first = next((m.get("content") or "" for m in msgs if m.get("role") == "user"), "")
    task = next((t for t, mark in MARK.items() if mark in first), None)
    reply = json.loads(base) if base.startswith("{") else {}
    if task is None or "SOLVE" in base or (reply.get("task_complete") and "checked" in reply.get("analysis", "")):
        return [base] * n
    out = [base]
    for i in range(1, n):
        line = SOLVE[task].rstrip("\n") + f"; cat {MARK[task]}  # sample {i}\n"
        out.append(json.dumps({"analysis": f"SOLVE {task}: doing the work (sample {i}).", "plan": "",
                               "commands": [{"keystrokes": line, "duration": 0.2}], "task_complete": False}))
    return out


def main(argv: list[str]) -> int:
    """``python -m tests.control_arm_support RUNS NAME``: round 1 of an existing experiment with the verify-completion
    candidate and stand-in checks (the kill -9 test's process; RISE_TEST_KILL_AT kills it at a stage)."""
    from pathlib import Path

    from evolve.experiment.store import open_experiment
    from evolve.round.controller import CandidateInput, Proposal, run_round
    from tests.test_controller_support import GOOD, GOOD_PROPOSAL, standin_checks

    runs, name = argv
    exp = open_experiment(name, Path(runs))
    report = run_round(exp, 1, [CandidateInput("verify", str(GOOD), Proposal.model_validate(GOOD_PROPOSAL))],
                       checks=standin_checks())
    print(json.dumps({c.slug: c.status for c in report.candidates}))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
