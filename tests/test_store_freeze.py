"""Experiment store (git harness repo, tags, candidate worktrees) and freezing a version into one file."""

import tarfile

import pytest

from evolve.experiment.config import ExperimentConfig
from evolve.experiment.freeze import freeze, verify_frozen
from evolve.experiment.store import StoreError, init_experiment, open_experiment
from trials.agents import extract_frozen


@pytest.fixture
def seed(tmp_path):
    d = tmp_path / "seed_pkg"
    d.mkdir()
    (d / "__init__.py").write_text("")
    (d / "main.py").write_text("def main(argv=None):\n    return 0\n")
    (d / "settings.toml").write_text("[terminus]\nmax_episodes = 50\n")
    return d


def _config(name="exp"):
    return ExperimentConfig.model_validate({
        "name": name, "endpoint": {"base_url": "http://127.0.0.1:1/v1", "model": "m"},
        "tasks": {"dir": "data/starter", "heldout": ["long-task"]}, "r": 2,
    })


def test_init_creates_frozen_config_repo_and_v0(tmp_path, seed):
    exp = init_experiment("exp", _config(), runs_dir=tmp_path / "runs", seed_dir=seed)
    assert exp.versions() == ["v0"]
    assert ExperimentConfig.load(exp.config_path).tasks.heldout == ["long-task"]
    assert (exp.harness_dir / "main.py").exists() and exp.ledger.events == []
    with pytest.raises(StoreError, match="already holds"):
        init_experiment("exp", _config(), runs_dir=tmp_path / "runs", seed_dir=seed)
    assert open_experiment("exp", runs_dir=tmp_path / "runs").root == exp.root


def test_candidate_branch_worktree_and_tag(tmp_path, seed):
    exp = init_experiment("exp", _config(), runs_dir=tmp_path / "runs", seed_dir=seed)
    branch, wt = exp.create_candidate(1, "verify-completion")
    assert branch == "cand/r01-verify-completion" and wt.name == "harness"
    (wt / "settings.toml").write_text("[terminus]\nmax_episodes = 60\n")
    commit = exp.commit_worktree(wt, "raise max_episodes")
    assert exp.tag_version(commit, "adopted") == "v1"
    assert exp.tag_version(commit, "adopted") == "v1"  # idempotent on resume
    assert exp.versions() == ["v0", "v1"]
    assert exp.create_candidate(1, "verify-completion") == (branch, wt)  # resume finds it


def test_freeze_roundtrip_and_tamper_detection(tmp_path, seed):
    exp = init_experiment("exp", _config(), runs_dir=tmp_path / "runs", seed_dir=seed)
    out = tmp_path / "exp-v0.rhz"
    manifest = freeze(exp, "v0", out)
    assert manifest["commit"] == exp.commit_of("v0") and manifest["evolved_for"]["model"] == "m"
    assert "max_episodes = 50" in manifest["settings"]
    with tarfile.open(out) as tar:
        assert "harness/main.py" in tar.getnames()
    hdir, m2 = extract_frozen(out)
    assert m2 == manifest and verify_frozen(hdir, m2) == []
    with pytest.raises(ValueError, match="no adopted version"):
        freeze(exp, "v7", out)


def test_config_errors_name_the_field(tmp_path):
    p = tmp_path / "experiment.toml"
    p.write_text('name = "x"\nr = 0\n[endpoint]\nbase_url = "u"\nmodel = "m"\n[tasks]\ndir = "d"\n')
    with pytest.raises(ValueError, match=r"experiment.toml: r: Input should be greater than or equal to 1"):
        ExperimentConfig.load(p)


def test_edited_frozen_cache_is_refused_at_run_time(tmp_path, seed, monkeypatch):
    """Issue 15 item 3: ``rise eval --agent X.rhz`` verifies the unpacked harness against the frozen hashes."""
    from typer.testing import CliRunner

    from monitor.agents import resolve_agent
    from rise.cli import app

    monkeypatch.setenv("RISE_CACHE_DIR", str(tmp_path / "cache"))
    exp = init_experiment("exp", _config(), runs_dir=tmp_path / "runs", seed_dir=seed)
    out = tmp_path / "exp-v0.rhz"
    freeze(exp, "v0", out)
    agent = resolve_agent(str(out))
    hdir = tmp_path / "cache" / "frozen"
    assert agent.harness_version.endswith(exp.commit_of("v0")[:12]) and agent.harness_dir.startswith(str(hdir))
    main = next(hdir.glob("*/harness/main.py"))
    main.write_text("def main(argv=None):\n    return 1  # edited after freezing\n")
    with pytest.raises(ValueError, match=r"does not match the frozen manifest .*: main\.py"):
        resolve_agent(str(out))
    res = CliRunner().invoke(app, ["eval", "--tasks", "data/starter", "--task", "hello-file", "--agent", str(out),
                                   "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                                   "--job-dir", str(tmp_path / "job"), "--no-progress"])
    assert res.exit_code == 1 and "main.py" in res.output and "refusing to run it" in res.output
    assert not (tmp_path / "job").exists()
    # an added module is refused too, and a clean re-extraction runs again
    # keep the Repo alive while its blob is read: a Repo collected mid-read closes its cat-file pipe
    repo = exp.repo
    main.write_bytes(repo.commit("v0").tree["main.py"].data_stream.read())
    assert resolve_agent(str(out)).harness_dir == agent.harness_dir
    (main.parent / "sitecustomize.py").write_text("import os\n")
    with pytest.raises(ValueError, match=r"sitecustomize\.py \(not in the manifest\)"):
        resolve_agent(str(out))
