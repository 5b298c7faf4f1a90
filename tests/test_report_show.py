"""``rise show``: the adopted diff, the Handbook diff, settings by key, and per-task transitions against the
baseline, over a synthetic experiment (real git store, ledger events, fake job folders)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from evolve.views.show import ShowError, render_text, settings_changes, version_view
from rise.cli import app
from tests.test_report_support import build_experiment

runner = CliRunner()


@pytest.fixture(scope="module")
def exp(tmp_path_factory):
    root = tmp_path_factory.mktemp("show")
    return build_experiment(root / "runs", root)


def test_adopted_version_against_its_parent(exp):
    view = version_view(exp, "v1")
    assert (view.kind, view.parent, view.status, view.round, view.slug) == ("version", "v0", "adopted", 1, "verify")
    assert view.commit == exp.commit_of("v1") and view.parent_commit == exp.commit_of("v0")
    assert view.reason.startswith("adopt — paper: candidate Pass@1 0.750 vs baseline 0.375")
    assert {f.path for f in view.files} == {"HANDBOOK.toml", "loop.py", "settings.toml"}
    assert "+def verify_completion():" in view.code_diff
    assert [(s.key, s.old, s.new, s.kind) for s in view.settings] == [
        ("loop.max_episodes", 50, 60, "changed"), ("loop.verify_completion", False, True, "changed")]
    assert [b.id for _, b in view.handbook.added] == ["loop.verify_completion"] and not view.handbook.removed
    assert view.baseline.label == "v0 reference" and view.evaluation.metrics.pass_at_1 == 0.75
    pairs = {row.task: row.pair for row in view.comparison.tasks}
    assert pairs == {"alpha": "stable_pass", "beta": "fixed", "gamma": "fixed", "delta": "stable_fail"}
    assert view.heldout.metrics.pass_at_1 == 0.75 and not view.notes


def test_rejected_candidate_lists_its_regressions(exp):
    view = version_view(exp, "cand/r01-harmful")
    assert view.kind == "candidate" and view.status == "rejected" and view.parent == "v0"
    assert view.decision["regressions"] == ["alpha"] and "regressions of stable passes: alpha" in view.reason
    assert [(s.key, s.old, s.new) for s in view.settings] == [("parsing.format", "json", "xml")]
    assert view.handbook is not None and view.handbook.empty
    pairs = {row.task: row.pair for row in view.comparison.tasks}
    assert pairs["alpha"] == "regressed" and pairs["gamma"] == "flipping"
    text = render_text(view, code=False)
    assert "regressions of stable passes: alpha" in text and "regressed" in text


def test_blocked_candidate_says_why(exp):
    view = version_view(exp, "r02-flaky")
    assert view.status == "blocked" and view.parent == "v1" and "cannot adopt" in view.reason
    m = view.evaluation.metrics
    assert not m.complete and {(x.task, x.repetition, x.reason) for x in m.missing} == {
        ("alpha", 3, "infra:model_unreachable"), ("gamma", 2, "infra:model_unreachable")}
    assert view.baseline.label == "v1 reference"  # decided against the incumbent of round 2
    assert view.comparison.counts["incomplete"] == 2
    text = render_text(view, code=False)
    assert "INCOMPLETE: 2 cells ⊥/missing" in text and "alpha#3: infra:model_unreachable" in text


def test_seed_version_has_no_parent(exp):
    view = version_view(exp, "v0")
    assert view.parent is None and view.comparison is None and view.files == [] and view.status == "seed"
    assert view.evaluation.metrics.pass_at_1 == 0.375 and view.heldout.metrics.pass_at_1 == 0.25


def test_unknown_revision(exp):
    with pytest.raises(ShowError, match="neither an adopted version"):
        version_view(exp, "v9")


def test_settings_changes_by_key():
    old = "[a]\nx = 1\ny = 'k'\n[b.c]\nz = [1, 2]\n"
    new = "# comment\n[a]\ny = 'k'\nx = 2\n[b.c]\nz = [1, 2, 3]\nw = true\n"
    changes = settings_changes(old, new)
    assert [(c.key, c.kind) for c in changes] == [("a.x", "changed"), ("b.c.w", "added"), ("b.c.z", "changed")]
    assert settings_changes(new, None)[0].kind == "removed"
    assert changes[1].text() == "b.c.w: — → True"


def test_show_command(exp, tmp_path):
    out = tmp_path / "v1.json"
    res = runner.invoke(app, ["show", str(exp.root), "v1", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "loop.verify_completion: False → True" in res.output
    assert "Executable completion verification" in res.output  # the Handbook diff
    assert "+def verify_completion():" in res.output  # the code diff
    assert "beta" in res.output and "fixed" in res.output
    data = json.loads(out.read_text())
    assert data["status"] == "adopted" and data["comparison"]["counts"]["fixed"] == 2
    assert {s["key"] for s in data["settings"]} == {"loop.max_episodes", "loop.verify_completion"}
    res = runner.invoke(app, ["show", str(exp.root), "cand/r01-harmful", "--no-code"])
    assert res.exit_code == 0 and "regressions of stable passes: alpha" in res.output and "diff --git" not in res.output
    res = runner.invoke(app, ["show", str(exp.root), "v7"])
    assert res.exit_code == 1 and "neither an adopted version" in res.output
