"""``rise show``: what one harness version (or candidate) changed and what that did, read from the store.

A view compares a revision with its parent: the code diff of the harness repository (``git diff parent..rev``),
the Handbook diff (``handbook.diff``), the settings changed key by key, and the evaluation of the revision
against the grid it was decided on (the parent's reference corpus, or the round's fresh control), task by task
(``trials.metrics.compare``: stable pass / stable fail / fixed / regressed / flipping).

Where the grids are: the ledger's ``Evaluation`` events name their job folders (relative to the experiment);
``versions/vN/reference`` and ``versions/vN/heldout`` are the conventional places the controller also links.
A grid whose folder is gone is reported as such, never guessed. The helpers here (``locate_*``, ``load_grid``,
``cost_of``, from :mod:`trials.cost`) are shared with the HTML report.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import git

from evolve.experiment.store import Experiment
from trials import harness_settings
from trials.cost import CostSummary, cost_of
from trials.metrics import Comparison, Grid, GridMetrics, compare, compute_metrics, grid_from_results
from validate.adoption_sim import policy_note
from validate.multiplicity import family_note

_MISSING = object()


class ShowError(ValueError):
    pass


# -------------------------------------------------------------------------------------------------- grids
@dataclass
class GridRef:
    """One evaluated grid: where it is, its cells, its metrics and what it cost."""

    label: str
    job_dir: Path
    r: int
    grid: Grid
    metrics: GridMetrics
    cost: CostSummary


def load_grid(job_dir: Path | None, label: str) -> GridRef | None:
    """The grid of a job folder, or None when there is no readable one."""
    if job_dir is None or not (job_dir / "config.json").is_file():
        return None
    from trials.job import load_job

    try:
        config, results, _ = load_job(job_dir)
    except (OSError, ValueError):
        return None
    grid, reasons = grid_from_results(results, config.task_names, config.r)
    return GridRef(label, job_dir, config.r, grid, compute_metrics(grid, config.r, reasons), cost_of(results))


def _event_job(exp: Experiment, key: str) -> Path | None:
    found = exp.ledger.find("evaluation", key=key)
    if found and found[-1].job_dir:
        p = Path(found[-1].job_dir)
        return p if p.is_absolute() else exp.root / p
    return None


def _first_dir(*paths: Path | None) -> Path | None:
    for p in paths:
        if p is not None and (p / "config.json").is_file():
            return p
    return next((p for p in paths if p is not None), None)


def locate_reference(exp: Experiment, tag: str) -> Path | None:
    """The job folder of version ``tag``'s reference corpus (R_N)."""
    commit = exp.commit_of(tag)
    return _first_dir(exp.root / "versions" / tag / "reference", _event_job(exp, f"{commit}:reference"))


def locate_heldout(exp: Experiment, tag: str) -> Path | None:
    commit = exp.commit_of(tag)
    return _first_dir(_event_job(exp, f"{commit}:heldout"), exp.root / "versions" / tag / "heldout")


def locate_evaluation(exp: Experiment, commit: str, round_no: int | None, slug: str | None) -> Path | None:
    """A candidate's full evaluation (present even when ⊥ cells kept its Evaluation event from being written)."""
    conventional = (exp.root / "rounds" / f"r{round_no:02d}" / slug / "evaluation") if round_no and slug else None
    return _first_dir(_event_job(exp, f"{commit}:evaluation"), conventional)


def locate_baseline(exp: Experiment, parent: str, round_no: int | None,
                    slug: str | None = None) -> tuple[Path | None, str]:
    """The grid a candidate of ``round_no`` branched from ``parent`` was decided on, and its label."""
    if exp.config.adoption.baseline == "interleaved" and round_no and slug:
        key = f"{exp.commit_of(parent)}:control:r{round_no:02d}:{slug}"
        arm = _first_dir(_event_job(exp, key), exp.root / "rounds" / f"r{round_no:02d}" / slug / "incumbent")
        if arm is not None and (arm / "config.json").is_file():
            return arm, f"{parent} run beside {slug} (r{round_no:02d})"
    if exp.config.adoption.baseline == "control" and round_no:
        key = f"{exp.commit_of(parent)}:control:r{round_no:02d}"
        control = _first_dir(_event_job(exp, key), exp.root / "rounds" / f"r{round_no:02d}" / "control")
        if control is not None and (control / "config.json").is_file():
            return control, f"{parent} control (r{round_no:02d})"
    return locate_reference(exp, parent), f"{parent} reference"


