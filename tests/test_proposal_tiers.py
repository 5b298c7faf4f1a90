"""Mechanism tiers: what a settings-tier or prompt-tier proposal may name, and how its candidate is made.

Real parts: the seed's Handbook and settings schema (read through the same child process that checks a grid's
settings), real git (an experiment's harness repository), jinja2's sandbox. The proposer's answers come from a
backend double that returns a fixed answer (named :class:`Answering`), so the refusals are the platform's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evolve.roles.proposals import PROPOSER, OverfitGuard, ProposerInputs, propose
from evolve.roles.proposals.prompt_tier import check_prompt_candidate
from evolve.roles.proposals.switches import harness_switches
from evolve.roles.runtime import BackendReply, Usage
from tests.test_evolve_support import make_experiment

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "harness_seed"
STARTER = REPO / "data" / "starter"
DEV = ["hello-file", "write-json"]
GROUP = {"id": "g1", "name": "claims without checking", "wish": "verify before claiming", "tasks": ["write-json"],
         "behaviours": ["completion.handshake"]}


class Answering:
    """A backend double: answers every call with ``answer`` and keeps the prompt it was given."""

    name = "answering"

    def __init__(self, answer: dict):
        from trials.endpoints.spec import PriceTable

        self.answer, self.prompts, self.price = answer, [], PriceTable()

    async def run(self, job):
        self.prompts.append(job.prompt)
        return BackendReply(output=job.role.output.model_validate(self.answer),
                            usage=Usage(input_tokens=1, output_tokens=1, requests=1))


def settings_answer(**settings) -> dict:
    return {"tier": "settings", "settings": [{"key": k, "value": v} for k, v in settings.items()],
            "mechanism": "confirm-more", "summary": "ask for one more confirmation before a claim ends the run",
            "behaviour_change": "a run ends after three consecutive claims", "predicted_fixes": ["write-json"]}


def run_proposer(tmp_path: Path, answer: dict):
    backend = Answering(answer)
    spec, verdict, _ = propose(ProposerInputs(group=GROUP, findings=["f1 (task write-json): claimed early"],
                                              dev_tasks=DEV, stable_tasks=["hello-file"]),
                               SEED, backend, OverfitGuard(STARTER, DEV), role=PROPOSER,
                               transcripts=tmp_path / "tr", harness=SEED)
    return spec, verdict, backend.prompts[0]


def test_the_proposer_sees_every_switch_with_its_current_and_allowed_values(tmp_path):
    spec, verdict, prompt = run_proposer(tmp_path, settings_answer(**{"terminus.confirmations": 3}))
    assert "- completion.handshake: terminus.confirmations = 2, an integer >= 1" in prompt
    assert 'midharness.verifier = "pairwise", one of "listwise", "pointwise", "pairwise", "tournament"' in prompt
    assert "model.json_schema = false, true or false" in prompt
    assert "tmux.session_name" not in prompt  # free text is no switch
    assert "prompts/completion_confirm.j2" in prompt
    # a listed switch with an allowed value passes; screening will look for the steered behaviour's spans
    assert not verdict.refused, verdict.reason()
    assert spec.tier == "settings" and spec.settings == {"terminus.confirmations": 3}
    assert spec.boundaries == ["completion:CompletionHandshake.on_reply"]


@pytest.mark.parametrize("key,value,named", [
    ("completion.verify_first", True, "setting completion.verify_first is not a switch the incumbent's Handbook"),
    ("tmux.session_name", "other", "setting tmux.session_name is not a switch"),  # listed, but free text
    ("terminus.confirmations", 0, "setting terminus.confirmations: Input should be greater than or equal to 1"),
    ("context.proactive_max_fraction", 1.5, "setting context.proactive_max_fraction: Input should be less than"),
    ("midharness.verifier", "best", 'setting midharness.verifier: "best" is not allowed (one of "listwise"'),
    ("model.json_schema", "maybe", 'setting model.json_schema: "maybe" is not allowed (true or false)'),
    ("model.json_schema", 1, "setting model.json_schema: 1 is not allowed (true or false)"),
    ("midharness.n", 2.5, "setting midharness.n: 2.5 is not allowed (an integer >= 1)"),
    ("terminus.confirmations", 2, "setting terminus.confirmations is 2 already"),
])
def test_a_settings_proposal_outside_the_handbook_or_the_schema_is_refused_with_the_key_named(tmp_path, key, value,
                                                                                               named):
    _, verdict, _ = run_proposer(tmp_path, settings_answer(**{key: value}))
    assert verdict.refused
    assert named in verdict.reason(), verdict.reason()


def test_a_switch_written_after_its_behaviour_id_is_read_as_that_switch(tmp_path):
    spec, verdict, _ = run_proposer(tmp_path, settings_answer(**{"completion.handshake.terminus.confirmations": "1"}))
    assert not verdict.refused and spec.settings == {"terminus.confirmations": 1}
    _, verdict, _ = run_proposer(tmp_path, settings_answer(**{"model.call.terminus.confirmations": 3}))
    assert verdict.refused and "setting model.call.terminus.confirmations is not a switch" in verdict.reason()


def test_values_written_as_text_are_read_as_their_switch_type(tmp_path):
    spec, verdict, _ = run_proposer(tmp_path, settings_answer(**{"model.json_schema": "true", "midharness.n": "4"}))
    assert not verdict.refused, verdict.reason()
    assert spec.settings == {"model.json_schema": True, "midharness.n": 4}


def test_a_refused_settings_proposal_is_booked_like_the_guards_refusals(tmp_path):
    """Through the loop's proposal unit: a ``refused`` ProposalEvent whose reason names the key."""
    from evolve.loop import Evolution, EvolveOptions
    from evolve.roles.analysis.models import Group

    exp = make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1")
    backend = Answering(settings_answer(**{"model.not_a_switch": 1}))
    evo = Evolution(exp, EvolveOptions(rounds=1), lambda role, key: backend)
    from evolve.round.controller import Controller

    ctl = Controller(exp)
    group = Group(id="g1", name=GROUP["name"], wish=GROUP["wish"], members=["f1"], tasks=["write-json"],
                  behaviours=["completion.handshake"], signature="completion.handshake")
    made = evo.steps.proposal(1, group, ["f1"], {}, "", [], OverfitGuard(STARTER, DEV), ctl,
                              ctl.version_dir("v0"), exp.root / "rounds" / "r01")
    assert made is None
    (event,) = exp.ledger.find("proposal")
    assert event.status == "refused" and "model.not_a_switch" in event.reason
    assert event.proposal["tier"] == "settings"
    assert "its switches under model.: model.interleaved_thinking" in event.reason
    assert "refused: setting model.not_a_switch is not a switch" in "\n".join(evo.steps.history())  # the next proposer


