"""Harness settings are checked before a grid's first trial: a typo is the user's error, never the model's."""

from __future__ import annotations

import shutil

import pytest
from typer.testing import CliRunner

from rise.cli import app
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


def _copy_seed(tmp_path):
    dest = tmp_path / "harness"
    shutil.copytree(SEED, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_a_settings_module_that_fails_to_import_is_an_error_not_no_settings(tmp_path):
    """Issue 15 item 9: a broken import inside settings.py was reported as 'has no settings module'."""
    harness = _copy_seed(tmp_path)
    settings = harness / "settings.py"
    settings.write_text(settings.read_text() + "\nimport no_such_dependency_of_settings\n")
    with pytest.raises(SettingsError) as info:
        check_settings(harness, {"terminus.max_episodes": 3})
    msg = str(info.value)
    assert "could not check the settings" in msg and "no_such_dependency_of_settings" in msg
    assert "has no settings module" not in msg


def test_midharness_settings_without_a_midharness_config_are_a_problem(tmp_path):
    """Issue 15 item 9: midharness settings for a harness without midharness.config were passed silently."""
    harness = _copy_seed(tmp_path)
    shutil.move(harness / "midharness", tmp_path / "midharness-aside")
    with pytest.raises(SettingsError, match=r"no midharness\.config module.*midharness\.n"):
        check_settings(harness, {"midharness.n": 2})
    # a config module that exists but fails to import is an error too, never a pass
    (harness / "midharness").mkdir()
    (harness / "midharness" / "__init__.py").write_text("")
    (harness / "midharness" / "config.py").write_text("raise ImportError('broken on purpose')\n")
    with pytest.raises(SettingsError, match="broken on purpose"):
        check_settings(harness, {"midharness.n": 2})
