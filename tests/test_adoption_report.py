"""``rise show`` and ``rise report`` state every decision's policy and its measured false-adoption rate, also for a
record written before decisions carried the figure (over the synthetic experiment of test_report_support)."""

from __future__ import annotations

import pytest

from evolve.views.report import build_report, render_report
from evolve.views.show import render_text, version_view
from tests.test_report_support import build_experiment
from validate.adoption_sim import false_adoption_rate


@pytest.fixture(scope="module")
def exp(tmp_path_factory):
    root = tmp_path_factory.mktemp("policy")
    return build_experiment(root / "runs", root)


def test_show_states_policy_and_rate(exp):
    rate = false_adoption_rate("paper", 4, 4, 0.05)  # the fixture: policy paper, four tasks × r=4
    for ref in ("cand/r01-harmful", "v1"):
        view = version_view(exp, ref)
        assert view.policy.startswith(f"policy paper: measured false adoption {rate:.1%} at 4 tasks × r=4")
        assert "measured now" in view.policy  # its records carry no figure of their own
        view.reason = "reject — paper: candidate Pass@1 0.125 vs baseline 0.375"  # as an old record says it
        assert view.policy in render_text(view, code=False).splitlines()
    blocked = version_view(exp, "r02-flaky")
    assert blocked.status == "blocked" and blocked.policy == ""  # no decision yet, nothing to state


def test_report_states_policy_and_rate(exp):
    report = build_report(exp)
    rows = {c.slug: c for c in report.candidates}
    assert rows["harmful"].policy_note.startswith("policy paper: measured false adoption")
    assert rows["verify"].policy_note.startswith("policy paper: measured false adoption")
    assert rows["flaky"].policy_note == ""
    rows["harmful"].reason = "reject — paper: candidate Pass@1 0.125 vs baseline 0.375"
    html = render_report(report)
    assert f'<p class="policy">{rows["harmful"].policy_note}</p>' in html
