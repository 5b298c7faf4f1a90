"""The seed's own contracts hold for the seed in all three configurations (real tmux, local sandbox, runner,
scripted model), and a copy that crashes where a negative case goes fails that case, though the case's
'nothing happened' predicates hold on the crashed run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from validate.contracts import FrozenStore, run_contracts

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "harness_seed"
pytestmark = [pytest.mark.tmux, pytest.mark.sandbox]


def parts_missing() -> str | None:
    if shutil.which("tmux") is None:
        return "tmux is not installed"
    from trials.environments.local import bwrap_available

    if not bwrap_available():
        return "bubblewrap/nsenter are not available for the local sandbox"
    return None


def test_seed_contracts_hold_and_a_crash_never_passes_a_negative_case(tmp_path):
    if (why := parts_missing()):
        pytest.skip(why)
    frozen = tmp_path / "frozen.json"
    report = run_contracts(SEED, SEED, frozen, scope="all", out_dir=tmp_path / "seed")
    assert report.passed, report.summary()
    assert set(report.mechanisms) >= {"completion-handshake", "observation-limit", "midharness-selection"}
    assert all(r.crash is None for r in report.runs)
    by = {(r.mechanism, r.case, r.config): r for r in report.runs}
    # the switch really switches: off ends at the first claim, on asks first
    assert by[("completion-handshake", "claim-is-questioned", "off")].checked >= 3
    assert FrozenStore(frozen).get("completion-handshake/claim-is-questioned/claims-frozen@claims") == [2]

    crashing = tmp_path / "harness"
    shutil.copytree(SEED, crashing, ignore=shutil.ignore_patterns("__pycache__"))
    comp = crashing / "completion.py"
    anchor = '        """Update the state for a parsed reply'
    text = comp.read_text()
    at = text.index("\n", text.index(anchor) + len(anchor)) + 1
    comp.write_text(text[:at] + "        if parsed is not None and not parsed.task_complete:\n"
                    "            raise RuntimeError('planted crash')\n" + text[at:])
    report = run_contracts(crashing, SEED, frozen, mechanisms=["completion-handshake"],
                           out_dir=tmp_path / "crashing")
    assert not report.passed
    negative = [r for r in report.runs if r.case == "no-claim-no-question" and r.config != "incumbent"]
    assert negative and all(not r.passed and r.crash for r in negative)
    for r in negative:
        assert any(f.expectation is None and "crashed" in f.message and "planted crash" in f.message
                   for f in r.failures), r.failures
        assert "never-asked" not in {f.expectation for f in r.failures}  # it held: the crash alone fails it
    incumbent = next(r for r in report.runs if r.case == "no-claim-no-question" and r.config == "incumbent")
    assert incumbent.passed