# ------------------------------------------------------------------------------------------------ prompt tier
@pytest.fixture()
def copy(tmp_path) -> Path:
    out = tmp_path / "harness"
    shutil.copytree(SEED, out, ignore=shutil.ignore_patterns("__pycache__"))
    return out


def test_a_prompt_edit_that_keeps_its_variables_renders_and_passes(copy):
    t = copy / "prompts" / "completion_confirm.j2"
    t.write_text("Before you confirm, run a command that shows the result.\n" + t.read_text())
    assert check_prompt_candidate(SEED, copy, ["prompts/completion_confirm.j2"]) == ([], [])


@pytest.mark.parametrize("text,named", [
    ("State: {{ terminal_output }} {{ checklist }}", ("uses checklist, which the harness does not pass (it passes: "
                                                    "fmt, terminal_output)")),
    ("State: {{ terminal_output }} {% if fmt == 'json' %}JSON", "not a valid template (line 1: Unexpected end"),
    ("State: {{ terminal_output | shout }}", "No filter named 'shout'"),
    ("State: {{ terminal_output.splitlines()[99] }}", "does not render with the variables the harness passes"),
])
def test_a_prompt_edit_that_breaks_rendering_is_refused(copy, text, named):
    (copy / "prompts" / "completion_confirm.j2").write_text(text)
    problems, _ = check_prompt_candidate(SEED, copy, ["prompts/completion_confirm.j2"])
    assert problems and "prompts/completion_confirm.j2" in problems[0] and named in " ".join(problems), problems


def test_a_prompt_tier_candidate_may_change_templates_only(copy):
    problems, _ = check_prompt_candidate(SEED, copy, ["prompts/warnings.j2", "loop.py"])
    assert "may change only prompt templates (*.j2); it changed loop.py" in problems[0]


def test_the_prompt_tier_refusal_reads_the_candidates_commit(tmp_path):
    """Real git: a candidate branch whose template no longer renders is refused by the loop's check."""
    from evolve.roles.implement.tier_units import prompt_refusal
    from evolve.round.controller import Controller

    exp = make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1")
    inc = Controller(exp).version_dir("v0")
    _, wt = exp.create_candidate(1, "confirm-wording", base=exp.commit_of("v0"))
    (wt / "prompts" / "completion_confirm.j2").write_text("{{ terminal_output }} {{ verdict }}")
    commit = exp.commit_worktree(wt, "prompt edit")
    reason = prompt_refusal(exp, "v0", commit, wt, inc)
    assert reason.startswith("prompt tier: prompts/completion_confirm.j2: uses verdict"), reason
    (wt / "prompts" / "completion_confirm.j2").write_text("Check first.\n{{ terminal_output }} {{ fmt }}")
    assert prompt_refusal(exp, "v0", exp.commit_worktree(wt, "fixed"), wt, inc) == ""


