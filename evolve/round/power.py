"""An experiment's power before the night: what ``rise init`` and the start of ``rise evolve`` print, and the
refusal of a grid on which a perfect candidate cannot be adopted (``validate.power`` computes; this reads the
experiment).

Where the incumbent's per-task pass rates come from, in order:
1. its reference corpus, when the ledger has booked it: with ``adoption.baseline = "reference"`` the decision
   compares against exactly those counts; with ``"control"`` a fresh control is drawn each round at those rates;
2. otherwise the prior: ``[adoption] prior`` of experiment.toml for the tasks it names, and
   :data:`validate.power.DEFAULT_PRIOR` (0.5: the rate at which one run says least) for the others.

That line is printed before the night, at the planned M (``--candidates``). Each round then recomputes it once its
baseline grid is complete, before its first evaluation (:func:`announce_round`): the **measured** power against
the very counts its decisions will use, beside **the prior's**, both at the round's real M and rounds a night,
booked in the ledger as a ``power`` event that ``rise report`` shows.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from evolve.experiment.ledger import PowerEvent
from evolve.experiment.store import Experiment
from trials.errors import RiseError
from validate.multiplicity import Family
from validate.power import DEFAULT_PRIOR, Baseline, GridPower, grid_power


class PowerRefusal(RiseError):
    """``rise evolve`` will not start a night on a grid that cannot adopt a perfect candidate."""


def development_tasks(exp: Experiment) -> list[str]:
    """The development tasks the controller decides on (the task folder's tasks less held-out when unnamed)."""
    cfg = exp.config
    if cfg.tasks.development:
        return sorted(cfg.tasks.development)
    from trials.tasks import load_task_set

    tasks_dir = Path(cfg.tasks.dir)  # ExperimentConfig.load resolved it against experiment.toml's folder
    if not tasks_dir.is_absolute():
        tasks_dir = exp.config_path.parent / tasks_dir
    held = set(cfg.tasks.heldout)
    return sorted(t.name for t in load_task_set(tasks_dir) if t.name not in held)


def _reference(exp: Experiment, tasks: list[str]) -> tuple[str, dict[str, list[bool | None]]] | None:
    """(incumbent, decision-shaped grid) of the incumbent's booked reference corpus, if any."""
    from validate.evaluate import grid_of_job

    incumbent = exp.incumbent()
    booked = exp.ledger.find("evaluation", key=f"{exp.commit_of(incumbent)}:reference")
    if not booked:
        return None
    grid, _ = grid_of_job(exp.root / booked[-1].job_dir)
    return incumbent, grid


def prior_source(prior: dict[str, float], tasks: list[str]) -> str:
    """How the prior's rates were chosen, for the power line."""
    named = [t for t in tasks if t in prior]
    if not named:
        return f"prior: every task {DEFAULT_PRIOR:g}, no reference corpus yet and no [adoption] prior"
    rest = f"; {DEFAULT_PRIOR:g} for the other {len(tasks) - len(named)}" if len(named) < len(tasks) else ""
    return f"prior: [adoption] prior {' '.join(f'{t}={prior[t]:.3g}' for t in named)}{rest}"


def _known(grid: dict[str, list[bool | None]], tasks: list[str]) -> tuple[Baseline, str]:
    """The baseline of a complete grid the decisions compare against (its counts known), and its counts as text."""
    counts = [sum(o is True for o in grid.get(t, [])) for t in tasks]
    runs = [len(grid.get(t, [])) for t in tasks]
    rates = tuple(c / n if n else 0.0 for c, n in zip(counts, runs))
    return Baseline(rates, tuple(counts), tuple(runs)), " ".join(f"{t} {c}/{n}" for t, c, n in zip(tasks, counts, runs))


def _label(kind: str, family: Family) -> str:
    return (f"{kind} (M = {family.size} candidate{'s' if family.size > 1 else ''} a round, "
            f"{family.night_rounds} round{'s' if family.night_rounds > 1 else ''} a night)")


def prior_power(exp: Experiment, family: Family) -> GridPower:
    """The power from experiment.toml's prior (both grids drawn), at ``family``'s per-candidate level."""
    ad, tasks = exp.config.adoption, development_tasks(exp)
    base = Baseline(tuple(ad.prior.get(t, DEFAULT_PRIOR) for t in tasks))
    out = grid_power(tasks, exp.config.r, ad.policy, family.alpha_candidate, base, prior_source(ad.prior, tasks),
                     ad.gain)
    out.label = _label("the prior's", family)
    return out


def measured_power(exp: Experiment, family: Family, grid: dict[str, list[bool | None]], what: str) -> GridPower:
    """The power against the complete baseline grid ``grid`` (``what`` names it), at ``family``'s level."""
    ad, tasks = exp.config.adoption, development_tasks(exp)
    base, counts = _known(grid, tasks)
    out = grid_power(tasks, exp.config.r, ad.policy, family.alpha_candidate, base, f"{what}: {counts}", ad.gain)
    out.label = _label("measured", family)
    return out


def experiment_power(exp: Experiment, candidates: int = 1) -> GridPower:
    """The power account of ``exp``'s grid as it stands (see the module docstring), at the level each of a round's
    ``candidates`` is tested at: the night's ``alpha`` split over its rounds and candidates (validate.multiplicity)."""
    ad = exp.config.adoption
    family = Family(ad.alpha, ad.night_rounds, 1, candidates)
    ref = _reference(exp, development_tasks(exp))
    if ref is None:
        return prior_power(exp, family)
    incumbent, grid = ref
    if ad.baseline == "reference":
        return measured_power(exp, family, grid, f"reference corpus of {incumbent}")
    tasks = development_tasks(exp)  # fresh incumbent runs decide: the corpus's rates as a prior
    base, _ = _known(grid, tasks)
    fresh = "an incumbent arm beside each candidate" if ad.baseline == "interleaved" else "a fresh control each round"
    out = grid_power(tasks, exp.config.r, ad.policy, family.alpha_candidate, Baseline(base.rates),
                     f"rates of {incumbent}'s reference corpus, {fresh}", ad.gain)
    out.label = _label("measured rates", family)
    return out


def announce_round(ctl: Any, round_no: int, incumbent: str, what: str) -> PowerEvent:
    """Once per round, before its first evaluation: the measured power against the round's baseline grid (``what``:
    the reference corpus or the round's control) and the prior's, at the round's real M and rounds a night; booked
    as a ``power`` event (a resume reads it back) and said through the controller's ``say``."""
    key = f"r{round_no:02d}:power"
    found = ctl.led.find("power", key=key)
    if found:
        ev = found[0]
    else:
        family = ctl.family(round_no)
        measured = measured_power(ctl.exp, family, ctl.baseline, what)
        prior = prior_power(ctl.exp, family)
        ev = ctl.led.append(PowerEvent(key=key, round=round_no, incumbent=incumbent, family_size=family.size,
                                       night_rounds=family.night_rounds,
                                       measured={**measured.model_dump(mode="json"), "line": measured.line()},
                                       prior={**prior.model_dump(mode="json"), "line": prior.line()}))
    ctl.say(f"round {round_no}: {ev.measured['line']}")
    ctl.say(f"round {round_no}: beside it, {ev.prior['line']}")
    return ev


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
