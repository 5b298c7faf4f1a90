"""The experiment's spending limits (``budgets.max_trials`` and ``budgets.max_usd`` of experiment.toml)."""

from __future__ import annotations

from evolve.round_model import ControllerError
from evolve.store import Experiment


def check_budget(exp: Experiment) -> None:
    """Refuse to start another grid once the experiment's trials have spent a budget of experiment.toml.

    Checked before each grid (a grid under way may overshoot by at most its own size); trials a kill cut off
    count too. Raising the budget in experiment.toml and resuming continues where the run stopped."""
    from evolve.report import experiment_spend  # the report reads the spend of every grid folder; imported late

    budgets = exp.config.budgets
    if budgets.max_trials is None and budgets.max_usd is None:
        return
    trials = usd = 0.0
    for part in experiment_spend(exp).values():
        trials += part.trials
        usd += part.usd
    if budgets.max_trials is not None and trials >= budgets.max_trials:
        raise ControllerError(f"{exp.config_path}: budget spent: {int(trials)} trials run, "
                              f"budgets.max_trials = {budgets.max_trials}")
    if budgets.max_usd is not None and usd >= budgets.max_usd:
        raise ControllerError(f"{exp.config_path}: budget spent: ${usd:.4f}, budgets.max_usd = {budgets.max_usd}")
