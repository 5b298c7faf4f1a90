"""The compute-matched control arm of a decision (``[adoption] control = "midharness"``).

After a candidate's decision against the incumbent, the same tokens per trial are spent on the incumbent with
the seed's Mid-Harness action scaling (``[midharness] n`` samples per step, a verifier chooses), and the
candidate is compared with that arm by the same statistic. The matching (``validate.control_arm``):

1. the target is the candidate's measured tokens per trial (generator + verifier, ``result.json`` ``cost``);
2. a token model calibrated on the incumbent's own grid (the round's baseline, at the incumbent's settings)
   predicts tokens per trial at each (N, verifier); the closest is chosen;
3. the arm runs as a grid (dev × r) of the incumbent with ``settings = {"midharness": {"n", "verifier"}}``;
   if its measured tokens per trial miss the target by more than 10 %, the model is recalibrated on the arm's
   own grid and another (N, verifier) runs, up to ``[adoption] control_attempts``; every attempt is recorded
   with its measured ratio, and the arm closest to the target is the one compared.

N = 1 is the incumbent itself: its arm is the baseline grid (nothing runs). Arms are shared by the candidates
of a round that choose the same setting. Ledger: trials ``I:control_arm:rNN:n<N>-<verifier>:<task>:<rep>``,
the grid ``I:control_arm:rNN:n<N>-<verifier>`` (an ``Evaluation`` with purpose ``control_arm`` and its
measured tokens per trial); the matching and the second comparison go into the candidate's decision
(``decision["control_arm"]``). Everything is derived from stored grids, so a resume chooses the same arms.

By default the arm is reported only; ``[adoption] require_beat_control_arm = true`` makes beating it a
condition of adoption (then an arm with ⊥ cells blocks the decision until a resume reruns them).
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from evolve.round.model import ControllerError, missing_cells
from trials import harness_settings
from trials.job import load_job
from trials.metrics import compare
from trials.results import TrialResult
from validate.adoption import Decision, decide
from validate.control_arm import (
    TOLERANCE,
    ArmChoice,
    MatchError,
    TokenModel,
    choose,
    tokens_per_trial,
    within,
)
from validate.evaluate import GridOutcome, outcome_of


def midharness_settings(harness: Path) -> dict[str, Any]:
    """The incumbent's own ``[midharness]`` section (n, verifier, pivots); refuses a harness without it."""
    if not (harness / "midharness" / "verifiers.py").is_file():
        raise ControllerError(f"{harness}: control = \"midharness\" needs the seed's Mid-Harness package "
                              "(midharness/) in the incumbent")
    try:
        data = harness_settings.read(harness)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ControllerError(f"{harness / 'settings.toml'}: unreadable ({exc})") from None
    section = data.get("midharness", {})
    return {"n": int(section.get("n", 1)), "verifier": str(section.get("verifier", "pairwise")),
            "pivots": int(section.get("pivots", 4))}


