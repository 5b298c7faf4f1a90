"""Analysis of a version's reference corpus: pairs → findings (analyst) → groups (grouper) → review → ranking.

Every role call ends in a ledger event keyed under ``<commit>:analysis`` (``<commit>:analysis-noevidence`` for the
ablation), written right after the call returns, so a resumed analysis (after ``kill -9`` anywhere) pays for no
role call twice: ``...:finding:<pair>`` (valid, dropped or failed; ``...:finding:<pair>:attempt1`` for an answer
sent back because its references do not exist), ``...:group``, ``...:review``. A call killed in flight was never
recorded and runs again. Records go to the round's folder (``rounds/rNN/analysis/``): transcripts, JSON and a
Markdown summary.
"""

from __future__ import annotations

import logging
import shutil
import tarfile
from collections.abc import Callable
from io import BytesIO
from pathlib import Path
from typing import Any

import git

from evolve.experiment.ledger import FindingEvent, GroupEvent, Ledger, ReviewEvent
from evolve.experiment.store import Experiment
from evolve.roles.analysis.evidence import TraceIndex, attribute_spans, check_finding, salvage
from evolve.roles.analysis.inputs import pair_inputs
from evolve.roles.analysis.models import (
    Finding,
    FindingAnswer,
    Group,
    GroupDraft,
    GroupingAnswer,
    GroupReview,
    Pair,
    PairSet,
    ReviewAnswer,
)
from evolve.roles.analysis.pairs import make_pairs
from evolve.roles.analysis.ranking import apply_review, rank, rejected_attempts
from evolve.roles.analysis.records import AnalysisResult, write_records
from evolve.roles.analysis.roles import GROUPER, REVIEWER, analyst_role, with_limits
from evolve.roles.runtime import Backend, Budget, Role, RoleError, RoleResult, run_role
from evolve.roles.runtime.config import AgentsConfig
from handbook.model import HANDBOOK_FILE, Handbook, HandbookError, loads_handbook
from trials.harness_api import ATIF_TRAJECTORY_FILE, RICH_TRAJECTORY_FILE
from validate.evaluate import kill_point

log = logging.getLogger(__name__)
BackendFactory = Callable[[str, str], Backend]  # (role name, call key) -> the backend for that one call



def _checked(answer: FindingAnswer, traces: dict[str, TraceIndex], known: set[str] | None
             ) -> tuple[FindingAnswer, list[str], list[str]]:
    """An analyst's answer with its slips corrected (:func:`attribute_spans`), the corrections, and the problems
    left in it."""
    fixed, notes = attribute_spans(answer, traces)
    return fixed, notes, check_finding(fixed, traces, known)

class AnalysisError(RuntimeError):
    """An analysis that cannot start (unknown version, no reference corpus)."""


def call_info(res: RoleResult) -> dict[str, Any]:
    return {"role": res.role, "call_id": res.call_id, "transcript": str(res.transcript), "cost": res.cost,
            "usage": res.usage.model_dump(), "seconds": round(res.seconds, 3), "backend": res.backend}


def error_info(exc: RoleError) -> dict[str, Any]:
    """A failed call's record for its ledger event; a call refused before it started books no call (like a
    skipped one): only why it was not made."""
    if not exc.started:
        return {"role": exc.role, "skipped": str(exc)}
    return {"role": exc.role, "error": exc.kind, "message": exc.message, "cost": exc.cost,
            "transcript": str(exc.transcript) if exc.transcript else None, "usage": exc.usage.model_dump()}


