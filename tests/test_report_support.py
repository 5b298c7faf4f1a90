"""A synthetic experiment for the inspection tests (no tests here): a real store (git harness repo, tags,
candidate branches), ledger events as the controller writes them, and small fake job folders.

Dev tasks alpha..delta × r=4, held-out task ``sealed``. v0 = a toy seed. Round 1: candidate ``verify`` (tier
code) fixes ``beta`` and ``gamma`` (adopted as v1; it changes settings.toml, the Handbook and the code);
candidate ``harmful`` (tier settings) regresses ``alpha`` (rejected, regressions listed); both decisions record
their power; v1 is frozen and its transfer table booked (the held-out grids with the experiment's model, and
second-model counts given here: :data:`SMALL`). Round 2: candidate ``flaky`` (no tier recorded) has two ⊥ cells
(the model server was unreachable), so its decision is blocked.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from evolve.experiment.config import ExperimentConfig
from evolve.experiment.ledger import (
    Adoption,
    CandidateCreated,
    CheckResult,
    Evaluation,
    Freeze,
    ProposalEvent,
    Rejection,
    RoundStart,
    Screening,
    TransferEvent,
    TrialDone,
)
from evolve.experiment.store import Experiment, init_experiment
from trials.agents import oracle_agent
from trials.harness_api import CostLedger, Usage, write_json_atomic
from trials.metrics import compute_metrics, grid_from_results
from trials.results import JobConfig, TrialResult
from validate.adoption import decide

TOY = Path(__file__).resolve().parent / "data" / "handbook_toy" / "toyharness"
DEV = ["alpha", "beta", "delta", "gamma"]
HELDOUT = ["sealed"]
R = 4

P, F, X = "passed", "failed", "infra"
V0 = {"alpha": [P, P, P, P], "beta": [F, F, F, F], "gamma": [P, F, P, F], "delta": [F, F, F, F]}
V0_HELD = {"sealed": [P, F, F, F]}
VERIFY = {"alpha": [P, P, P, P], "beta": [P, P, P, P], "gamma": [P, P, P, P], "delta": [F, F, F, F]}
VERIFY_HELD = {"sealed": [P, P, F, P]}
HARMFUL = {"alpha": [P, F, F, F], "beta": [F, F, F, F], "gamma": [P, F, F, F], "delta": [F, F, F, F]}
FLAKY = {"alpha": [P, P, X, P], "beta": [P, P, P, P], "gamma": [P, X, P, P], "delta": [F, P, F, F]}
# the second model's (passes, runs) per task at r = 2: v0, then v1 (evolve.round.transfer's counts)
SMALL = ({"alpha": (2, 2), "beta": (0, 2), "delta": (0, 2), "gamma": (1, 2), "sealed": (0, 2)},
         {"alpha": (2, 2), "beta": (1, 2), "delta": (0, 2), "gamma": (2, 2), "sealed": (1, 2)})
POWER = ("power", "power_gain", "detectable_gain")

NEW_BEHAVIOUR = '''
[[stages.behaviours]]
id = "loop.verify_completion"
name = "Executable completion verification"
responsibility = "Before accepting a completion claim, run the task's check once and show the result."
triggers = ["the model claims the task complete"]
functions = ["loop:Agent.step"]
settings = ["loop.verify_completion"]
'''


def make_seed(root: Path) -> Path:
    seed = root / "toyseed"
    shutil.copytree(TOY, seed, ignore=shutil.ignore_patterns("__pycache__"))
    (seed / "settings.toml").write_text("# toy settings\n[loop]\nmax_episodes = 50\nverify_completion = false\n"
                                        "[parsing]\nformat = \"json\"\n")
    return seed


def write_job(job: Path, outcomes: dict[str, list[str]], tokens: int = 1000) -> Path:
    """A job folder with config.json and one result.json per cell (with a cost)."""
    job.mkdir(parents=True, exist_ok=True)
    JobConfig(job_id=job.name, tasks_dir=str(job.parent), task_names=sorted(outcomes), agent=oracle_agent(),
              r=max(len(v) for v in outcomes.values())).write(job / "config.json")
    for task, statuses in outcomes.items():
        for k, status in enumerate(statuses, 1):
            tdir = job / f"{task}__r{k}"
            tdir.mkdir(exist_ok=True)
            cost = CostLedger(generator=Usage(calls=3, input_tokens=tokens, output_tokens=tokens // 10),
                              verifier=Usage(calls=1, input_tokens=tokens // 4, output_tokens=5),
                              parallel_output_tokens=tokens // 10, cost_usd=tokens * 2e-6)
            TrialResult(trial_name=tdir.name, run_id=f"{job.name}-{task}{k}", task_name=task, repetition=k,
                        status=status, failure_class="task_failure" if status == F else None,
                        infra_cause="model_unreachable" if status == X else None, cost=cost).write(tdir)
    return job


def _grid(outcomes):
    return {t: [None if s == X else s == P for s in v] for t, v in outcomes.items()}


def _metrics(job: Path) -> dict:
    from trials.job import load_job

    config, results, _ = load_job(job)
    grid, reasons = grid_from_results(results, config.task_names, config.r)
    return compute_metrics(grid, config.r, reasons).model_dump(mode="json")


def _book(led, commit: str, prefix: str, purpose: str, job: Path, root: Path, outcomes) -> None:
    for task, statuses in outcomes.items():
        for k, status in enumerate(statuses, 1):
            key = f"{prefix}:{task}:{k}" + (":infra1" if status == X else "")
            led.append(TrialDone(key=key, commit=commit, purpose=purpose, task=task, rep=k, status=status,
                                 trial_dir=os.path.relpath(job / f"{task}__r{k}", root)))


def _evaluation(led, key: str, commit: str, job: Path, root: Path, purpose: str) -> None:
    m = _metrics(job)
    led.append(Evaluation(key=key, commit=commit, complete=m["complete"], metrics={**m, "purpose": purpose},
                          job_dir=os.path.relpath(job, root)))


def _candidate(exp: Experiment, round_no: int, slug: str, edit) -> tuple[str, Path]:
    branch, wt = exp.create_candidate(round_no, slug)
    edit(wt)
    commit = exp.commit_worktree(wt, f"rise candidate {slug}")
    exp.ledger.append(CandidateCreated(key=f"r{round_no:02d}:{slug}:created", round=round_no, branch=branch,
                                       commit=commit, proposal={"proposal": {"mechanism": slug}}))
    for stage in ("smoke", "contracts"):
        exp.ledger.append(CheckResult(key=f"{commit}:{stage}", commit=commit, stage=stage, passed=True,
                                      details={"summary": "ok"}))
    exp.ledger.append(Screening(key=f"{commit}:screening", commit=commit, passed=True, mechanism_ran=True,
                                details={"reason": "spans of loop:Agent.step"}))
    return commit, wt


def _link(vdir: Path, name: str, target: Path) -> None:
    vdir.mkdir(parents=True, exist_ok=True)
    (vdir / name).symlink_to(os.path.relpath(target, vdir))


def _transfer(exp: Experiment, commit: str, held0: Path, held1: Path) -> None:
    """v1's freeze and transfer events, as evolve.round.transfer books them (the second model's grids not written)."""
    from evolve.round.transfer import HELD, new_part, paired_rows, task_counts

    exp.ledger.append(Freeze(key=f"{commit}:freeze", version="v1", commit=commit, path="versions/v1/synth-v1.rhz",
                             sha256="0" * 64))
    fixed = {**new_part("scripted-model", "fixed model", [HELD], R), "status": "done",
             "rows": paired_rows("scripted-model", HELD, HELDOUT, task_counts(held0), task_counts(held1))}
    second = {**new_part("small-model", "second model", ["development", HELD], 2), "status": "done",
              "rows": paired_rows("small-model", "development", DEV, *SMALL) + paired_rows("small-model", HELD,
                                                                                              HELDOUT, *SMALL)}
    exp.ledger.append(TransferEvent(key=f"{commit}:transfer", round=1, version="v1", parent="v0", commit=commit,
                                    table={"version": "v1", "parent": "v0", "frozen": "versions/v1/synth-v1.rhz",
                                           "parts": [fixed, second]}))


def build_experiment(runs: Path, seed_parent: Path) -> Experiment:
    cfg = ExperimentConfig.model_validate({
        "name": "synth", "endpoint": {"base_url": "http://127.0.0.1:9/v1", "model": "scripted-model"},
        "tasks": {"dir": "tasks", "development": DEV, "heldout": HELDOUT}, "r": R,
        "adoption": {"policy": "paper", "baseline": "reference"}})  # the method as published: four tasks are too few for a test
    exp = init_experiment("synth", cfg, runs_dir=runs, seed_dir=make_seed(seed_parent))
    led, root = exp.ledger, exp.root
    c0 = exp.commit_of("v0")
    ref0 = write_job(root / "versions" / "v0" / "reference", V0)
    held0 = write_job(root / "versions" / "v0" / "heldout", V0_HELD)
    _book(led, c0, f"{c0}:heldout", "heldout", held0, root, V0_HELD)
    _evaluation(led, f"{c0}:heldout", c0, held0, root, "heldout")
    _book(led, c0, f"{c0}:reference", "reference", ref0, root, V0)
    _evaluation(led, f"{c0}:reference", c0, ref0, root, "reference")
    write_json_atomic(root / "versions" / "v0" / "version.json", {"version": "v0", "commit": c0, "parent": None})
    base = _grid(V0)

    # round 1
    led.append(RoundStart(key="r01:start", round=1, incumbent="v0"))

    def verify_edit(wt: Path) -> None:
        s = wt / "settings.toml"
        s.write_text(s.read_text().replace("verify_completion = false", "verify_completion = true")
                     .replace("max_episodes = 50", "max_episodes = 60"))
        hb = wt / "HANDBOOK.toml"
        text = hb.read_text()
        cut = text.index('[[stages.behaviours]]\nid = "loop.dispatch"')
        hb.write_text(text[:cut] + NEW_BEHAVIOUR.lstrip() + "\n" + text[cut:])
        (wt / "loop.py").write_text((wt / "loop.py").read_text() + "\n\ndef verify_completion():\n    return True\n")

    def harmful_edit(wt: Path) -> None:
        s = wt / "settings.toml"
        s.write_text(s.read_text().replace('format = "json"', 'format = "xml"'))

    cv, _ = _candidate(exp, 1, "verify", verify_edit)
    ev_v = write_job(root / "rounds" / "r01" / "verify" / "evaluation", VERIFY, tokens=1500)
    _book(led, cv, cv, "evaluation", ev_v, root, VERIFY)
    _evaluation(led, f"{cv}:evaluation", cv, ev_v, root, "evaluation")
    d_v = decide(_grid(VERIFY), base, DEV, R, policy="paper", power_gain=0.15)
    assert d_v.adopt

    ch, _ = _candidate(exp, 1, "harmful", harmful_edit)
    ev_h = write_job(root / "rounds" / "r01" / "harmful" / "evaluation", HARMFUL, tokens=800)
    _book(led, ch, ch, "evaluation", ev_h, root, HARMFUL)
    _evaluation(led, f"{ch}:evaluation", ch, ev_h, root, "evaluation")
    d_h = decide(_grid(HARMFUL), base, DEV, R, policy="paper", power_gain=0.15)
    assert not d_h.adopt and d_h.regressions == ["alpha"]
    reason = d_h.reason + f"; regressions of stable passes: {', '.join(d_h.regressions)}"
    led.append(Rejection(key=f"{ch}:decision", commit=ch, reason=reason,
                         decision={"adopt": False, "reason": reason, "regressions": d_h.regressions,
                                   "candidate_pass1": d_h.candidate_pass1, "baseline_pass1": d_h.baseline_pass1,
                                   "final": True, **{k: getattr(d_h, k) for k in POWER}}))
    for slug, tier in (("verify", "code"), ("harmful", "settings")):
        led.append(ProposalEvent(key=f"r01:proposal:{slug}", round=1, slug=slug, status="valid",
                                 proposal={"mechanism": slug, "tier": tier, "summary": f"the {slug} candidate"}))

    # publication of v1
    held1 = write_job(root / "versions" / "v1" / "heldout", VERIFY_HELD)
    _book(led, cv, f"{cv}:heldout", "heldout", held1, root, VERIFY_HELD)
    _evaluation(led, f"{cv}:heldout", cv, held1, root, "heldout")
    assert exp.tag_version(cv, "v1: verify (round 1)") == "v1"
    _link(root / "versions" / "v1", "reference", ev_v)
    _evaluation(led, f"{cv}:reference", cv, ev_v, root, "reference")
    led.append(Adoption(key=f"{cv}:adoption", commit=cv, version="v1", parent="v0",
                        decision={"adopt": True, "reason": d_v.reason, "regressions": [],
                                  "candidate_pass1": d_v.candidate_pass1, "baseline_pass1": d_v.baseline_pass1,
                                  "pass_at_1": d_v.candidate_pass1, **{k: getattr(d_v, k) for k in POWER}}))
    _transfer(exp, cv, held0, held1)

    # round 2: a ⊥-blocked evaluation
    led.append(RoundStart(key="r02:start", round=2, incumbent="v1"))

    def flaky_edit(wt: Path) -> None:
        (wt / "loop.py").write_text((wt / "loop.py").read_text() + "\n# retry harder\n")

    cf, _ = _candidate(exp, 2, "flaky", flaky_edit)
    ev_f = write_job(root / "rounds" / "r02" / "flaky" / "evaluation", FLAKY, tokens=1200)
    _book(led, cf, cf, "evaluation", ev_f, root, FLAKY)
    d_f = decide(_grid(FLAKY), _grid(VERIFY), DEV, R, policy="paper")
    assert not d_f.decided and "⊥" in d_f.reason
    led.append(Rejection(key=f"{cf}:blocked:1", commit=cf, reason=d_f.reason,
                         decision={"adopt": False, "decided": False, "reason": d_f.reason, "missing": d_f.missing,
                                   "regressions": d_f.regressions, "blocked": True, "final": False}))
    return exp