class ControlArmStage:
    """The arm stage of :class:`evolve.round.controller.Controller` (a collaborator: it uses the controller's ``exp``, ``cfg``, ``led``,
    ``baseline_dir``, ``dev_tasks``, ``version_dir``, ``plan``, ``grid`` and ``_evaluation_event``)."""

    def __init__(self, ctl: Any):
        self.ctl = ctl  # the round's controller: the experiment, the ledger, grids and the other stages

    async def control_arm(self, round_no: int, incumbent: str, cand: GridOutcome,
                          d: Decision) -> tuple[Decision, dict[str, Any]]:
        """Match, run (or read back) the arm, compare; the decision (changed only when beating the arm is
        required) and the record that goes into the candidate's decision as ``control_arm``."""
        ad = self.ctl.cfg.adoption
        harness = self.ctl.version_dir(incumbent)
        own = midharness_settings(harness)
        _, base_results, _ = load_job(self.ctl.baseline_dir)
        try:
            model = TokenModel.calibrate(base_results, own["n"], own["verifier"], own["pivots"])
            incumbent_tokens = tokens_per_trial(base_results)
            target = tokens_per_trial(cand.results.values())
        except MatchError as exc:  # nothing to measure: no arm can be planned, now or on a resume
            record = {"status": "not run", "reason": f"control arm not planned: {exc}",
                      "required": ad.require_beat_control_arm}
            if ad.require_beat_control_arm and d.adopt:
                return replace(d, adopt=False, reason=f"reject — {record['reason']} (beating it is required)"), record
            return d, record
        attempts: list[dict[str, Any]] = []
        arms: dict[str, GridOutcome] = {}
        for _ in range(ad.control_attempts):
            tried = [(a["n"], a["verifier"]) for a in attempts]
            choice = choose(model, target, ad.control_verifiers, ad.control_max_n, exclude=tried)
            arm, where = await self._arm_grid(round_no, incumbent, harness, choice, own)
            rec = {"n": choice.n, "verifier": choice.verifier, "predicted_tokens_per_trial": round(choice.predicted, 1),
                   "model": {k: round(v, 3) for k, v in asdict(model).items()}, "grid": where, "complete": arm.complete}
            attempts.append(rec)
            arms[choice.label] = arm
            if not arm.complete:
                rec["missing"] = missing_cells(arm)
                break
            results = list(arm.results.values())
            measured = tokens_per_trial(results)
            rec.update(measured_tokens_per_trial=round(measured, 1), ratio=round(measured / target, 4),
                       matched=within(measured, target))
            if rec["matched"]:
                break
            model = TokenModel.calibrate(results, choice.n, choice.verifier, own["pivots"], prior=model)
        measured_recs = [a for a in attempts if "ratio" in a]
        best = min(measured_recs, key=lambda a: abs(a["ratio"] - 1)) if measured_recs else attempts[-1]
        arm = arms[f"n{best['n']}-{best['verifier']}"]
        record: dict[str, Any] = {
            "n": best["n"], "verifier": best["verifier"], "target_tokens_per_trial": round(target, 1),
            "incumbent_tokens_per_trial": round(incumbent_tokens, 1),
            "measured_tokens_per_trial": best.get("measured_tokens_per_trial"), "ratio": best.get("ratio"),
            "matched": bool(best.get("matched")), "tolerance": TOLERANCE, "attempts": attempts,
            "grid": best["grid"], "required": ad.require_beat_control_arm}
        if not best["complete"]:
            record["status"] = "incomplete"
            record["reason"] = f"control arm incomplete ({best['missing']}); rerun with --resume"
            if ad.require_beat_control_arm:
                return replace(d, adopt=False, decided=False, reason=record["reason"]), record
            return d, record
        dev, r = self.ctl.dev_tasks(), self.ctl.cfg.r
        d2 = decide(cand.grid, arm.grid, dev, r, ad.policy, ad.alpha, curtail=ad.sequential)
        record.update(status="compared", beats=d2.adopt, reason=d2.reason, pass_at_1=arm.metrics.pass_at_1,
                      p_value=d2.p_value, comparison=compare(arm.grid, cand.grid, r).counts,
                      decision={k: v for k, v in asdict(d2).items() if k not in ("missing",)})
        if not record["matched"]:
            record["note"] = (f"no arm within {TOLERANCE:.0%} of the candidate's tokens per trial after "
                              f"{len(attempts)} attempt(s); compared with the closest (ratio {best.get('ratio')})")
        if ad.require_beat_control_arm and d.adopt and not d2.adopt:
            why = (f"reject — beats the incumbent ({d.reason}) but not the compute-matched control arm "
                   f"(N = {best['n']}, {best['verifier']}): {d2.reason}")
            return replace(d, adopt=False, reason=why), record
        return d, record

    async def _arm_grid(self, round_no: int, incumbent: str, harness: Path, choice: ArmChoice,
                        own: dict[str, Any]) -> tuple[GridOutcome, str]:
        """The arm's grid at ``choice`` (run, resumed or read back) and where it lies, relative to the experiment.
        At the incumbent's own setting the arm is the baseline grid itself."""
        if choice.n == own["n"] and (choice.n == 1 or choice.verifier == own["verifier"]):
            _, results, _ = load_job(self.ctl.baseline_dir)
            plan = self.ctl.plan("control_arm", harness, self.ctl.dev_tasks(), self.ctl.cfg.r, self.ctl.baseline_dir)
            out = outcome_of(plan, _by_cell(results))
            return out, str(self.ctl.baseline_dir.relative_to(self.ctl.exp.root))
        commit = self.ctl.exp.commit_of(incumbent)
        prefix = f"{commit}:control_arm:r{round_no:02d}:{choice.label}"
        job = self.ctl.exp.root / "rounds" / f"r{round_no:02d}" / "control-arm" / choice.label
        plan = self.ctl.plan("control_arm", harness, self.ctl.dev_tasks(), self.ctl.cfg.r, job)
        plan.settings = {"midharness": {"n": choice.n, "verifier": choice.verifier}}
        if self.ctl.led.done(prefix):  # finished before: read it back, run nothing
            _, results, _ = load_job(job)
            out = outcome_of(plan, _by_cell(results))
        else:
            out = await self.ctl.grid(plan, commit, prefix)
            if out.complete:
                self.ctl._evaluation_event(prefix, commit, out, "control_arm", n=choice.n, verifier=choice.verifier,
                                       tokens_per_trial=round(tokens_per_trial(out.results.values()), 1))
        return out, str(job.relative_to(self.ctl.exp.root))


