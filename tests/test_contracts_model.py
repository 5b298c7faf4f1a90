"""Contract files and the predicate language: paths, operators, validation errors naming file and field,
scripted reply rules, configuration settings and the checking rules (frozen values, crashes). No trials run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from validate.contract_model import (
    Case,
    ContractError,
    Expectation,
    PathError,
    Reply,
    load_contract,
    parse_path,
    select,
)
from validate.contracts import (
    ContractFailure,
    FrozenStore,
    config_settings,
    evaluate_run,
    load_contracts,
    run_contracts,
    static_problems,
)
from validate.scenarios import ScenarioRun, ScriptedModel, build_document, crash_reason, write_task

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "harness_seed"

DOC = {
    "steps": [{"episode": 0, "extra": {"completion": "verify"}, "tool_calls": [{"function_name": "bash_command"}]},
              {"episode": 1, "extra": {"completion": "confirm"}},
              {"episode": 2, "extra": {"completion": "done", "ok": True}}],
    "spans": [{"boundary": "completion:VerificationGate.review", "episode": 0, "args": {"keys": "'ls\\n'"}},
              {"boundary": "completion:CompletionHandshake.on_reply", "episode": 0},
              {"boundary": "completion:CompletionHandshake.on_reply", "episode": 1}],
    "observations": ["Before completing, run a command", "Are you sure?", None],
    "reward": 1.0, "claims": 3, "status": "passed",
}


def exp(**kw) -> Expectation:
    return Expectation(**kw)


# ---------------------------------------------------------------------------------------------- paths
def test_paths_index_fan_out_and_filter():
    assert select(DOC, "steps[-1].extra.completion") == ["done"]
    assert select(DOC, "steps[*].extra.completion") == ["verify", "confirm", "done"]
    assert select(DOC, "steps[9].extra") == [] and select(DOC, "nothing.at.all") == []
    (hits,) = select(DOC, "spans[boundary^=completion:CompletionHandshake]")
    assert len(hits) == 2
    assert len(select(DOC, "spans[boundary^=completion:][*]")) == 3
    assert select(DOC, "spans[boundary*=Gate][0].args.keys") == ["'ls\\n'"]
    assert select(DOC, "steps[extra.ok=true][*].episode") == [2]
    assert select(DOC, "steps[extra.ok!=true][*].episode") == [0, 1]
    assert select(DOC, 'spans[boundary="completion:VerificationGate.review"][*].episode') == [0]
    # chained filters narrow the same list
    assert select(DOC, "spans[boundary^=completion:][episode=1][*].boundary") == [
        "completion:CompletionHandshake.on_reply"]


@pytest.mark.parametrize("bad", ["", "[0]", "steps.", "steps[", "steps[x]", "steps[-]", "steps..x", "a b"])
def test_bad_paths_are_refused(bad):
    with pytest.raises(PathError):
        parse_path(bad)


# ---------------------------------------------------------------------------------------------- operators
@pytest.mark.parametrize(("kw", "ok"), [
    ({"path": "reward", "op": "eq", "value": 1.0}, True),
    ({"path": "reward", "op": "eq", "value": 1}, True),
    ({"path": "claims", "op": "eq", "value": True}, False),  # a bool is not a number here
    ({"path": "claims", "op": "gte", "value": 3}, True),
    ({"path": "claims", "op": "lt", "value": 3}, False),
    ({"path": "status", "op": "gt", "value": 1}, False),  # type mismatch is a plain failure
    ({"path": "observations[0]", "op": "contains", "value": "Before completing"}, True),
    ({"path": "observations[*]", "op": "contains", "value": "Are you sure", "quant": "any"}, True),
    ({"path": "observations[*]", "op": "contains", "value": "Are you sure"}, False),  # all: None does not contain
    ({"path": "observations[*]", "op": "contains", "value": "nope", "quant": "none"}, True),
    ({"path": "observations[1]", "op": "matches", "value": r"^Are .* sure\?$"}, True),
    ({"path": "status", "op": "in", "value": ["passed", "failed"]}, True),
    ({"path": "steps", "op": "len_eq", "value": 3}, True),
    ({"path": "spans[boundary^=completion:][*]", "op": "count_gte", "value": 3}, True),
    ({"path": "spans[boundary^=tmux:][*]", "op": "count_eq", "value": 0}, True),
    ({"path": "steps[0].extra.missing", "op": "absent"}, True),
    ({"path": "steps[0].extra.missing", "op": "eq", "value": 1}, False),  # nothing selected never passes
    ({"path": "steps[0].extra", "op": "exists"}, True),
    ({"path": "steps[*].tool_calls[*].function_name", "op": "ne", "value": "mark_task_complete"}, True),
])
def test_operators(kw, ok):
    passed, _, message = exp(**kw).check(DOC)
    assert passed is ok, message


def test_expectation_validation():
    with pytest.raises(ValueError, match="needs a value"):
        exp(path="reward", op="eq")
    with pytest.raises(ValueError, match="not a valid regex"):
        exp(path="reward", op="matches", value="(")
    with pytest.raises(ValueError, match="configs must list it"):
        exp(path="reward", op="eq", value=1, tag="incumbent", configs=["on"])
    with pytest.raises(ValueError):
        exp(path="reward", op="eval", value="__import__('os')")


# ---------------------------------------------------------------------------------------------- files
def test_seed_contracts_load_and_are_consistent_with_the_seed():
    contracts, problems = load_contracts(SEED)
    assert problems == []
    assert {"completion-handshake", "observation-limit", "midharness-selection"} <= set(contracts)
    assert static_problems(SEED, contracts) == []
    for c in contracts.values():
        assert {case.kind for case in c.cases} >= {"positive", "negative"}


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


BASE = (SEED / "contracts" / "completion-handshake.toml").read_text()


def test_errors_name_the_file_and_the_field(tmp_path):
    bad = BASE.replace('op = "len_eq"', 'op = "length"')
    with pytest.raises(ContractError) as err:
        load_contract(_write(tmp_path, "completion-handshake", bad))
    assert "completion-handshake.toml" in str(err.value)
    assert "cases[0] (claim-is-questioned).expect[4]" in err.value.field
    with pytest.raises(ContractError, match="must match the file name"):
        load_contract(_write(tmp_path, "other-name", BASE))
    with pytest.raises(ContractError, match="not valid TOML"):
        load_contract(_write(tmp_path, "broken", "version = [1"))
    no_negative = BASE.replace('kind = "negative"', 'kind = "recovery"')
    with pytest.raises(ContractError, match="at least one negative case"):
        load_contract(_write(tmp_path, "completion-handshake", no_negative))
    crashy = BASE.replace('max_episodes = 3', 'max_episodes = 3\nallow_crash = true')
    with pytest.raises(ContractError, match="never pass on a crash"):
        load_contract(_write(tmp_path, "completion-handshake", crashy))
    unknown = BASE.replace('task = "greet"', 'task = "nope"', 1)
    with pytest.raises(ContractError, match="task 'nope' is not in"):
        load_contract(_write(tmp_path, "completion-handshake", unknown))


def test_static_problems_name_keys_hooks_spans_and_mechanisms(tmp_path):
    harness = tmp_path / "harness"
    (harness / "contracts").mkdir(parents=True)
    for f in ("settings.toml", "recording.toml", "completion.py", "loop.py"):
        (harness / f).write_text((SEED / f).read_text())
    text = (BASE.replace('key = "terminus.confirmations"', 'key = "terminus.confirmation"')
            .replace('hooks = ["completion:CompletionHandshake.on_reply"', 'hooks = ["completion:Nope.on_reply"')
            .replace('spans = ["completion:CompletionHandshake.on_reply"]',
                     'spans = ["completion:CompletionHandshake.pending"]\ndepends_on = ["ghost"]'))
    (harness / "contracts" / "completion-handshake.toml").write_text(text)
    contracts, _ = load_contracts(harness)
    messages = "\n".join(str(p) for p in static_problems(harness, contracts))
    assert "'terminus.confirmation' is not a key of settings.toml" in messages
    assert "hook completion:Nope.on_reply" in messages
    assert "span completion:CompletionHandshake.pending is not a boundary" in messages
    assert "'ghost'" in messages


# ---------------------------------------------------------------------------------------------- scripted model
def _body(text: str, **kw) -> dict:
    return {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": text}], **kw}


def test_scripted_model_rules_conditions_times_and_fallback():
    case = Case(name="c", kind="positive", task="t", max_requests=5, expect=[exp(path="reward", op="exists")],
                replies=[Reply(contains="Are you sure", task_complete=True, times=1),
                         Reply(not_contains=["MISSING"], text="plain", times=2),
                         Reply(contains=["MISSING", "report"], text="fix")])
    model = ScriptedModel(case)
    assert json.loads(model(_body("Are you sure?")))["task_complete"] is True
    assert model(_body("Are you sure?")) == "plain"  # rule 0 is used up
    assert model(_body("MISSING report")) == "fix"
    assert model(_body("hello")) == "plain"
    assert json.loads(model(_body("hello")))["task_complete"] is True  # no rule left: fallback claims
    assert model(_body("x", max_tokens=1)) == "A"  # a decision-only verifier duel is not a request
    assert model.answered == [0, 1, 2, 1, "fallback"]
    assert json.loads(model(_body("MISSING report")))["task_complete"] is True  # past max_requests


def test_write_task_makes_a_loadable_harbor_task(tmp_path):
    from trials.tasks.load import load_task
    from validate.contract_model import TaskSpec

    spec = TaskSpec(instruction="Do it.", files={"sub/a.txt": "A"}, setup=["mkdir -p /app/x"], check="true")
    task = load_task(write_task(spec, "tiny", tmp_path / "tiny"))
    assert task.name == "tiny" and task.config.environment.allow_internet is False
    assert "COPY files/ /app/" in (tmp_path / "tiny" / "environment" / "Dockerfile").read_text()
    with pytest.raises(ValueError, match="exactly one"):
        TaskSpec(instruction="x")
    with pytest.raises(ValueError, match="inside /app"):
        TaskSpec(instruction="x", check="true", files={"../etc/passwd": "x"})


# ---------------------------------------------------------------------------------------------- checking rules
def test_config_settings_switch_dependencies_conflicts_and_unknown_keys():
    contracts, _ = load_contracts(SEED)
    c = contracts["completion-handshake"].model_copy(update={"conflicts_with": ["midharness-selection"],
                                                             "depends_on": ["observation-limit"]})
    case = c.cases[0].model_copy(update={"settings": {"tmux.width": 120, "new.key": 1}})
    known = {"tmux.width", "terminus.confirmations", "midharness.n", "observation.limit_bytes"}
    assert config_settings("incumbent", c, case, contracts, known) == {"tmux.width": 120, "midharness.n": 1}
    assert config_settings("off", c, case, contracts, known) == {
        "tmux.width": 120, "midharness.n": 1, "terminus.confirmations": 1}
    assert config_settings("on", c, case, contracts, known) == {
        "tmux.width": 120, "midharness.n": 1, "terminus.confirmations": 2, "observation.limit_bytes": 10000}


def _run(doc: dict, crash: str | None = None) -> ScenarioRun:
    return ScenarioRun("x", Path("/tmp/none"), {}, doc, crash)


def test_frozen_values_and_crashes(tmp_path):
    contracts, _ = load_contracts(SEED)
    c = contracts["completion-handshake"]
    positive, negative = c.case("claim-is-questioned"), c.case("no-claim-no-question")
    store = FrozenStore(tmp_path / "frozen.json")
    added: list[str] = []
    inc = {"claims": 2, "reward": 1.0, "observations": ["Are you sure"], "spans": [
        {"boundary": "completion:CompletionHandshake.on_reply"}], "steps": [{"extra": {"completion": "done"}}]}
    assert evaluate_run(c, positive, "incumbent", _run(inc), store, "v0", added).passed
    assert added == ["completion-handshake/claim-is-questioned/claims-frozen@claims"]
    assert FrozenStore(tmp_path / "frozen.json").get(added[0]) == [2]  # on disk
    # "on" must reproduce the frozen value; 3 claims is a failure naming the frozen value
    on = dict(inc, claims=3)
    res = evaluate_run(c, positive, "on", _run(on), store, "v0", added)
    assert not res.passed and "frozen value is [2]" in str(res.failures[0])
    # an incumbent that contradicts its own predicate is reported, and freezes nothing
    store2 = FrozenStore(tmp_path / "other.json")
    res = evaluate_run(c, positive, "incumbent", _run(dict(inc, claims=5)), store2, "v0", [])
    assert not res.passed and "incumbent behaviour" in str(res.failures[0]) and store2.keys() == []
    # a negative case never passes on a crash, though its "none" predicates hold on an empty run
    empty = {"observations": [], "claims": 0, "outcome": {"status": "max_episodes"}, "steps": []}
    store.put("completion-handshake/no-claim-no-question/episode-limit@outcome.status", ["max_episodes"], "v0")
    assert evaluate_run(c, negative, "off", _run(empty), store, "v0", []).passed
    res = evaluate_run(c, negative, "off", _run(empty, crash="the harness crashed (crash): boom"), store, "v0", [])
    assert not res.passed and [f.expectation for f in res.failures] == [None]
    assert "crashed" in res.failures[0].message


def test_crash_reason_from_results():
    assert crash_reason({"result": {}}) == "no result.json"
    assert "infrastructure" in crash_reason({"result": {"status": "infra", "infra_cause": "sandbox"}})
    assert "timeout" in crash_reason({"result": {"status": "failed", "agent_timed_out": True}})
    assert "crashed" in crash_reason({"result": {"status": "failed", "agent_status": "error",
                                                 "agent_error_kind": "crash", "agent_error": "Trace\nBoom"}})
    assert crash_reason({"result": {"status": "failed", "agent_status": "max_episodes"}}) is None


def test_build_document_from_an_empty_trial_folder(tmp_path):
    doc = build_document(tmp_path)
    assert doc["steps"] == [] and doc["spans"] == [] and doc["status"] is None and crash_reason(doc)


def test_repair_loop_fixes_a_static_problem(tmp_path):
    """The repair callback gets the failures and may fix the candidate; the check then runs again."""
    cand, inc = tmp_path / "cand", tmp_path / "inc"
    for d in (cand, inc):
        (d / "contracts").mkdir(parents=True)
        for f in ("settings.toml", "recording.toml", "completion.py", "loop.py"):
            (d / f).write_text((SEED / f).read_text())
    good = (SEED / "contracts" / "completion-handshake.toml").read_text()
    path = cand / "contracts" / "completion-handshake.toml"
    path.write_text(good.replace('"terminus.confirmations"', '"terminus.confirmationz"'))
    calls: list[list[ContractFailure]] = []

    def repair(candidate: Path, failures: list[ContractFailure]) -> bool:
        calls.append(failures)
        path.write_text(good)
        return True

    report = run_contracts(cand, inc, tmp_path / "frozen.json", repair=repair, configs=(), max_repairs=1,
                           out_dir=tmp_path / "out")
    assert report.repairs == 1 and len(calls) == 1
    # the static problem is repaired; with no configuration to run nothing can pass (issue 15 item 2)
    assert [str(f) for f in report.failures] == ["-: no configuration to check (configs is empty)"]
    assert "terminus.confirmationz" in str(calls[0][0]) and "confirmationz" in report.history[0][0]
    assert (tmp_path / "out" / "attempt1" / "report.json").is_file()

    # a repair that gives up (returns False) ends the loop with the failures; so does the attempt limit
    path.write_text(good.replace('"terminus.confirmations"', '"terminus.confirmationz"'))
    report = run_contracts(cand, inc, tmp_path / "frozen.json", repair=lambda c, f: False, configs=())
    assert not report.passed and report.repairs == 1
    report = run_contracts(cand, inc, tmp_path / "frozen.json", repair=lambda c, f: True, max_repairs=2,
                           configs=())
    assert not report.passed and report.repairs == 2 and len(report.history) == 2


def test_a_candidate_without_a_new_contract_fails(tmp_path):
    report = run_contracts(SEED, SEED, tmp_path / "frozen.json", configs=())
    assert not report.passed and "adds or changes no contract" in report.summary()


def test_replies_render_in_both_response_formats():
    from harness_seed.parsing import parse_response

    reply = Reply(analysis="a <b> & c", plan="p", task_complete=True,
                  commands=[{"keystrokes": "echo '<x>' > /app/f\n", "duration": 0.5}])
    for fmt in ("json", "xml"):
        parsed = parse_response(reply.render(fmt), fmt)
        assert parsed.error is None, (fmt, parsed.error)
        assert parsed.task_complete and parsed.analysis == "a <b> & c"
        assert [(c.keystrokes, c.duration) for c in parsed.commands] == [("echo '<x>' > /app/f\n", 0.5)]
    assert Reply(text="raw").render("xml") == "raw"


def test_frozen_store_objects_on_one_file_keep_each_others_values(tmp_path):
    a, b = FrozenStore(tmp_path / "f.json"), FrozenStore(tmp_path / "f.json")
    assert a.put("m/c/e@x", [1], "v0") and b.put("m/c/e@y", [2], "v0")
    assert not b.put("m/c/e@x", [9], "v1")  # the first frozen value stays
    assert FrozenStore(tmp_path / "f.json").keys() == ["m/c/e@x", "m/c/e@y"]
    assert FrozenStore(tmp_path / "f.json").get("m/c/e@x") == [1]
