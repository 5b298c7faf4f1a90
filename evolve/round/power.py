"""An experiment's power before the night: what ``rise init`` and the start of ``rise evolve`` print, and the
refusal of a grid on which a perfect candidate cannot be adopted (``validate.power`` computes; this reads the
experiment).

Where the incumbent's per-task pass rates come from, in order:
1. its reference corpus, when the ledger has booked it: with ``adoption.baseline = "reference"`` the decision
   compares against exactly those counts; with ``"control"`` a fresh control is drawn each round at those rates;
2. otherwise the prior: ``[adoption] prior`` of experiment.toml for the tasks it names, and
   :data:`validate.power.DEFAULT_PRIOR` (0.5: the rate at which one run says least) for the others.
"""

from __future__ import annotations

from collections.abc import Callable

from evolve.experiment.store import Experiment
from trials.errors import RiseError
from validate.multiplicity import Family
from validate.power import DEFAULT_PRIOR, Baseline, GridPower, grid_power


class PowerRefusal(RiseError):
    """``rise evolve`` will not start a night on a grid that cannot adopt a perfect candidate."""


def development_tasks(exp: Experiment) -> list[str]:
    """The development tasks the controller decides on (the task folder's tasks less held-out when unnamed)."""
    from evolve.round.controller import Controller

    return Controller(exp).dev_tasks()


def _reference(exp: Experiment, tasks: list[str]) -> tuple[str, list[int], list[int]] | None:
    """(incumbent, passes per task, runs per task) of the incumbent's booked reference corpus, if any."""
    from validate.evaluate import grid_of_job

    incumbent = exp.incumbent()
    booked = exp.ledger.find("evaluation", key=f"{exp.commit_of(incumbent)}:reference")
    if not booked:
        return None
    grid, _ = grid_of_job(exp.root / booked[-1].job_dir)
    return (incumbent, [sum(o is True for o in grid.get(t, [])) for t in tasks],
            [len(grid.get(t, [])) for t in tasks])


def prior_source(prior: dict[str, float], tasks: list[str]) -> str:
    """How the prior's rates were chosen, for the power line."""
    named = [t for t in tasks if t in prior]
    if not named:
        return f"prior: every task {DEFAULT_PRIOR:g}, no reference corpus yet and no [adoption] prior"
    rest = f"; {DEFAULT_PRIOR:g} for the other {len(tasks) - len(named)}" if len(named) < len(tasks) else ""
    return f"prior: [adoption] prior {' '.join(f'{t}={prior[t]:.3g}' for t in named)}{rest}"


def experiment_power(exp: Experiment, candidates: int = 1) -> GridPower:
    """The power account of ``exp``'s grid as it stands (see the module docstring), at the level each of a round's
    ``candidates`` is tested at: the night's ``alpha`` split over its rounds and candidates (validate.multiplicity)."""
    cfg, ad = exp.config, exp.config.adoption
    tasks = development_tasks(exp)
    ref = _reference(exp, tasks)
    if ref is not None:
        incumbent, counts, runs = ref
        rates = tuple(c / n if n else 0.0 for c, n in zip(counts, runs))
        if ad.baseline == "reference":
            base = Baseline(rates, tuple(counts), tuple(runs))
            source = (f"reference corpus of {incumbent}: "
                      + " ".join(f"{t} {c}/{n}" for t, c, n in zip(tasks, counts, runs)))
        else:
            base, source = Baseline(rates), f"rates of {incumbent}'s reference corpus, a fresh control each round"
    else:
        base = Baseline(tuple(ad.prior.get(t, DEFAULT_PRIOR) for t in tasks))
        source = prior_source(ad.prior, tasks)
    level = Family(ad.alpha, ad.night_rounds, 1, candidates).alpha_candidate
    return grid_power(tasks, cfg.r, ad.policy, level, base, source, ad.gain)


def preflight(exp: Experiment, say: Callable[[str], None], force: bool, candidates: int = 1) -> Callable[[], None]:
    """The check ``rise evolve`` runs before its first round: print the power line, and refuse (unless
    ``force``) a grid on which a perfect candidate cannot be adopted."""
    def check() -> None:
        account = experiment_power(exp, candidates)
        say(account.line())
        if not account.adoptable:
            if force:
                say("--force: evolving anyway on a grid that cannot adopt a perfect candidate")
                return
            raise PowerRefusal(f"refusing to evolve {exp.config.name}: on {len(account.tasks)} development tasks × "
                               f"r={account.r} a perfect candidate cannot be adopted; {account.what_to_raise()} "
                               "in a new experiment (rise init), or pass --force")
    return check