def test_switches_of_the_seed_are_every_bounded_setting_its_handbook_lists():
    switches = {s.key: s for s in harness_switches(SEED)}
    assert switches["terminus.confirmations"].behaviours == ["completion.handshake"]
    assert switches["midharness.n"].behaviours == ["model.actor", "model.sampling"]
    assert switches["context.proactive_max_fraction"].allowed == "a number > 0 and <= 1"
    assert not {"tmux.session_name", "tmux.shell", "trajectory.file", "midharness.verifier_model"} & set(switches)
    assert json.loads(json.dumps([s.model_dump() for s in switches.values()]))  # plain data for the prompt


def test_an_experiment_limited_to_the_settings_tier_offers_only_it_and_requires_the_values(tmp_path):
    from pydantic import ValidationError

    from evolve.roles.proposals.models import answer_model

    model = answer_model(["settings"])
    schema = model.model_json_schema()
    assert schema["properties"]["tier"]["const"] == "settings" and schema["required"][:2] == ["tier", "settings"]
    with pytest.raises(ValidationError, match="tier"):
        model.model_validate({**settings_answer(**{"terminus.confirmations": 3}), "tier": "code", "setting": "a.b"})
    with pytest.raises(ValidationError, match="settings"):
        model.model_validate({**settings_answer(), "settings": []})
    # the proposer's prompt then offers the settings tier alone, and no prompt templates
    backend = Answering(settings_answer(**{"terminus.confirmations": 3}))
    spec, verdict, _ = propose(ProposerInputs(group=GROUP, findings=["f1"], dev_tasks=DEV, tiers=["settings"]), SEED,
                               backend,
                               OverfitGuard(STARTER, DEV), transcripts=tmp_path / "tr", harness=SEED)
    assert not verdict.refused and spec.tier == "settings"
    assert "- settings: new values" in backend.prompts[0] and "- code: a new mechanism" not in backend.prompts[0]
    assert "Prompt templates:" not in backend.prompts[0]
    assert "Switches of the behaviours these findings involve" in backend.prompts[0]


def test_two_tiers_make_one_schema_variant_each_that_requires_its_values(tmp_path):
    """The main job's tiers (settings, prompt): the 1.5B proposer answered tier settings with no `settings` three
    times (night of 2026-12-07). The schema is now one variant per tier, each requiring its values, so a
    constrained server cannot produce that answer; the validator still refuses it elsewhere."""
    from pydantic import ValidationError

    from evolve.roles.proposals.models import TIERS, ProposerAnswer, answer_model
    from evolve.roles.runtime.backends.schema_tools import call_schema

    model = answer_model(["settings", "prompt"])
    schema = model.model_json_schema()
    assert schema["type"] == "object" and "properties" not in schema and "SettingChange" in schema["$defs"]
    tiers = {v["properties"]["tier"]["const"]: v for v in schema["anyOf"]}
    assert set(tiers) == {"settings", "prompt"}
    assert "settings" in tiers["settings"]["required"] and tiers["settings"]["properties"]["settings"]["minItems"] == 1
    assert "templates" in tiers["prompt"]["required"] and tiers["prompt"]["properties"]["templates"]["minItems"] == 1
    # the call schema a llama.cpp server gets inlines the $defs into each variant
    wire = call_schema([{"type": "function", "function": {"name": "final_answer", "parameters": schema}}],
                       allow_text=False)
    settings_items = wire["properties"]["arguments"]["anyOf"][0]["properties"]["settings"]["items"]
    assert settings_items["properties"]["key"]["type"] == "string" and "$ref" not in json.dumps(wire)
    with pytest.raises(ValidationError, match="give `settings`"):
        model.model_validate({**settings_answer(), "settings": []})
    assert model.model_validate(settings_answer(**{"terminus.confirmations": 3})).tier == "settings"
    # the full set of tiers keeps the one-object schema its recordings were made with
    assert "properties" in ProposerAnswer.model_json_schema() and answer_model(list(TIERS)) is ProposerAnswer


def test_a_two_tier_proposal_through_the_openai_backend_on_a_schema_server(tmp_path):
    """The per-tier schema as the main job sends it: pydantic-ai's loop, the schema tool client, a llama.cpp-
    flavoured scripted server that answers in text; the answer comes back as the proposal."""
    from evolve.roles.runtime import make_backend
    from trials.endpoints.scripted import ScriptedServer
    from trials.endpoints.spec import EndpointSpec

    answer = settings_answer(**{"terminus.confirmations": 3})
    with ScriptedServer([{"content": json.dumps({"name": "final_answer", "arguments": answer})}],
                        flavor="llamacpp") as srv:
        backend = make_backend("openai", EndpointSpec(base_url=srv.base_url, model="scripted", tool_calls="schema"))
        spec, verdict, _ = propose(ProposerInputs(group=GROUP, findings=["f1"], dev_tasks=DEV,
                                                  tiers=["settings", "prompt"]),
                                   SEED, backend, OverfitGuard(STARTER, DEV), transcripts=tmp_path / "tr", harness=SEED)
        sent = srv.requests[0]["response_format"]["json_schema"]["schema"]
    assert not verdict.refused and spec.tier == "settings" and spec.settings == {"terminus.confirmations": 3}
    (final,) = [c for c in sent.get("anyOf", [sent]) if c["properties"]["name"]["const"] == "final_answer"]
    variants = final["properties"]["arguments"]["anyOf"]
    assert [v["properties"]["tier"]["const"] for v in variants] == ["settings", "prompt"]


