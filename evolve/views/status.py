"""``rise status``: the versions with their evaluations, the ledger's counts, what the trials spent against the
budgets, the grids being run right now, and where the night stands (:mod:`evolve.views.resume`). Printed through
any rich console: the command's standard output, or a file (``rise record``'s ``status.txt``)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from evolve.experiment.store import Experiment
from evolve.experiment.trial_scan import experiment_spend, running_jobs
from evolve.views.resume import render_summary, resume_summary
from trials.cost import CostSummary


def print_status(exp: Experiment, console: Console) -> None:
    """Versions with their evaluations, rounds and decisions recorded in the ledger, spend, running grids and the
    resume summary."""
    led = exp.ledger
    table = Table(title=f"{exp.config.name}: versions")
    for col in ("version", "commit", "Pass@1", "Pass^r", "Pass@r", "Flip", "complete"):
        table.add_column(col)
    for v in exp.versions():
        commit = exp.commit_of(v)
        evals = led.find("evaluation", commit=commit)
        m = evals[-1].metrics if evals else {}
        table.add_row(v, commit[:10], *(f"{m[k]:.3f}" if isinstance(m.get(k), float) else "—"
                                       for k in ("pass_at_1", "pass_hat_r", "pass_at_r", "flip")),
                      str(evals[-1].complete) if evals else "—")
    console.print(table)
    rounds = led.find("round_start")
    decisions = led.find("adoption") + led.find("rejection")
    console.print(f"rounds: {len(rounds)}, candidates: {len(led.find('candidate_created'))}, "
                  f"decisions: {len(decisions)}, trials recorded: {len(led.find('trial_done'))}")
    _print_spend_and_running(exp, console)
    for line in render_summary(resume_summary(exp)):
        console.print(line, markup=False, soft_wrap=True)


def _print_spend_and_running(exp: Experiment, console: Console) -> None:
    """What the experiment's trials spent against its budgets, and the grids being run right now."""
    total = CostSummary.total(experiment_spend(exp).values())
    budgets = exp.config.budgets
    limits = "".join([f" of ${budgets.max_usd}" if budgets.max_usd else "",
                      f"; {total.trials} of {budgets.max_trials} trials allowed" if budgets.max_trials else ""])
    console.print(f"spend: {total.trials} trials, {total.tokens:,} tokens "
                  f"(generator {total.generator.input_tokens:,} in / {total.generator.output_tokens:,} out, verifier "
                  f"{total.verifier.tokens:,}), ${total.usd:.4f}{limits}", soft_wrap=True)
    jobs = running_jobs(exp)
    if not jobs:
        console.print("running: nothing", soft_wrap=True)
    for job in jobs:
        flight = f"; in flight: {', '.join(job['in_flight'])}" if job["in_flight"] else ""
        console.print(f"running: {job['job_dir']} (pid {job['pid']}), {job['done']}/{job['total'] or '?'} cells "
                      f"done{flight}", soft_wrap=True)
