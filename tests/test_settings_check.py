"""Harness settings are checked before a grid's first trial: a typo is the user's error, never the model's."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from evolve.cli import app
from trials.settings_check import SettingsError, check_settings

SEED = "harness_seed"
STARTER = "data/starter"
runner = CliRunner()


def test_a_misspelt_setting_stops_rise_eval_before_any_trial(tmp_path):
    job = tmp_path / "job"
    res = runner.invoke(app, ["eval", "--tasks", STARTER, "--task", "hello-file", "--agent", "seed",
                              "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--job-dir", str(job),
                              "--setting", "terminus.max_episodez=3"], env={"COLUMNS": "60"})
    assert res.exit_code != 0
    assert "unknown setting terminus.max_episodez" in res.output
    assert "terminus.max_episodes" in res.output  # the keys that exist are named
    assert not any(job.glob("*__r*")), "no trial may run with settings the harness rejects"


def test_every_problem_is_named_including_midharness_keys():
    with pytest.raises(SettingsError) as info:
        check_settings(SEED, {"model.max_tokens": "abc", "midharness.nn": 2, "nosuch.key": 1})
    msg = str(info.value)
    assert "setting model.max_tokens" in msg and "unknown setting midharness.nn" in msg
    assert "midharness.n," in msg and "unknown setting nosuch" in msg


def test_valid_settings_pass_and_agents_without_a_harness_take_none():
    check_settings(SEED, {"terminus.max_episodes": 3, "midharness.n": 2, "model": {"seed": 1}})
    check_settings(None, {})
    with pytest.raises(SettingsError, match="takes no harness settings"):
        check_settings(None, {"terminus.max_episodes": 3})