def test_strict_switches_make_the_schema_list_the_switches_as_the_only_keys(tmp_path):
    """The 1.5B wrote behaviour ids as keys and whole switch lines as values (night of 2026-12-07; refused). With
    strict_switches the answer's schema names the switches, so a constraining server offers no other key."""
    from pydantic import ValidationError

    from evolve.roles.proposals.models import answer_model
    from evolve.roles.proposals.switches import harness_switches
    from evolve.roles.runtime import make_backend
    from trials.endpoints.scripted import ScriptedServer
    from trials.endpoints.spec import EndpointSpec

    two = [s for s in harness_switches(SEED) if s.key in ("terminus.confirmations", "tmux.max_send_bytes")]
    model = answer_model(["settings"], two)
    item = model.model_json_schema()["$defs"]["SettingChange"]["properties"]["key"]
    assert item["enum"] == [s.key for s in two] and set(item["enum"]) == {"terminus.confirmations",
                                                                          "tmux.max_send_bytes"}
    with pytest.raises(ValidationError, match="settings.0.key"):
        model.model_validate(settings_answer(**{"dispatch.commands": "tmux.max_send_bytes = 16000"}))
    answer = settings_answer(**{"terminus.confirmations": 3})
    with ScriptedServer([{"content": json.dumps({"name": "final_answer", "arguments": answer})}],
                        flavor="llamacpp") as srv:
        backend = make_backend("openai", EndpointSpec(base_url=srv.base_url, model="scripted", tool_calls="schema"))
        spec, verdict, _ = propose(ProposerInputs(group=GROUP, findings=["f1"], dev_tasks=DEV, tiers=["settings"],
                                                  strict_switches=True),
                                   SEED, backend, OverfitGuard(STARTER, DEV), transcripts=tmp_path / "tr", harness=SEED)
        wire = json.dumps(srv.requests[0]["response_format"])
    assert not verdict.refused and spec.settings == {"terminus.confirmations": 3}
    assert '"enum": ["' in wire and '"terminus.confirmations"' in wire and '"tmux.max_send_bytes"' in wire
    # off (the default), the key stays free text, as the recordings were made
    free = answer_model(["settings"]).model_json_schema()["$defs"]["SettingChange"]["properties"]["key"]
    assert "enum" not in free


def test_with_strict_switches_a_value_equal_to_the_current_one_gets_a_corrective_turn(tmp_path):
    """The 1.5B's last proposal of the night named a real switch at its current value (refused after the call).
    With strict switches it is sent back inside the call, and the second answer is taken."""
    from evolve.roles.proposals.models import answer_model
    from evolve.roles.proposals.switches import harness_switches
    from evolve.roles.runtime import make_backend, read_transcript
    from trials.endpoints.scripted import ScriptedServer
    from trials.endpoints.spec import EndpointSpec

    now = {s.key: s.current for s in harness_switches(SEED)}
    model = answer_model(["settings"], harness_switches(SEED))
    with pytest.raises(ValueError, match="already"):
        model.model_validate(settings_answer(**{"terminus.confirmations": str(now["terminus.confirmations"])}))
    same = settings_answer(**{"terminus.confirmations": now["terminus.confirmations"]})
    new = settings_answer(**{"terminus.confirmations": now["terminus.confirmations"] + 1})
    script = [{"content": json.dumps({"name": "final_answer", "arguments": a})} for a in (same, new)]
    with ScriptedServer(script, flavor="llamacpp") as srv:
        backend = make_backend("openai", EndpointSpec(base_url=srv.base_url, model="scripted", tool_calls="schema"))
        spec, verdict, result = propose(ProposerInputs(group=GROUP, findings=["f1"], dev_tasks=DEV,
                                                       tiers=["settings"], strict_switches=True),
                                        SEED, backend, OverfitGuard(STARTER, DEV), transcripts=tmp_path / "tr",
                                        harness=SEED)
    assert not verdict.refused and spec.settings == {"terminus.confirmations": now["terminus.confirmations"] + 1}
    rows = read_transcript(result.transcript)
    assert any(r["kind"] == "corrective_turn" and "already" in r["text"] for r in rows)
