"""Coupled pairs (issue 38): a grid with ``cell_seeds`` gives trial (task, k) the sampling seed of its cell, the
same in every grid and different across cells; the flag leaves older jobs' fingerprints as they were."""

from __future__ import annotations

from trials.agents import oracle_agent
from trials.grid import cell_seed, cell_settings
from trials.results import JobConfig


def test_a_cells_seed_is_fixed_distinct_and_31_bit():
    cells = [(t, k) for t in ("hello-file", "write-json", "count-lines") for k in range(1, 35)]
    seeds = [cell_seed(t, k) for t, k in cells]
    assert seeds == [cell_seed(t, k) for t, k in cells]  # the same in every grid, every run
    assert len(set(seeds)) == len(cells)
    assert all(0 <= s < 2**31 for s in seeds)


def test_cell_settings_add_the_seed_and_keep_one_the_experimenter_fixed():
    got = cell_settings({"model.max_tokens": 512, "midharness": {"n": 3}}, "hello-file", 2)
    assert got == {"model": {"max_tokens": 512, "seed": cell_seed("hello-file", 2)}, "midharness": {"n": 3}}
    fixed = {"model": {"seed": 7}}
    assert cell_settings(fixed, "hello-file", 2) == fixed


def test_the_flag_is_in_the_identity_only_when_on():
    base = {"job_id": "j", "tasks_dir": "/tmp", "task_names": ["a"], "agent": oracle_agent(), "r": 2}
    off, on = JobConfig(**base), JobConfig(**base, cell_seeds=True)
    assert "cell_seeds" not in off.identity()  # a job made before the field resumes with the same fingerprint
    assert on.identity()["cell_seeds"] is True and on.fingerprint() != off.fingerprint()
    assert off.differences(on) == ["cell_seeds: None -> True"]  # a resume that would couple an uncoupled job refuses
    assert on.differences(off) == ["cell_seeds: True -> None"] and off.differences(off) == []