# ---------------------------------------------------------------------------------------- settings, Handbook
@dataclass
class SettingChange:
    key: str
    old: Any
    new: Any

    @property
    def kind(self) -> str:
        return "added" if self.old is _MISSING else "removed" if self.new is _MISSING else "changed"

    def text(self) -> str:
        old = "—" if self.old is _MISSING else repr(self.old)
        new = "—" if self.new is _MISSING else repr(self.new)
        return f"{self.key}: {old} → {new}"


def _blob(commit: git.Commit, path: str) -> str | None:
    try:
        return (commit.tree / path).data_stream.read().decode()
    except KeyError:
        return None


def settings_changes(old_text: str | None, new_text: str | None) -> list[SettingChange]:
    """``settings.toml`` of two revisions compared by dotted key (comments and order ignored)."""
    old = harness_settings.flatten(tomllib.loads(old_text)) if old_text else {}
    new = harness_settings.flatten(tomllib.loads(new_text)) if new_text else {}
    return [SettingChange(k, old.get(k, _MISSING), new.get(k, _MISSING))
            for k in sorted(set(old) | set(new)) if old.get(k, _MISSING) != new.get(k, _MISSING)]


def handbook_diff(old_text: str | None, new_text: str | None, old_label: str, new_label: str):
    """(HandbookDiff or None, a note) for two revisions' ``HANDBOOK.toml``."""
    from handbook.diff import diff_handbooks
    from handbook.model import HandbookError, loads_handbook

    if old_text is None and new_text is None:
        return None, "no Handbook in either revision"
    try:
        old = loads_handbook(old_text, f"{old_label}:HANDBOOK.toml") if old_text else None
        new = loads_handbook(new_text, f"{new_label}:HANDBOOK.toml") if new_text else None
    except HandbookError as exc:
        return None, f"Handbook unreadable: {exc}"
    if old is None or new is None:
        return None, f"Handbook {'added' if old is None else 'removed'} in {new_label}"
    return diff_handbooks(old, new, old_label, new_label), ""


# -------------------------------------------------------------------------------------------- the view
@dataclass
class FileChange:
    path: str
    added: int
    deleted: int


@dataclass
class VersionView:
    """Everything ``rise show`` prints about one revision against its parent."""

    label: str
    commit: str
    parent: str | None
    parent_commit: str | None
    kind: str  # version | candidate
    round: int | None = None
    slug: str | None = None
    status: str = ""
    reason: str = ""
    tier: str = ""  # the proposal's tier (settings | prompt | code); "" for the seed
    decision: dict[str, Any] = field(default_factory=dict)
    policy: str = ""  # a final decision's policy and its measured false-adoption rate at the grid's size
    files: list[FileChange] = field(default_factory=list)
    code_diff: str = ""
    handbook: Any = None  # HandbookDiff | None
    handbook_note: str = ""
    settings: list[SettingChange] = field(default_factory=list)
    evaluation: GridRef | None = None
    evaluation_dir: Path | None = None
    baseline: GridRef | None = None
    baseline_dir: Path | None = None
    comparison: Comparison | None = None
    heldout: GridRef | None = None
    notes: list[str] = field(default_factory=list)


def _candidate_of(exp: Experiment, ref: str) -> Any | None:
    """The CandidateCreated event named by ``cand/rNN-slug``, ``rNN-slug`` or a commit prefix."""
    name = ref.removeprefix("cand/")
    for ev in reversed(exp.ledger.find("candidate_created")):
        if ev.branch.removeprefix("cand/") == name or (len(ref) >= 7 and ev.commit.startswith(ref)):
            return ev
    return None


def _decision_events(exp: Experiment, commits: set[str]) -> list[Any]:
    return [e for e in exp.ledger.events if e.kind in ("adoption", "rejection") and e.commit in commits]


def _candidate_commits(exp: Experiment, created_commit: str) -> list[str]:
    """The created commit and the commits repairs led to, in order (one candidate: :mod:`evolve.experiment.identity`)."""
    from evolve.experiment.identity import candidate_of_commits

    ids = candidate_of_commits(exp.ledger.events)
    me = ids.get(created_commit)
    return [c for c, cid in ids.items() if cid == me] if me else [created_commit]


