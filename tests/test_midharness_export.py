"""`rise midharness export`: pairwise verdicts of a job's trajectories become a JSONL distillation set."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from harness_seed.midharness.export import PairwiseExample
from rise.cli import app
from tests.test_midharness_actor import CANDIDATES, INSTRUCTION, PREFERRED, prefer, run_step
from trials.harness_api import write_json_atomic


async def _make_job(root: Path) -> dict:
    """A job folder with two trials: one pairwise (6 duels), one listwise (no pairwise verdicts)."""
    counts = {}
    for trial, mechanism in (("hello__r1", "pairwise"), ("hello__r2", "listwise")):
        reply, _, _ = await run_step(prefer(PREFERRED, CANDIDATES), {"n": 4, "verifier": mechanism})
        agent = root / trial / "agent"
        agent.mkdir(parents=True)
        # The trajectory format belongs to the harness loop; export finds the records wherever they sit.
        write_json_atomic(
            agent / "trajectory.json",
            {"steps": [{"step_id": 1}, {"step_id": 2, "extra": {"midharness": reply.extra["midharness"]}}]},
        )
        write_json_atomic(
            agent / "trial_spec.json",
            {
                "trial_id": trial,
                "task_name": "hello",
                "instruction": INSTRUCTION,
                "endpoint": {"base_url": "http://x/v1", "model": "gen-model"},
                "verifier_endpoint": {"base_url": "http://x/v1", "model": "judge-model"},
            },
        )
        write_json_atomic(root / trial / "result.json", {"reward": 1.0, "task_name": "hello"})
        counts[trial] = reply.extra["midharness"]["calls"]
    return counts


async def test_export_cli_writes_one_line_per_decided_duel(tmp_path):
    counts = await _make_job(tmp_path / "job")
    out = tmp_path / "out" / "verdicts.jsonl"
    result = CliRunner().invoke(app, ["midharness", "export", str(tmp_path / "job"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "6 pairwise verdicts from 2 trajectories" in result.output
    rows = [PairwiseExample.model_validate_json(line) for line in out.read_text().splitlines()]
    assert len(rows) == counts["hello__r1"] == 6
    for row in rows:
        assert row.task == INSTRUCTION and row.task_name == "hello" and row.trial == "hello__r1"
        assert row.verifier_model == "judge-model" and row.reward == 1.0 and row.step == 0
        assert row.verdict in ("A", "B") and row.completion == row.verdict and row.margin is not None
        assert "SECRET" not in row.model_dump_json()
        assert '"ls\\n"' in row.history and "root@box:/app# ls" in row.history
        assert row.prompt.endswith("Answer with a single letter: A or B.")
        winner = row.A if row.verdict == "A" else row.B
        loser = row.B if row.verdict == "A" else row.A
        assert (PREFERRED in winner) or (PREFERRED not in loser)  # the scripted judge's preference
    chosen = [r for r in rows if r.chosen]
    assert len(chosen) == 3 and all(PREFERRED in (r.A if r.chosen == "A" else r.B) for r in chosen)


def test_export_of_an_empty_folder_says_so(tmp_path):
    out = tmp_path / "v.jsonl"
    result = CliRunner().invoke(app, ["midharness", "export", str(tmp_path), "-o", str(out)])
    assert result.exit_code == 0 and out.read_text() == ""
    assert "0 pairwise verdicts" in result.output


def test_export_missing_folder_fails(tmp_path):
    result = CliRunner().invoke(
        app, ["midharness", "export", str(tmp_path / "nope"), "-o", str(tmp_path / "x")]
    )
    assert result.exit_code != 0
