"""``rise midharness``: tools around the Mid-Harness action-scaling wrapper (distillation export)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rise.commands import console as _console

midharness_app = typer.Typer(
    help="Mid-Harness tools: export verifier verdicts for distillation.", no_args_is_help=True
)


@midharness_app.command("export")
def export(
    job_dir: Annotated[Path, typer.Argument(help="a job folder (or one trial folder / trajectory file)")],
    output: Annotated[Path, typer.Option("--output", "-o", help="JSONL file to write")],
) -> None:
    """Write the job's pairwise verifier verdicts as a JSONL distillation dataset (task, history, A, B,
    verdict, margin, verifier model, plus the decision-only prompt and its completion)."""
    from harness_seed.midharness.export import export_job

    if not job_dir.exists():
        raise typer.BadParameter(f"{job_dir} does not exist", param_hint="JOB_DIR")
    counts = export_job(job_dir, output)
    _console.out().print(
        f"{counts['examples']} pairwise verdicts from {counts['trajectories']} trajectories -> {output}"
    )
    if counts["examples"] == 0:
        _console.err().print(
            "[yellow]no pairwise verdicts found[/yellow] (were the trials run with midharness n > 1 and a "
            "pairwise or tournament verifier?)"
        )


def register(app: typer.Typer) -> None:
    app.add_typer(midharness_app, name="midharness")
