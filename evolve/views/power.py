"""What a round's decisions could see and what early stopping saved, for the morning page (``morning.html.j2``).

- **Power**: the round's ``power`` event (:func:`evolve.round.power.announce_round`): the measured power against
  the baseline grid the round decided on, beside the prior's, both at the round's real M and rounds a night.
  Rounds decided before the event existed say so; nothing is recomputed after the fact.
- **Trials saved by early stopping**, measured per decided candidate from the ledger: the full grid's cells
  (tasks × r), the cells the decision was taken on (its ``Evaluation`` event), and the evaluation trials the
  candidate ran in all (publication completes an adopted grid, so an adopted candidate saves nothing); ⊥
  attempts are counted apart, as spent without a result.
"""

from __future__ import annotations

from dataclasses import dataclass

from evolve.experiment.store import Experiment

NO_POWER = "power not recorded for this round (decided before rounds booked their power)"
NOT_NEEDED = "no power was needed: no candidate reached the evaluation in this round"


@dataclass
class RoundPower:
    measured: str  # the measured line, or NO_POWER
    prior: str = ""
    measured_power: float | None = None
    prior_power: float | None = None
    gain: float | None = None


@dataclass
class TrialsSaved:
    cells: int  # the full grid: development tasks × r
    at_decision: int  # cells run when the decision was taken
    run: int  # evaluation trials with a result, in all (publication's completion included)
    infra: int  # ⊥ attempts (spent, no result)
    curtailed: bool

    @property
    def saved(self) -> int:
        return max(0, self.cells - self.run)

    def line(self) -> str:
        share = self.saved / self.cells if self.cells else 0.0
        how = "decided early by curtailment" if self.curtailed else "decided on the full grid"
        completed = " (completed for publication)" if self.run > self.at_decision else ""
        bottom = f", {self.infra} ⊥ attempt(s) besides" if self.infra else ""
        return (f"{how} after {self.at_decision} of {self.cells} cells; {self.run} evaluation trials run in "
                f"all{completed}{bottom}: {self.saved} saved ({share:.0%})")


def round_power(exp: Experiment, round_no: int) -> RoundPower:
    """The round's booked power (measured and the prior's), or :data:`NO_POWER`."""
    found = exp.ledger.find("power", key=f"r{round_no:02d}:power")
    if not found:
        prefix = f"r{round_no:02d}:"
        if exp.ledger.done(f"{prefix}end") and not any(e.key.startswith(prefix) and e.key.endswith(":created")
                                                       for e in exp.ledger.find("candidate_created")):
            return RoundPower(NOT_NEEDED)  # the night of 2026-12-07: three rounds without a candidate
        return RoundPower(NO_POWER)
    ev = found[0]
    return RoundPower(ev.measured.get("line", ""), ev.prior.get("line", ""), ev.measured.get("power"),
                      ev.prior.get("power"), ev.measured.get("gain"))


def trials_saved(exp: Experiment, commit: str) -> TrialsSaved | None:
    """Early stopping's saving for the candidate at ``commit`` (its final commit), measured from the ledger; None
    before its evaluation was booked."""
    led = exp.ledger
    ev = led.find("evaluation", key=f"{commit}:evaluation")
    if not ev:
        return None
    m = ev[0].metrics
    trials = led.find("trial_done", commit=commit, purpose="evaluation")
    infra = sum(t.status == "infra" for t in trials)
    return TrialsSaved(int(m.get("cells", 0)), int(m.get("observed_cells", 0)), len(trials) - infra, infra,
                       bool(m.get("curtailed")))