def decision_policy(exp: Experiment, decision: dict[str, Any], evaluation: GridRef | None) -> str:
    """The line that states a decision's policy and that policy's measured false-adoption rate at the size of
    the grid it was decided on (recorded with the decision; for older records, measured for the experiment's
    policy at the evaluation grid's size), and its power at that grid (recorded since validate.power)."""
    ad, cfg = exp.config.adoption, exp.config
    n_tasks = len(evaluation.grid) if evaluation is not None else len(cfg.tasks.development)
    note = (policy_note(decision, ad.policy, ad.alpha, n_tasks, evaluation.r if evaluation is not None else cfg.r)
            + family_note(decision, decision.get("policy") or ad.policy))
    return note if decision.get("power") is not None else note + "; power not recorded (the record predates it)"


def tier_of(created: Any) -> str:
    """The tier of a created candidate's proposal: settings, prompt or code (a patch or older proposal: code)."""
    return str((created.proposal.get("proposal") or {}).get("tier") or "code")


def version_view(exp: Experiment, ref: str) -> VersionView:
    """The view of adopted version ``ref`` (``vN``) or of a candidate (``cand/rNN-slug`` or ``rNN-slug``)."""
    repo = exp.repo
    led = exp.ledger
    if ref in exp.versions():
        commit = exp.commit_of(ref)
        adoption = next((e for e in led.find("adoption") if e.version == ref), None)
        n = int(ref[1:])
        parent = adoption.parent if adoption else (f"v{n - 1}" if n > 0 else None)
        created = next((e for e in led.find("candidate_created") if commit in _candidate_commits(exp, e.commit)),
                       None)
        view = VersionView(ref, commit, parent, exp.commit_of(parent) if parent else None, "version",
                           round=created.round if created else None,
                           slug=created.branch.split("-", 1)[1] if created else None,
                           status="adopted" if n else "seed")
        if adoption:
            view.decision = adoption.decision
            view.reason = str(adoption.decision.get("reason", ""))
        view.evaluation_dir = locate_reference(exp, ref)
        view.heldout = load_grid(locate_heldout(exp, ref), f"{ref} held-out")
    else:
        created = _candidate_of(exp, ref)
        if created is None:
            raise ShowError(f"{exp.root}: {ref!r} is neither an adopted version ({', '.join(exp.versions())}) "
                            "nor a candidate branch")
        chain = _candidate_commits(exp, created.commit)
        commit = chain[-1]
        start = led.find("round_start", key=f"r{created.round:02d}:start")
        parent = start[0].incumbent if start else "v0"
        slug = created.branch.split("-", 1)[1]
        view = VersionView(created.branch, commit, parent, exp.commit_of(parent), "candidate",
                           round=created.round, slug=slug, status="pending")
        decisions = _decision_events(exp, set(chain))
        if decisions:
            last = decisions[-1]
            blocked = last.kind == "rejection" and bool(last.decision.get("blocked"))
            view.status = "adopted" if last.kind == "adoption" else "blocked" if blocked else "rejected"
            view.reason = getattr(last, "reason", "") or str(last.decision.get("reason", ""))
            view.decision = last.decision
        view.evaluation_dir = locate_evaluation(exp, commit, created.round, slug)
    if created is not None:
        view.tier = tier_of(created)
    view.evaluation = load_grid(view.evaluation_dir, f"{view.label} evaluation")
    if view.evaluation_dir is not None and view.evaluation is None:
        view.notes.append(f"evaluation grid not found at {view.evaluation_dir}")
    if view.decision and not view.decision.get("blocked"):
        view.policy = decision_policy(exp, view.decision, view.evaluation)
    if view.parent is not None:
        _fill_changes(view, repo)
        view.baseline_dir, blabel = locate_baseline(exp, view.parent, view.round, view.slug)
        view.baseline = load_grid(view.baseline_dir, blabel)
        if view.baseline is None:
            view.notes.append(f"baseline grid ({blabel}) not found")
        if view.baseline is not None and view.evaluation is not None:
            view.comparison = compare(view.baseline.grid, view.evaluation.grid, view.baseline.r,
                                      view.evaluation.r)
    return view


