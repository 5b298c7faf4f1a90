"""Evidence checks against traces, review (accept/split/merge/dispute), ranking and exclusion of rejected groups."""

from __future__ import annotations

from evolve.experiment.ledger import CandidateCreated, CheckResult, Rejection
from evolve.roles.analysis.evidence import TraceIndex, attribute_spans, check_finding
from evolve.roles.analysis.models import Finding, FindingAnswer, GroupDraft, GroupReview
from evolve.roles.analysis.ranking import apply_review, rank, rejected_attempts
from tests.test_analysis_support import PROMPT, CraftedTrial, finding_answer, screen


def finding(fid: str, task: str, failure: str, behaviour: str = "completion.handshake") -> Finding:
    answer = FindingAnswer.model_validate(finding_answer(f"{task}__r1", failure, behaviour=behaviour))
    return Finding(id=fid, pair=f"{task}:1:2", task=task, success=f"{task}__r1", failure=failure, answer=answer)


def review(group, verdict="accept", **kw):
    return GroupReview(group=group, verdict=verdict, applies_to_all=True, distinct=True, reason="checked", **kw)


def test_evidence_refs_are_checked_against_the_trace(tmp_path):
    t = CraftedTrial(tmp_path, task="a", rep=2)
    t.episode([("ls\n", 0.1)], observation=screen(PROMPT))
    t.episode([], claim=True, observation=None)
    folder = t.write()
    ok = CraftedTrial(tmp_path, task="a", rep=1, status="passed")
    ok.episode([], claim=True, observation=None)
    ok.write()
    traces = {"a__r2": TraceIndex.load(folder), "a__r1": TraceIndex.load(tmp_path / "a__r1")}
    span = next(iter(traces["a__r2"].spans))
    good = FindingAnswer.model_validate(finding_answer("a__r1", "a__r2", 1, step=3))
    assert check_finding(good, traces, {"completion.handshake"}) == []
    cases = {
        (7, None, None, "a__r2"): "has no episode 7",
        (0, 9, None, "a__r2"): "has no step 9",
        (1, 2, None, "a__r2"): "step 2 belongs to episode 0, not 1",
        (0, None, "00000000deadbeef", "a__r2"): "has no span 00000000deadbeef",
        (0, None, None, "b__r1"): "not one of this pair's runs",
    }
    for (ep, step, sp, trial), message in cases.items():
        bad = FindingAnswer.model_validate(finding_answer("a__r1", trial, ep, step=step, span=sp))
        problems = check_finding(bad, traces)
        assert any(message in p for p in problems), (message, problems)
    assert traces["a__r2"].spans[span] in (0, 1, None)
    # a span of the other run cited under this one (what the bundled 1.5B did): the reason names its run
    other = next(iter(traces["a__r1"].spans))
    swapped = FindingAnswer.model_validate(finding_answer("a__r1", "a__r2", 0, span=other))
    assert any("it is a span of a__r1: cite it with trial 'a__r1'" in p for p in check_finding(swapped, traces))
    # ... and before the check, the reference is attributed to the run that has the span, with that span's episode
    fixed, notes = attribute_spans(swapped, traces)
    assert check_finding(fixed, traces) == [] and swapped.evidence[0].trial == "a__r2"  # the original is untouched
    assert {r.trial for r in fixed.evidence + fixed.differences[0].evidence} == {"a__r1"}
    assert fixed.evidence[0].episode == traces["a__r1"].spans[other] and fixed.evidence[0].span == other
    assert notes and all(f"span {other}" in n and "the span is a__r1's" in n for n in notes)
    # a step the owner does not have in that episode goes; a span no run of the pair has is left to the check
    stepped = FindingAnswer.model_validate(finding_answer("a__r1", "a__r2", 0, step=99, span=other))
    assert attribute_spans(stepped, traces)[0].evidence[0].step is None
    nowhere = FindingAnswer.model_validate(finding_answer("a__r1", "a__r2", 0, span="00000000deadbeef"))
    assert attribute_spans(nowhere, traces) == (nowhere, [])
    assert attribute_spans(good, traces) == (good, [])
    # an episode that contradicts the step's own (the real 1.5B cited step 3 as episode 0; it is in episode 1)
    wrong_ep = FindingAnswer.model_validate(finding_answer("a__r1", "a__r2", 0, step=3))
    assert any("step 3 belongs to episode 1, not 0" in p for p in check_finding(wrong_ep, traces))
    fixed, notes = attribute_spans(wrong_ep, traces)
    assert check_finding(fixed, traces) == [] and fixed.evidence[0].episode == 1
    assert "a__r2 ep0 step3: step is in episode 1; cited as a__r2 ep1 step3" in notes
    # a step and a span of different episodes: the one the cited episode agrees with is kept, the other dropped
    # (the real 1.5B cited "ep1 step3" with a span of episode 0, twice, and lost its finding)
    ep0_span = next(k for k, e in traces["a__r2"].spans.items() if e == 0)
    torn = FindingAnswer.model_validate(finding_answer("a__r1", "a__r2", 1, step=3, span=ep0_span))
    assert any("belongs to episode 0, not 1" in p for p in check_finding(torn, traces))
    fixed, notes = attribute_spans(torn, traces)
    assert check_finding(fixed, traces) == [] and (fixed.evidence[0].step, fixed.evidence[0].span) == (3, None)
    assert f"a__r2 ep1 step3 span {ep0_span}: span {ep0_span} (episode 0) is not in episode 1" in notes[0]
    torn0 = FindingAnswer.model_validate(finding_answer("a__r1", "a__r2", 0, step=3, span=ep0_span))
    fixed, notes = attribute_spans(torn0, traces)
    assert check_finding(fixed, traces) == [] and (fixed.evidence[0].step, fixed.evidence[0].span) == (None, ep0_span)
    assert "step 3 (episode 1) is not in episode 0" in notes[0]
    unknown = FindingAnswer.model_validate(finding_answer("a__r1", "a__r2", 0, behaviour="no.such"))
    assert check_finding(unknown, traces, {"completion.handshake"}) == ["behaviour 'no.such' is not in the Handbook"]


