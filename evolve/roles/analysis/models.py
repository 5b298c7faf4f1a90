"""Data formats of analysis: evidence references, detector hits, trial digests, pairs, findings, groups, reviews.

One place for each format, versioned (``v``) and validated on read. A reference points into a dual trace:
the trial folder's name, the episode, and optionally the ATIF step id or a span id (16 hex digits, as in
``spans.jsonl``). Findings, groups and reviews are what the analyst, grouper and reviewer roles answer;
the pipeline adds ids, tasks and failing runs to them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

DIGEST_VERSION = 1


class EvidenceRef(BaseModel):
    """A place in a trial's dual trace."""

    model_config = ConfigDict(extra="forbid")
    trial: str = Field(description="trial folder name, e.g. hello-file__r2")
    episode: int | None = Field(default=None, description="episode index (0-based); None: the whole run")
    step: int | None = Field(default=None, description="ATIF step_id in trajectory.json")
    span: str | None = Field(default=None, description="span id (16 hex digits) in spans.jsonl")

    def label(self) -> str:
        parts = [self.trial]
        if self.episode is not None:
            parts.append(f"ep{self.episode}")
        if self.step is not None:
            parts.append(f"step{self.step}")
        if self.span:
            parts.append(f"span {self.span}")
        return " ".join(parts)


class Hit(BaseModel):
    """One detector firing: what it saw, which Handbook behaviour it concerns, where."""

    model_config = ConfigDict(extra="forbid")
    detector: str
    behaviour: str = Field(description="Handbook behaviour id, e.g. parse.json")
    episode: int | None
    summary: str
    evidence: list[EvidenceRef] = Field(default_factory=list)
    details: dict[str, str | int | float | bool | None] = Field(default_factory=dict)


class Digest(BaseModel):
    """A trial's detector hits in episode order (``digest.json`` beside the trial)."""

    v: int = DIGEST_VERSION
    trial: str
    task: str | None = None
    status: str | None = Field(default=None, description="passed / failed / infra, from result.json")
    outcome: str | None = Field(default=None, description="how the agent ended: completed, max_episodes, ...")
    episodes: int = 0
    mode: Literal["full", "trajectory"] = "full"
    source_stamp: str = Field(default="", description="sizes and mtimes of the files it was computed from")
    hits: list[Hit] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list, description="what could not be read (a torn spans line...)")


class TrialRef(BaseModel):
    """One run of a task in a reference corpus."""

    trial: str = Field(description="folder name, <task>__r<k>")
    task: str
    rep: int
    status: Literal["passed", "failed", "infra"]


class Pair(BaseModel):
    """A success and a failure of the same task under the same harness and model."""

    key: str = Field(description="<task>:<success rep>:<failure rep>")
    task: str
    success: TrialRef
    failure: TrialRef


class PairSet(BaseModel):
    """What a reference corpus offers analysis."""

    corpus: str = Field(description="the reference folder")
    flipping: list[str] = Field(default_factory=list)
    pairs: list[Pair] = Field(default_factory=list)
    all_failure: list[str] = Field(default_factory=list, description="listed, not analysed")
    at_risk: list[str] = Field(default_factory=list, description="passed every run: kept for proposals")
    incomplete: list[str] = Field(default_factory=list, description="tasks with ⊥ runs only, or no runs")
    trials: dict[str, TrialRef] = Field(default_factory=dict)


# ------------------------------------------------------------------------------------------- role answers
class Difference(BaseModel):
    """One execution difference between the successful and the failed run."""

    model_config = ConfigDict(extra="forbid")
    description: str = Field(min_length=3)
    behaviours: list[str] = Field(default_factory=list, description="Handbook behaviour ids involved")
    evidence: list[EvidenceRef] = Field(default_factory=list)


class Judgement(BaseModel):
    """A yes/no answer with its evidence."""

    model_config = ConfigDict(extra="forbid")
    answer: bool
    explanation: str = Field(min_length=3)
    evidence: list[EvidenceRef] = Field(default_factory=list)


class Wish(BaseModel):
    model_config = ConfigDict(extra="forbid")
    action: str = Field(min_length=3, description="what the harness should do")
    condition: str = Field(min_length=3, description="the observable condition under which it should")


