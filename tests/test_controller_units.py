"""Controller pieces without trials: patch strip level, settings switch edits, ledger booking keys, round
numbering and the resume guard, the CLI's errors."""

from __future__ import annotations

import tomllib

import pytest
from typer.testing import CliRunner

from evolve.experiment.ledger import Ledger, RoundStart
from evolve.round.controller import ControllerError, LedgerBook, patch_strip, run_round, set_toml_value
from rise.cli import app
from tests.test_controller_support import GOOD, HARMFUL, make_experiment
from trials.results import TrialResult


def test_patch_strip_level(tmp_path):
    assert patch_strip(GOOD) == 1 and patch_strip(HARMFUL) == 1
    p = tmp_path / "x.patch"
    p.write_text("diff --git a/harness_seed/loop.py b/harness_seed/loop.py\n--- a/harness_seed/loop.py\n"
                 "+++ b/harness_seed/loop.py\n@@ -1 +1 @@\n-a\n+b\n")
    assert patch_strip(p) == 2


def test_set_toml_value_keeps_comments_and_refuses_nothing_silently(tmp_path):
    p = tmp_path / "settings.toml"
    p.write_text("[completion]\nverify_before_complete = false   # the switch\n\n[tmux]\nwidth = 160\n")
    assert set_toml_value(p, "completion.verify_before_complete", True)
    assert "verify_before_complete = true   # the switch" in p.read_text()
    assert not set_toml_value(p, "completion.verify_before_complete", True)  # already on
    assert not set_toml_value(p, "completion.absent", True)  # no such key: nothing written
    assert set_toml_value(p, "tmux.width", 80) and tomllib.loads(p.read_text())["tmux"]["width"] == 80


def test_ledger_book_keys(tmp_path):
    led = Ledger(tmp_path / "ledger.jsonl")
    book = LedgerBook(led, tmp_path, "c0ffee", "c0ffee", "evaluation")

    def res(status):
        return TrialResult(trial_name="t__r1", run_id="x", task_name="t", repetition=1, status=status)

    book.record(res("infra"), tmp_path / "t__r1")
    book.record(res("infra"), tmp_path / "t__r1")
    assert not book.finished("t", 1)
    book.record(res("passed"), tmp_path / "t__r1")
    assert book.finished("t", 1)
    assert [e.key for e in led.events] == ["c0ffee:t:1:infra1", "c0ffee:t:1:infra2", "c0ffee:t:1"]
    assert led.events[-1].trial_dir == "t__r1" and led.events[-1].purpose == "evaluation"
    control = LedgerBook(led, tmp_path, "c0ffee", "c0ffee:control:r01", "control")
    assert control.purpose == "control"


def test_round_numbers_and_resume_guard(tmp_path):
    exp = make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1")
    with pytest.raises(ControllerError, match="next round .* is 1, not 2"):
        run_round(exp, 2, [("x", str(GOOD))])
    with pytest.raises(ControllerError, match="no candidates"):
        run_round(exp, 1, [])
    exp.ledger.append(RoundStart(key="r01:start", round=1, incumbent="v0"))
    with pytest.raises(ControllerError, match="has started already; pass --resume"):
        run_round(exp, 1, [("x", str(GOOD))], resume=False)


def test_cli_errors(tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["round", "nope", "--runs-dir", str(tmp_path), "--candidate", f"x={GOOD}"])
    assert res.exit_code == 1 and "no experiment" in res.output
    make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1")
    res = runner.invoke(app, ["round", "exp", "--runs-dir", str(tmp_path / "runs"), "--candidate", "bad"])
    assert res.exit_code != 0 and "SLUG=VALUE" in res.output
    res = runner.invoke(app, ["round", "--help"])
    assert res.exit_code == 0 and "--resume" in res.output
    res = runner.invoke(app, ["reference", "--help"])
    assert res.exit_code == 0 and "reference corpus" in res.output


