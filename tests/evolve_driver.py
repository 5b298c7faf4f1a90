"""A ``rise evolve`` process for the kill -9 tests (not a test module): the loop on an existing experiment with
the test doubles of tests/test_evolve_support.py (scripted role backend, real smoke, stand-in contracts).

    python -m tests.evolve_driver RUNS NAME CALLS_LOG ROUNDS MECHANISM

MECHANISM ``verify-completion+repair``: its stand-in contracts fail once, so the repair hook (the scripted
implementer) mends the contract first. MECHANISM ``confirm-more``: a settings-tier proposal (tests/test_evolve_support.py's
CONFIRM; the loop offers the settings tier only), its candidate made with no coding agent. MECHANISM ``replayed``: the round of tests/test_evolve_replayed_round.py instead (every role but the scripted
implementer replays the recorded real run; research on, over the default corpus).

``RISE_TEST_KILL_AT=<stage>`` in the environment kills it at that stage (validate.evaluate.kill_point). One stage
is the driver's own: ``commit`` (``@n``), right before the n-th commit of a candidate worktree in this process:
the first is the implementer's (its call returned, nothing booked yet), or a repair's."""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    from evolve.experiment.store import Experiment, open_experiment
    from evolve.loop import Evolution, EvolveOptions
    from tests.test_evolve_support import CONFIRM, TRIM, VERIFY, ScriptedRoles, repairing_checks
    from validate.evaluate import kill_point

    commit = Experiment.commit_worktree

    def killable_commit(self, path, message):  # a kill point between a call's return and its booking
        kill_point("commit")
        return commit(self, path, message)

    Experiment.commit_worktree = killable_commit
    runs, name, calls, rounds, mech = argv
    exp = open_experiment(name, Path(runs))
    if mech == "replayed":
        from tests.test_evolve_replayed_round import replayed_evolution

        evolution, _ = replayed_evolution(exp, Path(calls), rounds=int(rounds), resume=True, run_check=())
    else:
        mech, _, repair = mech.partition("+")
        proposal = {"verify-completion": VERIFY, "keystroke-trim": TRIM, "confirm-more": CONFIRM}[mech]
        roles = ScriptedRoles({n: [proposal] for n in range(1, int(rounds) + 1)}, Path(calls), run_check=())
        tiers = {"tiers": ["settings"]} if proposal.get("tier") == "settings" else {}
        evolution = Evolution(exp, EvolveOptions(rounds=int(rounds), resume=True, external_research=False, **tiers),
                              roles, checks=repairing_checks({mech} if repair else set()))
    report = evolution.run()
    print("STOPPED", report.stopped, "ADOPTED", [r["adopted"] for r in report.rounds])
    return 0 if report.final else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