class Analysis:
    """One analysis of ``version``'s reference corpus (default: the incumbent) with ``backend``."""

    def __init__(self, exp: Experiment, backend: Backend | dict[str, Backend] | BackendFactory, *,
                 version: str | None = None,
                 harness_evidence: bool = True, out_dir: str | Path | None = None, per_task: int = 2,
                 max_pairs: int | None = None, max_usd: float | None = None, agents: AgentsConfig | None = None,
                 limits: dict[str, Any] | None = None):
        """``backend``: one for every role, one per role name, or a factory ``(role, call key) -> Backend`` (one
        replay recording per call); ``agents`` (experiment.toml's ``[agents]``) adjusts each role's limits, then
        ``limits`` overrides fields for all three roles."""
        self.exp, self.backends, self.evidence = exp, backend, harness_evidence
        versions = exp.versions()
        self.tag = version or versions[-1]
        if self.tag not in versions:
            raise AnalysisError(f"{exp.root}: no version {self.tag!r} (versions: {', '.join(versions)})")
        self.commit = exp.commit_of(self.tag)
        self.corpus = exp.root / "versions" / self.tag / "reference"
        if not self.corpus.is_dir():
            raise AnalysisError(f"{self.corpus}: {self.tag} has no reference corpus; run `rise reference "
                                f"{exp.root.name}` first")
        self.led = Ledger(exp.root / "ledger.jsonl")
        self.prefix = f"{self.commit}:analysis" + ("" if harness_evidence else "-noevidence")
        self.out = Path(out_dir) if out_dir else self._round_dir()
        self.per_task, self.max_pairs = per_task, max_pairs
        self._trials_dir: Path | None = None  # where the pairs' runs lie in the workspace (set by run())
        self.budget = Budget.from_transcripts(self.out / "transcripts", max_usd)  # a resumed run counts all

        def configured(role: Role) -> Role:
            return with_limits(agents.role_limits(role) if agents else role, **(limits or {}))

        self.analyst = configured(analyst_role(harness_evidence))
        self.grouper, self.reviewer = configured(GROUPER), configured(REVIEWER)
        self.handbook = self._handbook()

    def _round_dir(self) -> Path:
        """The open round's folder (started, not ended: the analysis is that round's), else the next round's."""
        started = {e.round for e in self.led.events if e.kind == "round_start"}
        ended = {e.round for e in self.led.events if e.kind == "round_end"}
        open_rounds = sorted(started - ended)
        n = open_rounds[0] if open_rounds else max(started, default=0) + 1
        name = "analysis" if self.evidence else "analysis-no-harness-evidence"
        return self.exp.root / "rounds" / f"r{n:02d}" / name

    def _handbook(self) -> Handbook | None:
        try:
            return loads_handbook(self.exp.repo.git.show(f"{self.tag}:{HANDBOOK_FILE}"), f"{self.tag}:{HANDBOOK_FILE}")
        except (HandbookError, git.GitCommandError) as exc:  # a version without a Handbook is still analysed
            log.warning("no Handbook for %s (%s): findings name no behaviours", self.tag, exc)
            return None

    # ------------------------------------------------------------------------------------------ workspace
    def _workspace(self, pairs: PairSet) -> tuple[Path, Path, Path | None]:
        """(workspace, corpus inside it, harness checkout). The ablation's workspace is a copy holding only
        trajectories and the harness code, so no tool can reach spans or the Handbook."""
        ws = self.out / ("workspace" if self.evidence else "workspace-trajectories")
        harness = ws / "harness"
        if not (harness / "main.py").is_file():
            if harness.exists():
                shutil.rmtree(harness)
            harness.mkdir(parents=True)
            data = BytesIO(self.exp.repo.git.archive(self.tag, stdout_as_string=False))
            with tarfile.open(fileobj=data) as tar:
                keep = [m for m in tar.getmembers() if self.evidence or not m.name.startswith(("HANDBOOK", "recording"))]
                tar.extractall(harness, members=keep, filter="data")
        if self.evidence:
            return self.exp.root, self.corpus, harness
        corpus = ws / "trials"
        for name in {p.success.trial for p in pairs.pairs} | {p.failure.trial for p in pairs.pairs}:
            dst = corpus / name
            (dst / "agent").mkdir(parents=True, exist_ok=True)
            for rel in ("result.json", f"agent/{RICH_TRAJECTORY_FILE}", f"agent/{ATIF_TRAJECTORY_FILE}",
                        "agent/trial_spec.json"):
                if (self.corpus / name / rel).is_file() and not (dst / rel).is_file():
                    shutil.copy2(self.corpus / name / rel, dst / rel)
        return ws, corpus, None

    # ------------------------------------------------------------------------------------------ calls
    def _call(self, role: Role, inputs: dict[str, Any], workspace: Path, harness: Path | None,
              call: str) -> RoleResult:
        if isinstance(self.backends, dict):
            backend = self.backends[role.name]
        elif callable(self.backends) and not hasattr(self.backends, "run"):
            backend = self.backends(role.name, call if self.evidence else f"noevidence-{call}")
        else:
            backend = self.backends
        # prompts and evidence name runs by their folder name: the trial tools find them in the corpus
        extra = {"digest_mode": "full" if self.evidence else "trajectory"}
        if self._trials_dir is not None and self._trials_dir.is_relative_to(workspace):
            extra["trials_dir"] = self._trials_dir.relative_to(workspace).as_posix()
        return run_role(role, inputs, workspace, backend, transcripts=self.out / "transcripts",
                        budget=self.budget, harness=harness, extra=extra)

    def _append(self, event: Any) -> None:
        self.led.append(event)
        kill_point(f"analysis-{event.kind}")

    def _finding(self, i: int, pair: Pair, ws: Path, corpus: Path, harness: Path | None) -> Finding | None:
        key = f"{self.prefix}:finding:{pair.key}"
        fid = f"f{i + 1}"
        done = self.led.find("finding", key=key)
        if done:
            ev = done[0]
            return Finding.model_validate(ev.finding) if ev.status == "valid" else None
        traces = {t.trial: TraceIndex.load(corpus / t.trial, self.evidence) for t in (pair.success, pair.failure)}
        known = {b.id for _, b in self.handbook.iter_behaviours()} if (self.handbook and self.evidence) else None
        inputs = pair_inputs(pair, corpus, ws, self.handbook, self.evidence)
        first = self.led.find("finding", key=key + ":attempt1")
        if first:  # sent back before a kill: do not pay for the first answer again
            answer, problems = FindingAnswer.model_validate(first[0].finding), first[0].reason.split("\n")
        else:
            try:
                res = self._call(self.analyst, inputs, ws, harness, f"analyst-{pair.key.replace(':', '-')}")
            except RoleError as exc:
                self._append(FindingEvent(key=key, commit=self.commit, pair=pair.key, status="failed",
                                          reason=str(exc), role_call=error_info(exc)))
                return None
            answer, notes, problems = _checked(res.output, traces, known)
            if not problems:
                return self._valid(key, fid, pair, answer, res, notes)
            self._append(FindingEvent(key=key + ":attempt1", commit=self.commit, pair=pair.key, status="sent_back",
                                      finding=answer.model_dump(mode="json"), reason="\n".join(problems),
                                      role_call=call_info(res)))
        inputs.update(problems=problems, previous=answer.model_dump_json(indent=1))
        try:
            res = self._call(self.analyst, inputs, ws, harness, f"analyst-{pair.key.replace(':', '-')}-retry")
        except RoleError as exc:
            self._append(FindingEvent(key=key, commit=self.commit, pair=pair.key, status="failed",
                                      reason=f"after being sent back: {exc}", role_call=error_info(exc)))
            return None
        answer, notes, problems = _checked(res.output, traces, known)
        if problems:  # what its good references still show is kept, if they still ground it
            kept, cut = salvage(answer, traces)
            if kept is not None and not check_finding(kept, traces, known):
                log.warning("finding of pair %s kept without its bad references: %s", pair.key, "; ".join(cut))
                return self._valid(key, fid, pair, kept, res, notes + cut)
            log.warning("finding of pair %s dropped: %s", pair.key, "; ".join(problems))
            self._append(FindingEvent(key=key, commit=self.commit, pair=pair.key, status="dropped",
                                      finding=res.output.model_dump(mode="json"), reason="\n".join(problems),
                                      role_call=call_info(res)))
            return None
        return self._valid(key, fid, pair, answer, res, notes)

    def _valid(self, key: str, fid: str, pair: Pair, answer: FindingAnswer, res: RoleResult,
               notes: list[str] = ()) -> Finding:
        finding = Finding(id=fid, pair=pair.key, task=pair.task, success=pair.success.trial,
                          failure=pair.failure.trial, answer=answer)
        self._append(FindingEvent(key=key, commit=self.commit, pair=pair.key, status="valid",
                                  finding=finding.model_dump(mode="json"), role_call=call_info(res),
                                  reason="\n".join(notes)))
        return finding

    def _groups(self, findings: list[Finding]) -> list[GroupDraft]:
        key = f"{self.prefix}:group"
        done = self.led.find("group", key=key)
        if done:
            return [GroupDraft.model_validate(g) for g in done[0].groups]
        if len(findings) == 1:  # nothing to pool: no call
            drafts = [GroupDraft(name=f"{findings[0].id} alone", wish=_wish(findings[0]), members=[findings[0].id])]
            info: dict[str, Any] = {"role": "grouper", "skipped": "one finding"}
        else:
            try:
                res = self._call(self.grouper, {"findings": [_brief(f) for f in findings]}, self.exp.root, None,
                                 "grouper")
                drafts, info = list(GroupingAnswer.model_validate(res.output).groups), call_info(res)
            except RoleError as exc:
                drafts, info = [], error_info(exc)  # ranking puts every finding in a group of its own
        self._append(GroupEvent(key=key, commit=self.commit, groups=[d.model_dump() for d in drafts], role_call=info))
        return drafts

    def _review(self, drafts: list[GroupDraft], findings: dict[str, Finding]) -> list[Group]:
        key = f"{self.prefix}:review"
        done = self.led.find("review", key=key)
        if done:
            return [Group.model_validate(g) for g in done[0].groups]
        full = apply_review(drafts, [], findings)  # the grouper's groups plus the findings it left out
        shown = [{"name": g.name, "wish": g.wish, "members": [_brief(findings[m]) for m in g.members]} for g in full]
        drafts = [GroupDraft(name=g.name, wish=g.wish, members=g.members) for g in full]
        if len(full) == 1 and len(full[0].members) == 1:
            # One finding, one group: its wish is the finding's own, nothing was pooled, nothing can be merged, so
            # there is nothing to review (as the grouper is not called for one finding). The bundled 1.5B
            # reviewer "disputed" such a group with its own wish as the reason, which ended the round for nothing.
            reviews = [GroupReview(group=full[0].name, verdict="accept", applies_to_all=True, distinct=True,
                                   reason="one finding: nothing pooled to review (no reviewer call)")]
            info: dict[str, Any] = {"role": "reviewer", "skipped": "one finding"}
        else:
            try:
                res = self._call(self.reviewer, {"groups": shown}, self.exp.root, None, "reviewer")
                reviews, info = list(ReviewAnswer.model_validate(res.output).reviews), call_info(res)
            except RoleError as exc:
                reviews, info = [], error_info(exc)  # no review: every group is disputed and stops here
        groups = rank(apply_review(drafts, reviews, findings), rejected_attempts(self.led.events))
        self._append(ReviewEvent(key=key, commit=self.commit, reviews=[r.model_dump() for r in reviews],
                                 groups=[g.model_dump() for g in groups], role_call=info))
        return groups

    # ------------------------------------------------------------------------------------------ run
    def run(self) -> AnalysisResult:
        """Run (or finish) the analysis; returns what it found and writes the records."""
        pairs = make_pairs(self.corpus, per_task=self.per_task, total=self.max_pairs)
        self.out.mkdir(parents=True, exist_ok=True)
        ws, corpus, harness = self._workspace(pairs)
        self._trials_dir = corpus
        findings = [f for i, p in enumerate(pairs.pairs) if (f := self._finding(i, p, ws, corpus, harness))]
        groups: list[Group] = []
        if findings:
            by_id = {f.id: f for f in findings}
            groups = self._review(self._groups(findings), by_id)
        events = [e for e in self.led.events if e.key.startswith(self.prefix + ":")]
        result = AnalysisResult(version=self.tag, commit=self.commit, harness_evidence=self.evidence,
                                pairs=pairs.model_copy(update={"trials": {}}), findings=findings, groups=groups,
                                events=[e.model_dump(mode="json") for e in events])
        write_records(result, self.out)
        return result


def _wish(f: Finding) -> str:
    w = f.answer.revised_wish
    return f"{w.action} (when {w.condition})"


def _brief(f: Finding) -> dict[str, Any]:
    return {"id": f.id, "task": f.task, "failure": f.failure, "behaviours": f.behaviours, "wish": _wish(f),
            "differences": "; ".join(d.description for d in f.answer.differences)}
