"""Issue 15 item 10: tasks.dir relative to experiment.toml, disjoint task splits, clear errors for a bad ledger or
config in rise status/show/report, and settings files whose TOML is broken named with file and line."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from evolve.experiment.config import ExperimentConfig
from evolve.experiment.store import init_experiment
from evolve.round.controller import Controller
from rise.cli import app
from tests.test_controller_support import make_experiment

CONFIG = '''name = "x"
[endpoint]
base_url = "http://127.0.0.1:9/v1"
model = "m"
[tasks]
dir = "{dir}"
development = {dev}
heldout = {held}
'''


def test_tasks_dir_is_relative_to_the_experiment_toml(tmp_path, monkeypatch):
    (tmp_path / "cfg" / "tasks").mkdir(parents=True)
    path = tmp_path / "cfg" / "experiment.toml"
    path.write_text(CONFIG.format(dir="tasks", dev="[]", held="[]"))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    config = ExperimentConfig.load(path)
    assert config.tasks.dir == str(tmp_path / "cfg" / "tasks")
    exp = init_experiment("exp", config, runs_dir=tmp_path / "runs")
    assert Controller(exp).tasks_dir == tmp_path / "cfg" / "tasks"  # the frozen copy still finds them


def test_development_and_heldout_may_not_overlap(tmp_path):
    path = tmp_path / "experiment.toml"
    path.write_text(CONFIG.format(dir="t", dev='["a", "b"]', held='["b", "c"]'))
    with pytest.raises(ValueError, match=r"experiment.toml: .*development and heldout share b;"):
        ExperimentConfig.load(path)


@pytest.mark.parametrize("broken", ["ledger", "config"])
def test_status_show_report_name_a_bad_ledger_or_config(tmp_path, broken):
    exp = make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1")
    if broken == "ledger":
        (exp.root / "ledger.jsonl").write_text(
            '{"kind": "round_start", "key": "k", "round": 1, "incumbent": "v0"}\nnot json\n'
            '{"kind": "round_start", "key": "k2", "round": 2, "incumbent": "v0"}\n')
        where, broken_file = "ledger.jsonl:2: invalid ledger event", "ledger.jsonl"
    else:
        (exp.root / "experiment.toml").write_text(exp.config_path.read_text().replace("r = 2", "r = 0"))
        where, broken_file = "experiment.toml: r: Input should be greater than or equal to 1", "experiment.toml"
    runs = str(tmp_path / "runs")
    for args in (["status", "exp"], ["show", "exp", "v0"], ["report", "exp"]):
        res = CliRunner().invoke(app, [*args, "--runs-dir", runs])
        assert res.exit_code == 1 and isinstance(res.exception, SystemExit), (args, res.output)
        assert where in res.output and f"{exp.root}/{broken_file}" in res.output, (args, res.output)


def test_settings_toml_syntax_error_names_file_and_line(tmp_path):
    from harness_seed.settings import load_settings

    bad = tmp_path / "settings.toml"
    bad.write_text("[terminus]\nmax_episodes = = 5\n")
    with pytest.raises(ValueError, match=r"settings.toml: not valid TOML: .*line 2"):
        load_settings(path=bad)
