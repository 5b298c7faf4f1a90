"""The settings tier's candidate: made from the proposal alone (real git, the seed's Handbook and settings schema,
no backend of any kind), format-keeping, Handbook resynced and checked; and its screening evidence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evolve.roles.implement.settings_tier import SETTINGS_MARK, TierError, make_settings_candidate
from evolve.roles.proposals.models import ProposalSpec
from evolve.round.controller import Controller
from handbook.check import check_harness
from tests.test_evolve_support import make_experiment


def spec_of(**settings) -> ProposalSpec:
    return ProposalSpec(mechanism="confirm-more", summary="one more confirmation", tier="settings",
                        settings=settings)


@pytest.fixture()
def exp(tmp_path):
    return make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1")


def test_the_candidate_is_the_incumbent_with_the_new_values_and_a_resynced_handbook(exp):
    inc = Controller(exp).version_dir("v0")
    branch, commit, report = make_settings_candidate(exp, 1, spec_of(**{"terminus.confirmations": 3,
                                                                         "midharness.temperature": 0.5}),
                                                     slug="confirm-more", incumbent_dir=inc)
    base = exp.commit_of("v0")
    assert branch == "cand/r01-confirm-more" and exp.repo.commit(commit).parents[0].hexsha == base
    assert exp.repo.commit(commit).message.startswith(f"{SETTINGS_MARK}: confirm-more (round 1, confirm-more)")
    assert sorted(exp.repo.git.diff("--name-only", base, commit).split()) == ["HANDBOOK.md", "HANDBOOK.toml",
                                                                             "settings.toml"]
    # format kept: exactly the two value lines change, each keeping its comment
    diff = exp.repo.git.diff("-U0", base, commit, "--", "settings.toml").splitlines()
    changed = [ln for ln in diff if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    assert changed == [
        "-confirmations = 2                # consecutive task_complete claims that end the run (1 = no handshake)",
        "+confirmations = 3                # consecutive task_complete claims that end the run (1 = no handshake)",
        "-temperature = 0.8", "+temperature = 0.5"], changed
    assert report["changes"] == {"terminus.confirmations": [2, 3], "midharness.temperature": [0.8, 0.5]}
    assert report["handbook"] == {"completion.handshake": ["terminus.confirmations"],
                                  "model.sampling": ["midharness.temperature"]}
    wt = exp.root / "worktrees" / "r01-confirm-more" / "harness"
    assert check_harness(wt).ok
    assert "Evolved value: terminus.confirmations = 3 (round 1, settings tier, confirm-more)" in \
        (wt / "HANDBOOK.md").read_text()


def test_a_later_value_replaces_the_note_of_an_earlier_one(exp):
    from evolve.roles.implement.settings_tier import resync_handbook

    inc = Controller(exp).version_dir("v0")
    _, _, _ = make_settings_candidate(exp, 1, spec_of(**{"terminus.confirmations": 3}), slug="a",
                                      incumbent_dir=inc)
    wt = exp.root / "worktrees" / "r01-a" / "harness"
    (wt / "settings.toml").write_text((wt / "settings.toml").read_text().replace("confirmations = 3",
                                                                                 "confirmations = 4"))
    resync_handbook(inc, wt, "round 2, settings tier, b")
    notes = (wt / "HANDBOOK.toml").read_text()
    assert notes.count("Evolved value: terminus.confirmations") == 1 and "= 4 (round 2" in notes


def test_a_value_the_harness_refuses_makes_no_candidate_and_names_the_key(exp):
    inc = Controller(exp).version_dir("v0")
    with pytest.raises(TierError, match=r"setting terminus\.confirmations: Input should be greater than or equal"):
        make_settings_candidate(exp, 1, spec_of(**{"terminus.confirmations": 0}), slug="bad", incumbent_dir=inc)
    with pytest.raises(TierError, match=r"setting terminus\.nope is not a switch"):
        make_settings_candidate(exp, 1, spec_of(**{"terminus.nope": 1}), slug="bad", incumbent_dir=inc)
    wt = exp.root / "worktrees" / "r01-bad" / "harness"
    assert exp.repo.commit("cand/r01-bad").hexsha == exp.commit_of("v0")  # nothing committed
    assert (wt / "settings.toml").read_text() == (inc / "settings.toml").read_text()


def test_a_half_made_candidate_of_a_kill_is_made_again_from_the_incumbent(exp):
    inc = Controller(exp).version_dir("v0")
    _, wt = exp.create_candidate(1, "again", base=exp.commit_of("v0"))
    (wt / "settings.toml").write_text("garbage left by a kill\n")
    (wt / "stray.txt").write_text("x")
    _, commit, _ = make_settings_candidate(exp, 1, spec_of(**{"model.json_schema": True}), slug="again",
                                           incumbent_dir=inc)
    assert sorted(exp.repo.git.diff("--name-only", exp.commit_of("v0"), commit).split()) == [
        "HANDBOOK.md", "HANDBOOK.toml", "settings.toml"]


def test_a_candidate_committed_before_a_kill_is_returned_not_made_again(exp):
    inc = Controller(exp).version_dir("v0")
    spec = spec_of(**{"terminus.confirmations": 3})
    made = make_settings_candidate(exp, 1, spec, slug="once", incumbent_dir=inc)
    assert make_settings_candidate(exp, 1, spec, slug="once", incumbent_dir=inc) == made  # commit and report
    assert exp.repo.git.rev_list("--count", f"{exp.commit_of('v0')}..{made[0]}") == "1"
    # another value for the same candidate is not that commit: made again from the incumbent
    _, other, report = make_settings_candidate(exp, 1, spec_of(**{"terminus.confirmations": 4}), slug="once",
                                               incumbent_dir=inc)
    assert other != made[1] and report["changes"] == {"terminus.confirmations": [2, 4]}
    assert exp.repo.git.rev_list("--count", f"{exp.commit_of('v0')}..{made[0]}") == "1"


# ------------------------------------------------------------------------------------------------ screening
def _trial(job: Path, name: str, settings: dict | None, status: str = "passed") -> None:
    tdir = job / name
    (tdir / "agent").mkdir(parents=True)
    if settings is not None:
        (tdir / "agent" / "trajectory.json").write_text(json.dumps({"agent": {"extra": {"settings": settings}}}))


def test_settings_screening_needs_the_new_values_in_every_trial_and_the_steered_behaviour(tmp_path):
    from types import SimpleNamespace

    from validate.evaluate import ScreeningOutcome
    from validate.settings_screen import SettingsScreening

    job = tmp_path / "screening"
    _trial(job, "write-json__r1", {"terminus": {"confirmations": 3}})
    _trial(job, "hello-file__r1", {"terminus": {"confirmations": 3}})
    outcome = SimpleNamespace(trial_dirs=lambda: sorted(job.iterdir()), results={}, plan=SimpleNamespace(job_dir=job))
    spans = {"completion:CompletionHandshake.on_reply": 4}
    base = ScreeningOutcome(outcome, list(spans), spans, {}, common=list(spans))  # the incumbent hits it too
    assert not base.passed  # by spans alone a settings change never shows
    res = SettingsScreening.of(base, {"terminus.confirmations": 3})
    assert res.passed and "recorded terminus.confirmations = 3" in res.details()["reason"]
    assert not SettingsScreening.of(base, {"terminus.confirmations": 4}).passed
    wrong = SettingsScreening.of(base, {"terminus.confirmations": 4}).details()["reason"]
    assert wrong.startswith("trials ran with other values") and "hello-file__r1" in wrong
    quiet = ScreeningOutcome(outcome, list(spans), {k: 0 for k in spans}, {}, common=[])
    assert not SettingsScreening.of(quiet, {"terminus.confirmations": 3}).passed
