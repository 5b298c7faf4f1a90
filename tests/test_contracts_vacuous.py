"""Checks that cannot fail are failures (issue 15 item 2): a contract check with no configuration, a
configuration in which no expectation was checked, a positive case whose on and off runs behave the same, and a
screening that "sees" the mechanism only in a boundary the incumbent hits as well."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

import validate.contracts as contracts_mod
from validate.contracts import run_contracts
from validate.scenarios import ScenarioRun

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "harness_seed"
CONTRACT = "contracts/completion-handshake.toml"


def _candidate(tmp_path: Path, edit=lambda text: text) -> Path:
    """A copy of the seed whose completion-handshake contract is changed (so it is the one checked)."""
    cand = tmp_path / "cand" / "harness"
    shutil.copytree(SEED, cand, ignore=shutil.ignore_patterns("__pycache__"))
    path = cand / CONTRACT
    path.write_text(edit(path.read_text()).replace('name = "Double confirmation', 'name = "Changed: double confirmation'))
    return cand


def _stub_runs(monkeypatch, document_for):
    async def run_scenario(harness_dir, case, task, settings, out_dir, *, label, agent=None):
        return ScenarioRun(label, out_dir, settings, document=document_for(case, label))

    monkeypatch.setattr(contracts_mod, "run_scenario", run_scenario)


def _doc(rule: int) -> dict:
    return {"rules": [rule], "claims": 2, "requests": 2, "status": "passed", "reward": 1.0, "spans": [],
            "steps": [], "trajectory": {}, "observations": []}


def test_no_configuration_is_not_a_pass(tmp_path):
    report = run_contracts(_candidate(tmp_path), SEED, tmp_path / "frozen.json", configs=())
    assert not report.passed and "no configuration to check" in report.summary()


VACUOUS = """version = 1
mechanism = "vacuous-demo"
name = "Checks only the disabled configuration"
triggers = ["a claim"]
effects = ["none that is checked"]
setting = { key = "terminus.confirmations", on = 2, off = 1 }

[tasks.hello]
instruction = "Create /app/hello.txt containing 'hi'."
check = "grep -qx hi /app/hello.txt"

[[cases]]
name = "claims"
kind = "positive"
task = "hello"
[[cases.replies]]
task_complete = true
[[cases.expect]]
path = "claims"
op = "gte"
value = 0
configs = ["off"]

[[cases]]
name = "quiet"
kind = "negative"
task = "hello"
[[cases.replies]]
task_complete = true
[[cases.expect]]
path = "claims"
op = "gte"
value = 0
configs = ["off"]
"""


def test_a_configuration_where_nothing_was_checked_fails(tmp_path, monkeypatch):
    cand = _candidate(tmp_path)
    (cand / "contracts" / "vacuous-demo.toml").write_text(VACUOUS)
    _stub_runs(monkeypatch, lambda case, label: _doc(0 if label == "off" else 1))  # on and off differ
    report = run_contracts(cand, SEED, tmp_path / "frozen.json", mechanisms=["vacuous-demo"],
                           out_dir=tmp_path / "out")
    assert all(r.passed for r in report.runs)  # every expectation that was checked holds ...
    assert not report.passed  # ... but nothing was checked with the mechanism on (or on the incumbent)
    assert sorted(f.config for f in report.failures) == ["incumbent", "on"], report.summary()
    assert "no expectation was checked in configuration 'on'" in report.summary()


@pytest.mark.parametrize("same", [True, False])
def test_positive_case_needs_a_difference_between_on_and_off(tmp_path, monkeypatch, same):
    _stub_runs(monkeypatch, lambda case, label: _doc(0 if same or label != "on" else 1))
    report = run_contracts(_candidate(tmp_path), SEED, tmp_path / "frozen.json", out_dir=tmp_path / "out")
    flagged = [f for f in report.failures if "the switch changed nothing" in f.message]
    if same:
        assert flagged and {f.kind for f in flagged} == {"positive"} and not report.passed
    else:
        assert not flagged  # (other expectations may fail on these stand-in documents; not this one)


# -- screening --------------------------------------------------------------------------------------------
def test_screening_counts_only_the_mechanisms_own_boundary(tmp_path):
    """Real monitor.host runs of the fixture harness in the fake sandbox: its step boundary is hit by the
    incumbent too, so it is no evidence; the boundary only the candidate's mode reaches is."""
    from monitor.agents import harness_agent
    from tests.test_monitor_host import FIXTURE
    from tests.test_runner_fake_env import DirEnv
    from validate.evaluate import GridPlan, MemoryBook, run_grid, screen

    def plan(job: str, mode: str) -> GridPlan:
        return GridPlan(purpose="screening", agent=harness_agent(FIXTURE), tasks_dir=REPO / "data" / "starter",
                        task_names=["hello-file"], r=1, job_dir=tmp_path / job, endpoint=None,
                        settings={"mode": mode})

    def env(kind, task, trial_dir, job_id):
        return DirEnv(task, trial_dir, job_id)

    asyncio.run(run_grid(plan("incumbent", "plain"), MemoryBook(), env_factory=env))
    every_step = asyncio.run(screen(plan("cand-a", "plain"), MemoryBook(), ["loop:Agent.step"], env_factory=env,
                                    incumbent_job=tmp_path / "incumbent"))
    assert every_step.spans["loop:Agent.step"] > 0 and not every_step.passed
    assert "the incumbent hits as well" in every_step.details()["reason"]
    own = asyncio.run(screen(plan("cand-b", "boom"), MemoryBook(), ["loop:Agent.step", "tools:explode"],
                             env_factory=env, incumbent_job=tmp_path / "incumbent"))
    assert own.passed and own.evidence == {"tools:explode": 1} and own.common == ["loop:Agent.step"]
