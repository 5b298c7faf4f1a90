"""Every role's inputs are checked by its input model before the call: defaults filled in, a missing, unknown or
wrong field named (role, field, what was wrong), and a call that could not start costs nothing: no request reaches
the (scripted, real HTTP) model server, no transcript, no budget charged, no saved unit, no call booked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from evolve.experiment.units import run_once
from evolve.roles.analysis.pipeline import error_info
from evolve.roles.runtime import (
    Budget,
    Role,
    RoleError,
    RoleInputError,
    get_role,
    list_roles,
    make_backend,
    read_transcript,
    run_role,
)
from evolve.roles.runtime.role import validate_inputs
from evolve.roles.runtime.template_vars import template_variables, uncovered
from trials.endpoints.scripted import ScriptedServer
from trials.endpoints.spec import EndpointSpec

BRIEF = {"id": "f1", "task": "write-json", "failure": "write-json__r2", "wish": "check the file before claiming"}
PAIR = {"task": "write-json", "instruction": "write a.json", "success": "write-json__r1", "failure": "write-json__r2",
        "success_path": "trials/write-json__r1", "failure_path": "trials/write-json__r2", "success_digest": "none",
        "failure_digest": "early claim", "divergence_episode": 1, "region": "episode 1 ..."}
PROPOSAL = {"mechanism": "verify-completion", "summary": "withhold the first completion claim once",
            "setting": "completion.verify"}

# role: (good inputs, a field they leave out, the default it gets, bad inputs, the field the error names)
CASES: dict[str, tuple[dict[str, Any], str, Any, dict[str, Any], str]] = {
    "explorer": ({"question": "what does a.txt say?"}, "", None,
                 {"question": "q", "questoin": "typo"}, "questoin"),
    "analyst": (PAIR, "harness_evidence", True, {**PAIR, "divergence_episode": "first"}, "divergence_episode"),
    "grouper": ({"findings": [BRIEF]}, "findings.0.behaviours", [],
                {"findings": [{**BRIEF, "wish": None}]}, "findings.0.wish"),
    "reviewer": ({"groups": [{"name": "claims", "wish": "check first", "members": [BRIEF]}]},
                 "groups.0.members.0.differences", "",
                 {"groups": [{"name": "claims", "wish": "check first", "members": []}]}, "groups.0.members"),
    "researcher": ({"group": "claims", "wish": "check before claiming"}, "behaviours", [],
                   {"group": "claims"}, "wish"),
    "proposer": ({"group": {"name": "claims", "wish": "check before claiming"}}, "tiers",
                 ["settings", "prompt", "code"], {"group": {"name": "claims", "wish": "x", "size": 3}}, "group.size"),
    "implementer": ({"proposal": PROPOSAL}, "proposal.tier", "code",
                    {"proposal": {**PROPOSAL, "tier": "big"}}, "proposal.tier"),
}


def _get(data: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


def _backend(srv: ScriptedServer):
    return make_backend("openai", EndpointSpec(base_url=srv.base_url, model="scripted"))


def test_every_registered_role_has_a_case_here() -> None:
    assert {r.name for r in list_roles()} == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_input_model_covers_what_the_template_reads(name: str) -> None:
    role = get_role(name)
    assert role.inputs is not None
    assert template_variables(role.template) <= set(role.inputs.model_fields)  # jinja2's own analysis
    assert uncovered(role) == []  # and every attribute below them, through loops


def test_the_coverage_check_finds_an_untyped_proposal() -> None:
    """The implementer as it was: ``proposal: dict[str, Any]`` let a proposal without ``tier`` through."""

    class Untyped(BaseModel):
        proposal: dict[str, Any]
        failures: str = ""

    role = get_role("implementer").model_copy(update={"inputs": Untyped})
    problems = uncovered(role)
    assert any(p.startswith("proposal.tier: proposal is dict") for p in problems), problems
    assert uncovered(get_role("proposer").model_copy(update={"inputs": Untyped}))[0].startswith("dev_tasks: ")


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_missing_defaulted_field_is_filled(name: str) -> None:
    good, field, default, _, _ = CASES[name]
    data = validate_inputs(get_role(name), good)
    if field:
        assert _get(data, field) == default


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_inputs_are_named_and_nothing_is_paid(name: str, tmp_path: Path) -> None:
    _, _, _, bad, field = CASES[name]
    (ws := tmp_path / "ws").mkdir()
    budget = Budget(max_usd=1.0)
    saved = tmp_path / "unit.json"
    with ScriptedServer([]) as srv:
        with pytest.raises(RoleInputError) as info:
            run_role(get_role(name), bad, ws, _backend(srv), transcripts=tmp_path / "tr", budget=budget)
        with pytest.raises(RoleInputError):  # through the unit that saves a paid call's result
            run_once(saved, get_role(name), lambda: run_role(get_role(name), bad, ws, _backend(srv),
                                                             transcripts=tmp_path / "tr"))
        assert srv.requests == []
    err = info.value
    assert err.kind == "bad_input" and not err.started and field in err.fields
    text = str(err)
    assert text.startswith(f"role {name}: bad_input:") and f"{field}: " in text  # role, field, what was wrong
    assert not (tmp_path / "tr").exists() and budget.calls == 0 and budget.spent_usd == 0
    # nothing saved as a paid unit (a resume tries again) and no call booked in a ledger event
    assert not saved.exists()
    assert error_info(err) == {"role": name, "skipped": text}


def test_a_template_variable_the_inputs_lack_is_a_named_input_error(tmp_path: Path) -> None:
    """A role without an input model (not registrable) still fails on a missing variable: StrictUndefined."""
    role = Role(name="unchecked", description="d", template=get_role("explorer").template,
                output=get_role("explorer").output)
    with ScriptedServer([]) as srv:
        with pytest.raises(RoleInputError, match="'question' is undefined") as info:
            run_role(role, {}, tmp_path, _backend(srv), transcripts=tmp_path / "tr")
        assert srv.requests == []
    assert not info.value.started and not (tmp_path / "tr").exists()


def test_a_role_without_an_input_model_cannot_be_registered() -> None:
    from evolve.roles.runtime import register_role

    role = Role(name="unchecked", description="d", template=get_role("explorer").template,
                output=get_role("explorer").output)
    with pytest.raises(ValueError, match="role 'unchecked' has no input model"):
        register_role(role)


def test_the_implementer_takes_a_proposal_without_tier_as_code(tmp_path: Path) -> None:
    """Through the real runtime and HTTP: the missing tier is the model's default (code), so the prompt asks for
    the setting; a proposal without a mechanism is refused by name before any request."""
    (ws := tmp_path / "ws").mkdir()
    answer = {"summary": "nothing to change in this test", "check_passed": False}
    role = get_role("implementer")
    with ScriptedServer([{"content": "", "tool_calls": [{"name": "final_answer", "arguments": answer}]}]) as srv:
        result = run_role(role, {"proposal": PROPOSAL}, ws, _backend(srv), transcripts=tmp_path / "tr")
        prompt = srv.requests[0]["messages"][1]["content"]
    assert "Setting that switches it: completion.verify" in prompt
    assert "contracts/verify-completion.toml" in prompt and "prompt-tier change" not in prompt
    start = read_transcript(result.transcript)[0]
    assert start["inputs"]["proposal"]["tier"] == "code"
    lacking = {k: v for k, v in PROPOSAL.items() if k != "mechanism"}
    with ScriptedServer([]) as srv:
        with pytest.raises(RoleError) as info:
            run_role(role, {"proposal": lacking}, ws, _backend(srv), transcripts=tmp_path / "tr2")
        assert srv.requests == []
    assert info.value.fields == ["proposal.mechanism"] and "proposal.mechanism: Field required" in str(info.value)


def test_a_round_books_no_call_for_a_proposal_the_implementer_cannot_take(tmp_path: Path) -> None:
    """Through the round's implementation unit (evolve.steps) on a real experiment: no branch, no worktree, no
    request, no transcript, no saved unit; the ledger's implementation event says why and claims no call."""
    from types import SimpleNamespace

    from evolve.experiment.budget import LoopBudget
    from evolve.roles.proposals.models import ProposalSpec
    from evolve.steps import RoundSteps
    from tests.test_controller_support import make_experiment

    exp = make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1")
    spec = ProposalSpec(summary="verify the result before a completion claim", setting="completion.verify")
    rdir = exp.root / "rounds" / "r01"
    with ScriptedServer([]) as srv:
        evo = SimpleNamespace(exp=exp, led=exp.ledger, budget=LoopBudget(), role=lambda r: r,
                              backends=lambda role, key: _backend(srv),
                              _append=lambda event, point: exp.ledger.append(event))
        branch = RoundSteps(evo).implementation(1, "verify", spec, None, "v0", exp.harness_dir, rdir)
        assert srv.requests == []
    assert branch is None
    assert not [b for b in exp.repo.branches if b.name.startswith("cand/")] and not (exp.root / "worktrees").exists()
    assert not rdir.exists()  # no transcript, no saved unit
    (event,) = exp.ledger.find("implementation")
    assert event.status == "failed" and "proposal.mechanism: String should match pattern" in event.reason
    assert set(event.role_call) == {"role", "skipped"} and event.role_call["role"] == "implementer"
