"""A kill -9 while a settings-tier candidate is made, then resume (issue 28's must-show): ``rise evolve``
(tests/evolve_driver.py, real processes) whose scripted proposer answers a settings-tier proposal
(tests/test_evolve_support.py's CONFIRM, ``terminus.confirmations = 3``; the loop offers the settings tier only)
is killed by SIGKILL

1. at ``settings-candidate``: the value written into the candidate worktree's ``settings.toml``, the Handbook not
   yet resynced, nothing committed (the test looks at that half-made worktree before resuming);
2. at ``commit@1``: the driver's point right before the candidate worktree's commit (values and Handbook written);
3. at ``settings-commit``: right after that commit, before its implementation event (the resume must book that
   commit, not make a second one: it did before, leaving the first dangling);
4. at ``evolve-implementation``: right after the implementation event was booked;

then resumed to its decision. The candidate is made once (one implementation event, one commit on its branch and
in the whole repository, a clean worktree at that commit), no role call is made twice, ``rise audit`` finds
nothing, and the round is decided. Test doubles and real parts as in tests/test_evolve_resume.py (the agent's
model the FlakyClaimer over real HTTP, the roles scripted, real git, real smoke check, real tmux and bubblewrap)."""

from __future__ import annotations

import os
import sys
from collections import Counter

import git
import pytest
from typer.testing import CliRunner

from evolve.experiment.audit import audit
from evolve.roles.implement.settings_tier import SETTINGS_MARK
from rise.cli import app
from tests.kill_series import invoke
from tests.test_evolve_support import REPO, calls_logged, kill_at_each_stage_then_resume, make_experiment
from validate.evaluate import KILL_ENV

pytestmark = [pytest.mark.tmux, pytest.mark.sandbox]
SLUG, BRANCH = "confirm-more", "cand/r01-confirm-more"


@pytest.mark.timeout(1200)  # a few minutes on the shared 2-core machine
def test_kill_while_the_settings_candidate_is_made_then_resume_makes_it_once(tmp_path, flaky_server):
    runs, calls = tmp_path / "runs", tmp_path / "calls.log"
    exp = make_experiment(runs, flaky_server.base_url)
    base = exp.commit_of("v0")

    # 1. killed inside make_settings_candidate: a half-made candidate that nobody booked
    (runs / "kills").mkdir(parents=True)
    cmd = [sys.executable, "-m", "tests.evolve_driver", str(runs), "evo", str(calls), "1", SLUG]
    env = {**{k: v for k, v in os.environ.items() if k != KILL_ENV}, KILL_ENV: "settings-candidate"}
    first = invoke(cmd, env, runs / "kills" / "01-settings-candidate.log", cwd=REPO, timeout=600)
    assert first.killed, f"rc {first.returncode}\n{first.log.read_text()[-3000:]}"
    wt = exp.root / "worktrees" / f"r01-{SLUG}" / "harness"
    assert "confirmations = 3" in (wt / "settings.toml").read_text()  # the edit was made ...
    assert exp.repo.commit(BRANCH).hexsha == base  # ... and nothing committed or booked
    assert "Evolved value" not in (wt / "HANDBOOK.toml").read_text()
    assert exp.ledger.find("implementation") == []

    # 2.-4. killed before the candidate's commit, after it, after its event; then resumed to the decision
    last = kill_at_each_stage_then_resume(runs, calls, SLUG, ["commit@1", "settings-commit", "evolve-implementation"])
    assert "STOPPED" in last
    led = exp.ledger

    # made once: one event, one commit on its branch and in the whole repository, the worktree clean at it
    (impl,) = led.find("implementation")
    assert impl.status == "done" and impl.role_call == {} and impl.report["tier"] == "settings"
    assert impl.report["changes"] == {"terminus.confirmations": [2, 3]}
    assert exp.repo.git.rev_list(f"{base}..{BRANCH}").split() == [impl.commit]
    assert exp.repo.git.log("--all", "--reflog", "--format=%H", f"--grep={SETTINGS_MARK}").split() == [impl.commit]
    assert sorted(exp.repo.git.diff("--name-only", base, impl.commit).split()) == \
        ["HANDBOOK.md", "HANDBOOK.toml", "settings.toml"]
    handbook = exp.repo.git.show(f"{impl.commit}:HANDBOOK.toml")
    assert handbook.count("Evolved value: terminus.confirmations = 3") == 1  # one note, not one per attempt
    assert exp.repo.git.diff("-U0", base, impl.commit, "--", "settings.toml").count("+confirmations = 3") == 1
    wrepo = git.Repo(wt)
    assert wrepo.head.commit.hexsha == impl.commit and wrepo.git.status("--porcelain") == ""
    (created,) = led.find("candidate_created")
    assert created.key.split(":")[1] == SLUG

    # no role call twice; no coding agent at all (the proposer answered once, the candidate needed no model)
    logged = calls_logged(calls)
    assert [c for c, n in Counter(logged).items() if n > 1] == []
    roles = Counter(c.split()[0] for c in logged)
    assert roles["proposer"] == 1 and roles["implementer"] == 0 and roles["analyst"] >= 1

    # decided: one decision on the settings tier, the round ended, the books clean
    decisions = led.find("adoption") + led.find("rejection")
    assert len(decisions) == 1 and decisions[0].decision.get("tier") == "settings"
    assert decisions[0].commit == impl.commit
    assert [e.round for e in led.find("round_end")] == [1]
    assert audit(exp).problems == []
    out = CliRunner().invoke(app, ["audit", "evo", "--runs-dir", str(runs)])
    assert out.exit_code == 0, out.output
