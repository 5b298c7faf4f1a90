"""Stage 5 of a round, publication (a collaborator of :class:`evolve.round.controller.Controller`): of the candidates whose
decision is *adopt*, the one with the highest Pass@1 on its complete grid is adopted (curtailed grids are
completed first); its held-out split is run, it is tagged ``v(t+1)`` and its evaluation becomes the new version's
reference corpus; every other contender is rejected with the reason.

⊥ follows the decision's rule (``evolve.round.model.charged_cells``): a cell of a grid being completed that is
still ⊥ after the controller's ``infra_limit`` attempts is charged, and its contender is rejected as unpublishable
(its evaluation would be the next reference corpus, which needs every cell) while the others go on; below the
limit it blocks the round until a resume reruns it. So a round ends within a bounded number of resumes."""

from __future__ import annotations

from typing import Any

from evolve.experiment.ledger import Adoption
from evolve.round.model import (
    CandidateReport,
    ControllerError,
    RoundReport,
    Stop,
    Unpublishable,
    charged_cells,
    missing_cells,
    unpublishable,
)
from validate.evaluate import GridOutcome, kill_point


class PublicationStage:
    """Publication (uses the controller's ``exp``, ``led``, ``cfg``, ``grid``, ``plan``, ``dev_tasks``,
    ``heldout``, ``reject``, ``_write_version`` and ``_evaluation_event``)."""

    def __init__(self, ctl: Any):
        self.ctl = ctl  # the round's controller: the experiment, the ledger, grids and the other stages

    async def publish(self, round_no: int, incumbent: str, report: RoundReport) -> None:
        adopted = [c for c in report.candidates if c.status == "adopted"]
        contenders = [c for c in report.candidates if c.status == "adopt?"]
        while contenders and not adopted:
            try:
                winner = await self.choose(round_no, contenders)
                await self.adopt(round_no, incumbent, winner)
                adopted = [winner]
            except Unpublishable as bad:  # rejected with its reason; the round's other contenders go on
                contenders.remove(bad.candidate)
                self._reject(bad.candidate, bad.reason, {**bad.candidate.decision, "unpublishable": bad.cells})
            except Stop as stop:  # ⊥ below the limit in a grid to complete: a resume reruns it (bounded)
                for c in contenders:
                    c.status, c.reason = "blocked", stop.reason
                return
        for c in contenders:
            if c.status == "adopt?":
                w = adopted[0]
                why = (f"would adopt ({c.reason}) but {w.slug} was adopted as {w.version} in round {round_no} "
                       f"with Pass@1 {w.decision.get('pass_at_1_complete', w.decision.get('pass_at_1'))} on its "
                       f"complete grid" + (f" against {c.decision['pass_at_1_complete']}"
                                           if "pass_at_1_complete" in c.decision else ""))
                self._reject(c, why, c.decision)
        report.adopted = adopted[0].version if adopted else None

    def _reject(self, c: CandidateReport, why: str, decision: dict[str, Any]) -> None:
        try:
            self.ctl.reject(c.commit, c, why, decision)
        except Stop:
            pass

    async def choose(self, round_no: int, contenders: list[CandidateReport]) -> CandidateReport:
        """The contender with the highest Pass@1; with several, on complete grids (curtailed grids are not
        comparable). Every contender's grid is completed before a ⊥ blocks, so each resume tries them all."""
        if len(contenders) > 1:
            blocked = None
            for c in contenders:
                if "pass_at_1_complete" not in c.decision:
                    try:
                        c.decision["pass_at_1_complete"] = await self.complete_evaluation(round_no, c)
                    except Stop as stop:
                        if isinstance(stop, Unpublishable):
                            raise
                        blocked = blocked or stop
            if blocked:
                raise blocked
        return max(contenders, key=lambda c: (c.decision.get("pass_at_1_complete", c.decision.get("pass_at_1"))
                                              or 0.0, -contenders.index(c)))

    async def complete_evaluation(self, round_no: int, c: CandidateReport, why: str = "to compare the candidates "
                                  "that would be adopted") -> float | None:
        """Run the cells curtailment skipped in a contender's evaluation grid (a grid already complete runs
        nothing, so a resume chooses the same winner); its Pass@1 on the complete grid. A cell still ⊥ after the
        controller's ``infra_limit`` attempts is charged as at the decision, and the contender is
        :class:`Unpublishable`; one below the limit blocks until a resume."""
        return (await self._completed(round_no, c, why)).metrics.pass_at_1

    async def _completed(self, round_no: int, c: CandidateReport, why: str) -> GridOutcome:
        wt = self.ctl.exp.root / "worktrees" / f"r{round_no:02d}-{c.slug}" / "harness"
        job = self.ctl.exp.root / "rounds" / f"r{round_no:02d}" / c.slug / "evaluation"
        out = await self.ctl.grid(self.ctl.plan("evaluation", wt, self.ctl.dev_tasks(), self.ctl.cfg.r, job),
                                  c.commit, c.commit)
        if out.complete:
            return out
        charged = charged_cells(self.ctl.led, c.commit, "evaluation", out.results, self.ctl.baseline,
                                self.ctl.infra_limit)
        if charged:
            reason, names = unpublishable(self.ctl.led, c.commit, sorted(charged), "while publication completed "
                                          "its grid")
            raise Unpublishable(c, f"{reason}; the decision was: {c.reason}", names)
        raise Stop("blocked", f"the evaluation of {c.slug} could not be completed {why} ({missing_cells(out)}); "
                   "rerun with --resume")

    async def adopt(self, round_no: int, incumbent: str, c: CandidateReport) -> None:
        version = f"v{int(incumbent[1:]) + 1}"
        wt = self.ctl.exp.root / "worktrees" / f"r{round_no:02d}-{c.slug}" / "harness"
        job = self.ctl.exp.root / "rounds" / f"r{round_no:02d}" / c.slug / "evaluation"
        ref_key = f"{c.commit}:reference"
        if not self.ctl.led.done(ref_key):
            await self.ctl.heldout(version, c.commit, wt)
            # completes a grid that curtailment cut short (runs nothing else), under complete_evaluation's ⊥ rule
            out = await self._completed(round_no, c, f"as {version}'s reference corpus")
            tag = self.ctl.exp.tag_version(c.commit, f"{version}: {c.slug} (round {round_no})")
            if tag != version:
                raise ControllerError(f"tagged {tag}, expected {version}: the harness repo changed under the run")
            kill_point("publication:tag")
            self.ctl._write_version(version, c.commit, incumbent, job, round=round_no, slug=c.slug)
            kill_point("publication:versions")
            self.ctl._evaluation_event(ref_key, c.commit, out, "reference")
        else:
            self.ctl.exp.tag_version(c.commit, f"{version}: {c.slug} (round {round_no})")
        if not self.ctl.led.done(f"{c.commit}:adoption"):
            self.ctl.led.append(Adoption(key=f"{c.commit}:adoption", commit=c.commit, version=version, parent=incumbent,
                                     decision={**c.decision, "reason": c.reason}))
            kill_point("publication")
        c.status, c.version = "adopted", version
