"""The incumbent arm run beside a candidate's evaluation (``[adoption] baseline = "interleaved"``), and the load
check of every decision.

With ``interleaved`` each candidate's evaluation runs in lockstep with a fresh grid of the incumbent
(``validate.interleave``): block (task, repetition) starts in both arms at once, so both see the same machine
load, and the decision compares the candidate with that arm. The reference corpus is still run and kept: it is
what analysis, screening and the power estimate read; it no longer decides. Ledger: the arm's trials
``I:control:rNN:<slug>:<task>:<rep>`` (purpose ``control``), its grid ``I:control:rNN:<slug>`` (``Evaluation``,
``paired_with`` the candidate's commit), job folder ``rounds/rNN/<slug>/incumbent/``. A ⊥ cell in the arm blocks
the decision until a resume reruns it, as in a control grid.

Every decision also records ``decision["load"]`` (``validate.load_check``): both arms' load side by side and
whether they are comparable; a not comparable adoption is refused (``load_action`` refuse) or flagged.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from evolve.experiment.budget import check_budget
from evolve.round.model import LedgerBook, Stop, missing_cells
from trials.job import load_job
from validate.adoption import Decision
from validate.coupled import COUPLED, pair_rows, pair_totals
from validate.evaluate import GridOutcome, GridPlan
from validate.interleave import run_interleaved
from validate.load_check import LoadCheck, apply_load_check, check_load

if TYPE_CHECKING:
    from evolve.round.controller import Controller


class InterleavedStage:
    def __init__(self, ctl: Controller):
        self.ctl = ctl
        self.arms: dict[str, GridOutcome] = {}  # slug -> its incumbent arm, once run

    @property
    def on(self) -> bool:
        return self.ctl.cfg.adoption.baseline == "interleaved"

    def arm_plan(self, round_no: int, incumbent: str, slug: str) -> tuple[GridPlan, str, str]:
        ctl = self.ctl
        commit = ctl.exp.commit_of(incumbent)
        job = ctl.exp.root / "rounds" / f"r{round_no:02d}" / slug / "incumbent"
        plan = self.coupled(ctl.plan("control", ctl.version_dir(incumbent), ctl.dev_tasks(), ctl.cfg.r, job))
        return plan, commit, f"{commit}:control:r{round_no:02d}:{slug}"

    def coupled(self, plan: GridPlan) -> GridPlan:
        """Under ``policy = "coupled"`` both arms sample each cell with that cell's seed, so the decision's pairs
        share their randomness as far as the server reproduces it (issue 38); the other policies leave it."""
        return replace(plan, cell_seeds=True) if self.ctl.cfg.adoption.policy == COUPLED else plan

    async def run(self, round_no: int, incumbent: str, slug: str, plan: GridPlan | None,
                  commit: str) -> GridOutcome | None:
        """Run the candidate's grid ``plan`` (None: finished before) and the incumbent arm in lockstep; returns the
        candidate's outcome (None when it was not run). Raises Stop when the arm is incomplete."""
        ctl = self.ctl
        arm_plan, inc, prefix = self.arm_plan(round_no, incumbent, slug)
        check_budget(ctl.exp)
        arms = [(arm_plan, LedgerBook(ctl.led, ctl.exp.root, inc, prefix, "control"))]
        if plan is not None:
            plan = self.coupled(plan)
            arms.insert(0, (plan, LedgerBook(ctl.led, ctl.exp.root, commit, commit, "evaluation")))
        outs = await run_interleaved(arms, env_factory=ctl.env_factory, progress=ctl.progress,
                                     infra_retries=ctl.infra_retries)
        arm = self.arms[slug] = outs[-1]
        if not arm.complete:  # an infrastructure fault is no evidence against the candidate: complete it first
            raise Stop("blocked", f"the incumbent arm beside {slug} is incomplete ({missing_cells(arm)}): no decision "
                       "against it; rerun with --resume")
        ctl._evaluation_event(prefix, inc, arm, "control", paired_with=commit)
        return outs[0] if plan is not None else None

    def baseline(self, slug: str, fallback: dict) -> dict:
        """The grid the decision compares with: the candidate's incumbent arm, else the round's baseline."""
        return self.arms[slug].grid if self.on and slug in self.arms else fallback

    def agreement(self, slug: str, out: GridOutcome) -> dict | None:
        """How often the candidate's cells agreed with its incumbent arm's, per task and over all, with the
        coupling ρ̂ (``validate.coupled``): every interleaved decision measures it (issue 38). None without an
        arm."""
        if not (self.on and slug in self.arms):
            return None
        tasks, r = self.ctl.dev_tasks(), self.ctl.cfg.r
        rows = pair_rows(out.grid, self.arms[slug].grid, tasks, r)
        return {"tasks": rows, "all": pair_totals(rows)}

    def check(self, slug: str, out: GridOutcome, d: Decision) -> tuple[Decision, LoadCheck]:
        """Both arms' load side by side; a refused check turns an adoption into a rejection that says why."""
        ctl = self.ctl
        paired = self.on and slug in self.arms
        if paired:
            incumbent: Any = self.arms[slug].results.values()
        else:
            incumbent = load_job(ctl.baseline_dir)[1] if ctl.baseline_dir else []
        load = check_load(out.results.values(), incumbent, ctl.cfg.adoption.load_action, paired=paired)
        return apply_load_check(d, load), load