def test_review_split_merge_dispute_and_leftovers():
    fs = {f.id: f for f in [finding("f1", "a", "a__r2"), finding("f2", "b", "b__r2"), finding("f3", "c", "c__r2"),
                            finding("f4", "d", "d__r2", "observe.truncate"), finding("f5", "e", "e__r2")]}
    drafts = [GroupDraft(name="one", wish="wish one", members=["f1", "f2", "f3"]),
              GroupDraft(name="two", wish="wish two", members=["f4", "zz"]),
              GroupDraft(name="three", wish="wish three", members=["f4"])]
    reviews = [review("one", "split", split_into=[["f1"], ["f2", "nope"]]), review("two", "merge", merge_with=["three"])]
    groups = apply_review(drafts, reviews, fs)
    by_name = {g.name: g for g in groups}
    assert by_name["one / part 1"].members == ["f1"] and by_name["one / part 2"].members == ["f2"]
    assert by_name["one / part 3"].members == ["f3"]  # what the split did not list is not lost
    assert by_name["two + three"].members == ["f4"] and by_name["two + three"].behaviours == ["observe.truncate"]
    assert by_name["f5 alone"].status == "disputed" and "no verdict" in by_name["f5 alone"].reason
    disputed = apply_review(drafts[:1], [review("one", "dispute")], {k: fs[k] for k in ("f1", "f2", "f3")})
    assert [g.status for g in disputed] == ["disputed"]


def test_rank_by_tasks_then_failing_runs_then_findings():
    fs = {f.id: f for f in [finding("f1", "a", "a__r2"), finding("f2", "a", "a__r3"), finding("f3", "b", "b__r2"),
                            finding("f4", "c", "c__r2"), finding("f5", "c", "c__r2")]}
    drafts = [GroupDraft(name="runs", wish="a wish", members=["f1", "f2"]),    # 1 task, 2 runs
              GroupDraft(name="tasks", wish="a wish", members=["f3", "f4"]),   # 2 tasks
              GroupDraft(name="count", wish="a wish", members=["f5"])]          # 1 task, 1 run
    groups = rank(apply_review(drafts, [review(d.name) for d in drafts], fs))
    assert [(g.rank, g.name) for g in groups] == [(1, "tasks"), (2, "runs"), (3, "count")]


def test_rejected_group_is_excluded_unless_it_has_new_failing_runs():
    fs = {f.id: f for f in [finding("f1", "a", "a__r2"), finding("f2", "b", "b__r2")]}
    events = [CandidateCreated(key="k1", round=1, branch="cand/r01-x", commit="c1",
                               proposal={"group": {"signature": "completion.handshake",
                                                   "failing_runs": ["a__r2", "b__r2"]}}),
              Rejection(key="k2", commit="c1", reason="no gain")]
    rejected = rejected_attempts(events)
    same = rank(apply_review([GroupDraft(name="g", wish="a wish", members=["f1", "f2"])], [review("g")], fs), rejected)
    assert same[0].status == "excluded" and same[0].rank is None
    fs["f3"] = finding("f3", "c", "c__r2")
    more = rank(apply_review([GroupDraft(name="g", wish="a wish", members=["f1", "f2", "f3"])], [review("g")], fs),
                rejected)
    assert more[0].status == "ranked" and more[0].rank == 1
    assert rejected_attempts(events[:1]) == {}  # created but never rejected: nothing to exclude


def test_a_repaired_candidate_is_one_identity_and_only_final_rejections_exclude():
    """Issue 30 item 4: a candidate repaired from c1 to c2 and rejected under c2 is the same candidate (its group
    is excluded); a blocked rejection (⊥ cells, not final) excludes nothing."""
    fs = {f.id: f for f in [finding("f1", "a", "a__r2"), finding("f2", "b", "b__r2")]}
    group = {"group": {"signature": "completion.handshake", "failing_runs": ["a__r2", "b__r2"]}}
    created = CandidateCreated(key="r01:verify:created", round=1, branch="cand/r01-verify", commit="c1",
                               proposal=group)
    repaired = CheckResult(key="c1:contracts", commit="c1", stage="contracts", passed=False,
                           details={"repaired_to": "c2"})
    blocked = Rejection(key="c1:blocked:1", commit="c1", reason="2 cells ⊥",
                        decision={"blocked": True, "final": False})
    final = Rejection(key="c2:decision", commit="c2", reason="no gain", decision={"final": True})
    drafts = [GroupDraft(name="g", wish="a wish", members=["f1", "f2"])]

    def status(events):
        return rank(apply_review(drafts, [review("g")], fs), rejected_attempts(events))[0].status

    assert status([created, repaired, blocked]) == "ranked"  # blocked: the candidate is not decided
    assert status([created, repaired, blocked, final]) == "excluded"  # rejected under its repaired commit
    # the same through a repair event (how the controller books repairs now), two repairs deep
    from evolve.experiment.ledger import RepairEvent

    chain = [created, RepairEvent(key="c1:repair", commit="c1", candidate="r01:verify", stage="smoke", number=1,
                                  repaired_to="c2"),
             RepairEvent(key="c2:repair", commit="c2", candidate="r01:verify", stage="contracts", number=2,
                         repaired_to="c3"),
             Rejection(key="c3:decision", commit="c3", reason="no gain")]
    assert status(chain) == "excluded" and status(chain[:3]) == "ranked"