class FindingAnswer(BaseModel):
    """The analyst's answer for one pair (Compare, Wish, Revise)."""

    model_config = ConfigDict(extra="forbid")
    differences: list[Difference] = Field(min_length=1)
    wish: Wish
    information_available: Judgement = Field(description="could the harness have known, at that moment?")
    mechanism_existed: Judgement = Field(description="did an existing mechanism already do the wish?")
    revised_wish: Wish
    evidence: list[EvidenceRef] = Field(min_length=1)


class Finding(BaseModel):
    """A validated finding of one pair (the analyst's answer plus where it came from)."""

    id: str = Field(description="f<N>, stable within one analysis")
    pair: str
    task: str
    success: str
    failure: str
    answer: FindingAnswer

    @property
    def behaviours(self) -> list[str]:
        return sorted({b for d in self.answer.differences for b in d.behaviours})


class GroupDraft(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    wish: str = Field(min_length=3, description="the common wish of its members")
    members: list[str] = Field(min_length=1, description="finding ids")


class GroupingAnswer(BaseModel):
    """The grouper's answer: findings pooled by common wish."""

    model_config = ConfigDict(extra="forbid")
    groups: list[GroupDraft] = Field(min_length=1)


class GroupReview(BaseModel):
    model_config = ConfigDict(extra="forbid")
    group: str = Field(description="the group's name as given")
    verdict: Literal["accept", "split", "merge", "dispute"]
    applies_to_all: bool = Field(description="the wish applies to every member")
    distinct: bool = Field(description="a need distinct from the other groups")
    reason: str = Field(min_length=3)
    split_into: list[list[str]] = Field(default_factory=list, description="for split: finding ids per part")
    merge_with: list[str] = Field(default_factory=list, description="for merge: names of the other groups")


class ReviewAnswer(BaseModel):
    """The reviewer's answer: one review per group."""

    model_config = ConfigDict(extra="forbid")
    reviews: list[GroupReview] = Field(min_length=1)


class Group(BaseModel):
    """A reviewed group with its coverage, ready to rank."""

    id: str
    name: str
    wish: str
    members: list[str]
    tasks: list[str] = Field(default_factory=list)
    failing_runs: list[str] = Field(default_factory=list)
    behaviours: list[str] = Field(default_factory=list)
    signature: str = Field(default="", description="sorted behaviour ids: how a later round recognises it")
    status: Literal["ranked", "disputed", "excluded"] = "ranked"
    reason: str = ""
    rank: int | None = None


# ---------------------------------------------------------------------------------------- what each role is given
class AnalystInputs(BaseModel):
    """What the analyst is given for one pair (:func:`evolve.roles.analysis.inputs.pair_inputs`)."""

    model_config = ConfigDict(extra="forbid")
    task: str = Field(min_length=1)
    instruction: str = Field(description="the task's instruction")
    success: str = Field(min_length=1, description="the passing run's folder name")
    failure: str = Field(min_length=1, description="the failing run's folder name")
    success_path: str = Field(description="the passing run's folder, relative to the workspace")
    failure_path: str = Field(description="the failing run's folder, relative to the workspace")
    success_digest: str
    failure_digest: str
    divergence_episode: int = Field(ge=0, description="the first episode whose commands differ")
    region: str = Field(description="both runs from the diverging episode on")
    harness_evidence: bool = Field(True, description="False: the ablation without spans and Handbook")
    handbook: str = Field("", description="the Handbook entries of the behaviours involved")
    behaviour_ids: list[str] = Field(default_factory=list, description="those behaviours' ids (kept in the "
                                                                       "transcript; the template shows the entries)")
    problems: list[str] = Field(default_factory=list, description="why the previous answer was sent back")
    previous: str = Field("", description="the previous answer, when sent back")


class FindingBrief(BaseModel):
    """One finding as the grouper and the reviewer read it."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1)
    task: str
    failure: str = Field(description="the failed run's folder name")
    behaviours: list[str] = Field(default_factory=list)
    wish: str = Field(min_length=3)
    differences: str = ""


class GrouperInputs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    findings: list[FindingBrief] = Field(min_length=1)


class GroupShown(BaseModel):
    """One group as the reviewer reads it: its wish and its members."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    wish: str = Field(min_length=3)
    members: list[FindingBrief] = Field(min_length=1)


class ReviewerInputs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    groups: list[GroupShown] = Field(min_length=1)