def _by_cell(results: list[TrialResult]) -> dict[tuple[str, int], TrialResult]:
    return {(x.task_name, x.repetition): x for x in results}


def arm_lines(record: dict[str, Any] | None) -> list[str]:
    """A decision's control-arm record as lines for ``rise show`` and ``rise report`` (empty when none)."""
    if not record:
        return []
    role = "required for adoption" if record.get("required") else "reported only, not required for adoption"
    if "n" not in record:  # not planned: nothing ran
        return [f"candidate against the control arm: not compared — {record.get('reason', '')} ({role})"]
    n, verifier = record.get("n"), record.get("verifier")
    setting = "N = 1 (the incumbent itself)" if n == 1 else f"N = {n} samples per step, {verifier} verifier"
    ratio = record.get("ratio")
    match = ("not measured" if ratio is None else
             f"ratio {ratio:.3f}, {'within' if record.get('matched') else 'NOT within'} "
             f"{record.get('tolerance', TOLERANCE):.0%}")
    lines = [(f"control arm (compute-matched Mid-Harness): the incumbent at {setting}; tokens per trial "
              f"{record.get('measured_tokens_per_trial')} against the candidate's "
              f"{record.get('target_tokens_per_trial')} ({match}; the incumbent alone "
              f"{record.get('incumbent_tokens_per_trial')})")]
    if record.get("status") == "compared":
        d = record.get("decision", {})
        counts = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in (record.get("comparison") or {}).items() if v)
        p = f", p = {record['p_value']:.4f}" if record.get("p_value") is not None else ""
        lines.append(f"candidate against the control arm: Pass@1 {_num(d.get('candidate_pass1'))} vs "
                     f"{_num(record.get('pass_at_1'))}{p} — {'beats it' if record.get('beats') else 'does not beat it'}"
                     f" ({role}){'; ' + counts if counts else ''}")
    else:
        lines.append(f"candidate against the control arm: not compared — {record.get('reason', '')} ({role})")
    tries = [f"{a['n']}×{a['verifier']} predicted {a['predicted_tokens_per_trial']}, measured "
             + (f"{a['measured_tokens_per_trial']} (ratio {a['ratio']:.3f})" if "ratio" in a else "— (incomplete)")
             for a in record.get("attempts", [])]
    if tries:
        lines.append("arm attempts: " + "; ".join(tries))
    if record.get("note"):
        lines.append(f"note: {record['note']}")
    return lines


def _num(x: Any) -> str:
    return "—" if x is None else f"{x:.3f}"