def test_create_is_idempotent_across_kills_and_takes_branches(tmp_path):
    import git

    from evolve.round.controller import CandidateInput, Controller

    exp = make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1")
    ctl = Controller(exp)
    commit, wt = ctl.creation.create(1, "v0", CandidateInput("verify", str(GOOD)))
    repo = git.Repo(wt)
    assert repo.head.commit.hexsha == commit and not repo.is_dirty(untracked_files=True)
    assert "verify_before_complete = true" in (wt / "settings.toml").read_text()
    (created,) = exp.ledger.find("candidate_created")
    assert created.proposal["source"] == str(GOOD) and created.branch == "cand/r01-verify"

    # a kill after the commit but before the event: the next run finds its own commit, commits nothing new
    (exp.root / "ledger.jsonl").write_text("")
    again, _ = Controller(exp).creation.create(1, "v0", CandidateInput("verify", str(GOOD)))
    assert again == commit and len(list(repo.iter_commits())) == 2
    # a kill halfway through applying: the worktree is reset to the incumbent and the patch applied afresh
    (exp.root / "ledger.jsonl").write_text("")
    repo.git.reset("--hard", exp.commit_of("v0"))
    (wt / "completion.py").write_text("half")
    third, _ = Controller(exp).creation.create(1, "v0", CandidateInput("verify", str(GOOD)))
    assert git.Repo(wt).head.commit.tree.hexsha == exp.repo.commit(commit).tree.hexsha

    # a branch of the harness repo as the source
    exp.repo.git.branch("mine", third)
    c4, _ = Controller(exp).creation.create(1, "v0", CandidateInput("other", "mine"))
    assert c4 == third and "cand/r01-other" in [h.name for h in exp.repo.heads]


def test_branch_candidate_must_descend_from_the_incumbent(tmp_path):
    """Issue 15 item 4: a branch cut from v0 and adopted after v1 would drop v1; it is refused up front."""
    from evolve.round.controller import CandidateInput, Controller

    exp = make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1")
    repo = exp.repo
    repo.git.branch("stale", "v0")  # cut from v0 ...
    _, wt = exp.create_candidate(1, "first")
    (wt / "NOTES.md").write_text("adopted as v1\n")
    assert exp.tag_version(exp.commit_worktree(wt, "v1 work"), "v1") == "v1"  # ... and v1 adopted since
    with pytest.raises(ControllerError, match=r"stale .* does not descend from the incumbent v1"):
        run_round(exp, 1, [("stale", "stale")])
    assert exp.ledger.events == []  # refused before any work
    with pytest.raises(ControllerError, match="neither a patch file nor a branch"):
        run_round(exp, 1, [("typo", "no-such-branch")])
    repo.git.branch("fresh", "v1")
    commit, _ = Controller(exp).creation.create(1, "v1", CandidateInput("fresh", "fresh"))
    assert commit == exp.commit_of("v1")


def test_patch_inspection_with_unidiff_and_git_apply_check(tmp_path):
    """Issue 15 item 14: patch paths are read by unidiff; a patch that does not apply is refused up front by
    ``git apply --check`` with git's own words, before any work of the round."""
    p = tmp_path / "renamed.patch"  # a new file under harness/: the /dev/null side does not count
    p.write_text("diff --git a/harness/new.py b/harness/new.py\nnew file mode 100644\n--- /dev/null\n"
                 "+++ b/harness/new.py\n@@ -0,0 +1 @@\n+x = 1\n")
    assert patch_strip(p) == 2
    (tmp_path / "junk.patch").write_text("@@ -1 +1 @@\n-a\n+b\n")
    with pytest.raises(ControllerError, match="not a unified diff"):
        patch_strip(tmp_path / "junk.patch")
    exp = make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1")
    stale = tmp_path / "stale.patch"
    stale.write_text("--- a/main.py\n+++ b/main.py\n@@ -1,1 +1,1 @@\n-this line is not in main.py\n+x\n")
    with pytest.raises(ControllerError, match=r"stale.patch does not apply to the incumbent v0: .*main\.py"):
        run_round(exp, 1, [("stale", str(stale))])
    assert exp.ledger.events == []
