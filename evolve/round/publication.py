"""Stage 5 of a round, publication (a collaborator of :class:`evolve.round.controller.Controller`): of the candidates whose
decision is *adopt*, the one with the highest Pass@1 on its complete grid is adopted (curtailed grids are
completed first); its held-out split is run, it is tagged ``v(t+1)`` and its evaluation becomes the new version's
reference corpus; every other contender is rejected with the reason."""

from __future__ import annotations

from typing import Any

from evolve.experiment.ledger import Adoption
from evolve.round.model import CandidateReport, ControllerError, RoundReport, Stop, missing_cells
from validate.evaluate import kill_point


class PublicationStage:
    """Publication (uses the controller's ``exp``, ``led``, ``cfg``, ``grid``, ``plan``, ``dev_tasks``,
    ``heldout``, ``reject``, ``_write_version`` and ``_evaluation_event``)."""

    def __init__(self, ctl: Any):
        self.ctl = ctl  # the round's controller: the experiment, the ledger, grids and the other stages

    async def publish(self, round_no: int, incumbent: str, report: RoundReport) -> None:
        adopted = [c for c in report.candidates if c.status == "adopted"]
        contenders = [c for c in report.candidates if c.status == "adopt?"]
        if not adopted and contenders:
            try:
                if len(contenders) > 1:  # curtailed grids are not comparable: complete each before choosing
                    for c in contenders:
                        c.decision["pass_at_1_complete"] = await self.complete_evaluation(round_no, c)
                winner = max(contenders, key=lambda c: (c.decision.get("pass_at_1_complete",
                                                                       c.decision.get("pass_at_1")) or 0.0,
                                                        -contenders.index(c)))
                await self.adopt(round_no, incumbent, winner)
            except Stop as stop:  # ⊥ cells in a grid to complete: nothing is published until a resume reruns them
                for c in contenders:
                    c.status, c.reason = "blocked", stop.reason
                return
            adopted = [winner]
        for c in contenders:
            if c.status == "adopt?":
                w = adopted[0]
                why = (f"would adopt ({c.reason}) but {w.slug} was adopted as {w.version} in round {round_no} "
                       f"with Pass@1 {w.decision.get('pass_at_1_complete', w.decision.get('pass_at_1'))} on its "
                       f"complete grid" + (f" against {c.decision['pass_at_1_complete']}"
                                           if "pass_at_1_complete" in c.decision else ""))
                try:
                    self.ctl.reject(c.commit, c, why, c.decision)
                except Stop:
                    pass
        report.adopted = adopted[0].version if adopted else None

    async def complete_evaluation(self, round_no: int, c: CandidateReport) -> float | None:
        """Run the cells curtailment skipped in a contender's evaluation grid; its Pass@1 on the complete grid.
        A grid already complete runs nothing (so a resume chooses the same winner)."""
        wt = self.ctl.exp.root / "worktrees" / f"r{round_no:02d}-{c.slug}" / "harness"
        job = self.ctl.exp.root / "rounds" / f"r{round_no:02d}" / c.slug / "evaluation"
        out = await self.ctl.grid(self.ctl.plan("evaluation", wt, self.ctl.dev_tasks(), self.ctl.cfg.r, job), c.commit, c.commit)
        if not out.complete:
            raise Stop("blocked", f"the evaluation of {c.slug} could not be completed to compare the candidates "
                       f"that would be adopted ({missing_cells(out)}); rerun with --resume")
        return out.metrics.pass_at_1

    async def adopt(self, round_no: int, incumbent: str, c: CandidateReport) -> None:
        version = f"v{int(incumbent[1:]) + 1}"
        wt = self.ctl.exp.root / "worktrees" / f"r{round_no:02d}-{c.slug}" / "harness"
        job = self.ctl.exp.root / "rounds" / f"r{round_no:02d}" / c.slug / "evaluation"
        ref_key = f"{c.commit}:reference"
        if not self.ctl.led.done(ref_key):
            await self.ctl.heldout(version, c.commit, wt)
            out = await self.ctl.grid(self.ctl.plan("evaluation", wt, self.ctl.dev_tasks(), self.ctl.cfg.r, job), c.commit,
                                  c.commit)  # completes a grid that curtailment cut short; runs nothing else
            if not out.complete:
                raise Stop("blocked", f"the evaluation of {c.slug} could not be completed as {version}'s "
                            f"reference corpus ({missing_cells(out)}); rerun with --resume")
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