def _fill_changes(view: VersionView, repo: git.Repo) -> None:
    old, new = repo.commit(view.parent_commit), repo.commit(view.commit)
    view.code_diff = repo.git.diff(old.hexsha, new.hexsha)
    for line in repo.git.diff("--numstat", old.hexsha, new.hexsha).splitlines():
        a, d, path = line.split("\t", 2)
        view.files.append(FileChange(path, int(a) if a.isdigit() else 0, int(d) if d.isdigit() else 0))
    view.settings = settings_changes(_blob(old, "settings.toml"), _blob(new, "settings.toml"))
    view.handbook, view.handbook_note = handbook_diff(_blob(old, "HANDBOOK.toml"), _blob(new, "HANDBOOK.toml"),
                                                      view.parent or "parent", view.label)


# ------------------------------------------------------------------------------------------ plain text
def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def render_text(view: VersionView, code: bool = True) -> str:
    """The view as Markdown-ish text for the terminal."""
    out = [f"# {view.label} ({view.commit[:10]})" + (f" from {view.parent} ({view.parent_commit[:10]})"
                                                     if view.parent and view.parent_commit else ""),
           f"status: {view.status}" + (f" — round {view.round}, candidate {view.slug}" if view.round else "")
           + (f", tier {view.tier}" if view.tier else "")]
    if view.reason:
        out.append(f"decision: {view.reason}")
    if view.policy and view.policy not in view.reason:
        out.append(view.policy)
    if view.decision.get("regressions"):
        out.append(f"regressions of stable passes: {', '.join(view.decision['regressions'])}")
    from evolve.round.control_arm import arm_lines
    from validate.coupled import agreement_lines
    from validate.load_check import load_lines

    out += arm_lines(view.decision.get("control_arm")) + load_lines(view.decision.get("load"))
    out += agreement_lines(view.decision.get("agreement"))
    out += [f"note: {n}" for n in view.notes]
    if view.parent is not None:
        out.append("\n## Files changed")
        out += [f"  {f.path}  +{f.added} −{f.deleted}" for f in view.files] or ["  (none)"]
        out.append("\n## Settings changed")
        out += [f"  {s.text()}" for s in view.settings] or ["  (none)"]
        out.append("\n## Handbook")
        if view.handbook is not None:
            from handbook.diff import render_diff_markdown

            text = render_diff_markdown(view.handbook)
            out.append(re.sub(r"\A# .*\n+", "", text).replace("\n## ", "\n### ").rstrip())
        else:
            out.append(f"  {view.handbook_note}")
    if view.evaluation is not None:
        m = view.evaluation.metrics
        out.append(f"\n## Evaluation ({view.evaluation.job_dir})")
        out.append(f"  Pass@1 {_pct(m.pass_at_1)}  Pass^r {_pct(m.pass_hat_r)}  Pass@r {_pct(m.pass_at_r)}  "
                   f"Flip {_pct(m.flip)}  ({m.n_tasks} tasks × r={m.r}, "
                   f"{'complete' if m.complete else f'INCOMPLETE: {len(m.missing)} cells ⊥/missing'})")
        for miss in m.missing:
            out.append(f"  ⊥/missing {miss.task}#{miss.repetition}: {miss.reason}")
    if view.comparison is not None and view.baseline is not None:
        c = view.comparison
        out.append(f"\n## Against {view.baseline.label}")
        out.append(f"  Pass@1 {_pct(c.pass_at_1_a)} → {_pct(c.pass_at_1_b)}; "
                   + ", ".join(f"{k} {v}" for k, v in c.counts.items() if v))
        for row in c.tasks:
            out.append(f"  {row.task:<28} {row.a or '—':<10} → {row.b or '—':<10} {row.pair}")
    if view.heldout is not None:
        m = view.heldout.metrics
        out.append(f"\n## Held-out (sealed, never used to decide): Pass@1 {_pct(m.pass_at_1)}, "
                   f"{m.n_tasks} tasks × r={m.r}{'' if m.complete else ', incomplete'}")
    if code and view.code_diff:
        out += ["\n## Code diff", view.code_diff]
    return "\n".join(out) + "\n"


def show_text(exp: Experiment, view: VersionView, code: bool = True) -> str:
    """What ``rise show`` prints: the view's text and, for a revision that ``rise evolve`` proposed, why (its
    round, :mod:`evolve.views.rounds`)."""
    from evolve.views.rounds import evolve_rounds, render_round, round_record

    text = render_text(view, code=code)
    if view.round and view.round in evolve_rounds(exp):
        text += "\n" + render_round(round_record(exp, view.round))
    return text
