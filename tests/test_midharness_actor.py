"""Mid-Harness over real HTTP: call counts per mechanism, the preferred candidate wins, N=1 is the base agent,
the verifier never sees the generator's reasoning, cost accounting, request shapes.

The generator side uses a small stand-in for the harness's ModelCaller (same interface: ``call``/``sample``
returning ModelReply-like objects) over the real ``ModelClient``; the parser is a minimal Terminus JSON one.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from harness_seed.midharness.actor import MidHarnessActor, PassthroughActor, build_actor
from harness_seed.midharness.tournament import pivot_pairs, ring
from tests.fakes.openai_server import ScriptedError, ScriptedServer
from trials.endpoints.client import ModelClient
from trials.endpoints.spec import EndpointSpec
from trials.harness_api import CostLedger

INSTRUCTION = "Create the file /app/done.txt containing the word ok."
FIRST_PROMPT = (
    "You are an AI assistant solving terminal tasks. Reply in JSON.\n\nTask Description:\n"
    f"{INSTRUCTION}\n\nCurrent terminal state:\nroot@box:/app# "
)


# -- stand-ins for the harness side (H5's model_call / parser have the same shape) ----------------------


@dataclass
class Reply:
    text: str
    finish_reason: str | None = "stop"
    input_tokens: int = 0
    output_tokens: int = 0
    latency_sec: float = 0.0
    extra: dict = field(default_factory=dict)


@dataclass
class Command:
    keystrokes: str
    duration: float = 1.0


@dataclass
class Parsed:
    commands: list[Command] = field(default_factory=list)
    task_complete: bool = False
    analysis: str = ""
    plan: str = ""
    error: str | None = None
    warnings: list[str] = field(default_factory=list)


def parse(text: str) -> Parsed:
    try:
        data = json.loads(text)
        cmds = [Command(c["keystrokes"], float(c.get("duration", 1.0))) for c in data["commands"]]
    except (ValueError, KeyError, TypeError) as exc:
        return Parsed(error=f"bad JSON: {exc}")
    return Parsed(cmds, bool(data.get("task_complete")), data.get("analysis", ""), data.get("plan", ""))


class Caller:
    """What the base agent does per episode: one chat call with the configured sampling."""

    def __init__(self, client: ModelClient) -> None:
        self.client = client

    async def call(self, messages: list[dict]) -> Reply:
        res = await self.client.chat(messages)
        c = res.choices[0]
        return Reply(c.text, c.finish_reason, res.input_tokens, res.output_tokens, res.latency_sec)

    async def sample(self, messages: list[dict], n: int, temperature: float) -> list[Reply]:
        res = await self.client.chat(messages, n=n, temperature=temperature)
        return [Reply(c.text, c.finish_reason, res.input_tokens, (len(c.text) + 3) // 4) for c in res.choices]


def action(keys: str, done: bool = False, secret: str = "SECRET_REASONING") -> str:
    return json.dumps(
        {
            "analysis": f"{secret} analysis",
            "plan": f"{secret} plan",
            "commands": [{"keystrokes": keys, "duration": 0.1}],
            "task_complete": done,
        }
    )


HISTORY = [
    {"role": "system", "content": "system prompt of the generator"},
    {"role": "user", "content": FIRST_PROMPT},
    {"role": "assistant", "content": action("ls\n", secret="SECRET_PLAN")},
    {"role": "user", "content": "New Terminal Output:\nroot@box:/app# ls\nroot@box:/app# "},
]

CANDIDATES = [
    action("echo one\n"),
    action("echo two\n"),
    action("echo ok > /app/done.txt\n"),
    action("rm -rf /\n"),
]
PREFERRED = "echo ok > /app/done.txt"


def is_verifier(body: dict) -> bool:
    return "You are judging" in body["messages"][0]["content"]


def section(prompt: str, title: str) -> str:
    """The text of one '### <title>' block of a verifier prompt."""
    m = re.search(rf"### {re.escape(title)}\n(.*?)(?=\n### |\n\n[A-Z]|\Z)", prompt, flags=re.DOTALL)
    return m.group(1) if m else ""


def prefer(keys: str, samples: list[str]):
    """A responder: the generator gets ``samples``; a verifier that always prefers the action with ``keys``."""

    def respond(body: dict) -> Any:
        if not is_verifier(body):
            return list(samples)
        prompt = body["messages"][0]["content"]
        if "### Action A" in prompt:
            return "A" if keys in section(prompt, "Action A") else "B"
        if "## Candidate next action" in prompt:
            return "9" if keys in prompt.split("## Candidate next action")[1] else "2"
        count = len(re.findall(r"^### Action \d+$", prompt, flags=re.MULTILINE))
        for i in range(1, count + 1):
            if keys in section(prompt, f"Action {i}"):
                return str(i)
        return "1"

    return respond


def client_for(srv: ScriptedServer, **spec: Any) -> ModelClient:
    return ModelClient(EndpointSpec(base_url=srv.base_url, model=srv.model, timeout_sec=20, **spec))


async def run_step(responder, settings: dict, history=HISTORY, **spec: Any):
    cost = CostLedger()
    with ScriptedServer(responder) as srv:
        async with client_for(srv, **spec) as client:
            actor = build_actor(settings, Caller(client), client, INSTRUCTION, parse, cost)
            reply = await actor.act(history)
        return reply, list(srv.requests), cost


def executed(reply: Reply) -> list[str]:
    """What the agent loop would run for this reply."""
    return [c.keystrokes for c in parse(reply.text).commands]


# -- call counts and the choice, per mechanism ------------------------------------------------------------


def expected_calls(mechanism: str, unique: int, record: dict) -> int:
    if mechanism == "listwise":
        return 1
    if mechanism == "pointwise":
        return unique
    if mechanism == "pairwise":
        return unique * (unique - 1) // 2
    ids = list(range(unique))
    ring_pairs = ring(ids)
    pivots = record["pivots"]
    rest = [i for i in ids if i not in pivots]
    return len(ring_pairs) + len(pivot_pairs(pivots, rest, {frozenset(p) for p in ring_pairs}))


@pytest.mark.parametrize("mechanism", ["listwise", "pointwise", "pairwise", "tournament"])
async def test_n4_call_counts_and_preferred_candidate_executes(mechanism):
    settings = {"n": 4, "verifier": mechanism, "pivots": 2}
    reply, requests, cost = await run_step(prefer(PREFERRED, CANDIDATES), settings)
    rec = reply.extra["midharness"]
    verifier_requests = [b for b in requests if is_verifier(b)]
    assert len(requests) - len(verifier_requests) == 1  # one n=4 generator request
    assert requests[0]["n"] == 4 and requests[0]["temperature"] == 0.8
    assert rec["unique"] == 4 and rec["calls"] == len(verifier_requests) == len(rec["verdicts"])
    assert rec["calls"] == expected_calls(mechanism, 4, rec)
    assert executed(reply) == [PREFERRED + "\n"]
    assert rec["choice"] == 2 and rec["candidates"][2]["commands"][0]["keystrokes"] == PREFERRED + "\n"
    assert cost.verifier.calls == rec["calls"]
    assert cost.verifier.output_tokens == sum(v["output_tokens"] for v in rec["verdicts"])


@pytest.mark.parametrize("target", range(4))
async def test_tournament_finds_any_preferred_position(target):
    keys = parse(CANDIDATES[target]).commands[0].keystrokes.strip()
    reply, _, _ = await run_step(prefer(keys, CANDIDATES), {"n": 4, "verifier": "tournament", "pivots": 4})
    assert executed(reply) == [keys + "\n"]
    rec = reply.extra["midharness"]
    assert rec["calls"] == expected_calls("tournament", 4, rec)
    stages = [v["stage"] for v in rec["verdicts"]]
    assert stages.count("ring") == 4


async def test_tournament_n8_stays_within_ring_plus_pivots():
    samples = [action(f"echo {i}\n") for i in range(8)]
    reply, _requests, _ = await run_step(prefer("echo 5", samples), {"n": 8, "verifier": "tournament"})
    rec = reply.extra["midharness"]
    assert executed(reply) == ["echo 5\n"]
    assert len(rec["pivots"]) == 4 and rec["calls"] <= 8 + 16
    assert rec["calls"] == expected_calls("tournament", 8, rec)
    ring_verdicts = [v for v in rec["verdicts"] if v["stage"] == "ring"]
    assert sorted(v["a"] for v in ring_verdicts) == list(range(8))  # each candidate once as A ...
    assert sorted(v["b"] for v in ring_verdicts) == list(range(8))  # ... and once as B
    pairs = [frozenset((v["a"], v["b"])) for v in rec["verdicts"]]
    assert len(pairs) == len(set(pairs))  # no pair compared twice


# -- N = 1 is the base agent --------------------------------------------------------------------------------


async def test_n1_makes_exactly_the_base_agents_requests():
    script = [action("ls\n"), action("pwd\n")]
    with ScriptedServer(list(script)) as srv:
        async with client_for(srv) as client:
            base = [await Caller(client).call(HISTORY) for _ in range(2)]
        base_requests = list(srv.requests)
    cost = CostLedger()
    with ScriptedServer(list(script)) as srv:
        async with client_for(srv) as client:
            actor = build_actor(
                {"n": 1, "verifier": "tournament"}, Caller(client), client, INSTRUCTION, parse, cost
            )
            assert isinstance(actor, PassthroughActor)
            mine = [await actor.act(HISTORY) for _ in range(2)]
        assert srv.requests == base_requests
    assert [r.text for r in mine] == [r.text for r in base]
    assert "midharness" not in mine[0].extra
    assert cost.verifier.calls == 0 and cost.parallel_output_tokens == 0  # the caller books N=1 POT itself


# -- merging, unparseable candidates, ties ------------------------------------------------------------------


async def test_identical_candidates_are_merged_and_count_breaks_ties():
    samples = [
        action("echo two\n"),
        action("echo one\n"),
        action("echo one\n"),
        action("echo two\n", secret="x"),
    ]
    samples[3] = action("echo one\n")  # one: 3 samples, two: 1 sample
    always_a = lambda body: "A" if is_verifier(body) else list(samples)
    reply, _requests, _ = await run_step(always_a, {"n": 4, "verifier": "pairwise"})
    rec = reply.extra["midharness"]
    assert rec["unique"] == 2 and [c["count"] for c in rec["candidates"]] == [1, 3]
    assert rec["calls"] == 1
    # One duel, A wins it; with hard verdicts the loser scores 0 — so make a tie with an unreadable verdict:
    maybe = {"content": "maybe", "logprobs": [{"token": "maybe", "logprob": -0.1, "top_logprobs": []}]}
    unreadable = lambda body: maybe if is_verifier(body) else list(samples)
    reply, _, _ = await run_step(unreadable, {"n": 4, "verifier": "pairwise"})
    rec = reply.extra["midharness"]
    assert rec["verdicts"][0]["verdict"] is None
    assert executed(reply) == ["echo one\n"]  # tie on score → more merged samples wins


async def test_unparseable_candidates_lose_and_are_never_judged():
    samples = [
        "not json at all",
        action("echo fine\n"),
        {"content": action("echo cut\n"), "finish_reason": "length"},
        "{broken",
    ]
    reply, requests, _ = await run_step(prefer("nothing matches", samples), {"n": 4, "verifier": "pairwise"})
    rec = reply.extra["midharness"]
    assert rec["unique"] == 4 and rec["valid"] == 1 and rec["calls"] == 0
    assert len(requests) == 1 and executed(reply) == ["echo fine\n"]


async def test_all_identical_needs_no_verifier():
    reply, requests, _ = await run_step(prefer("x", [action("ls\n")] * 4), {"n": 4, "verifier": "listwise"})
    assert len(requests) == 1 and reply.extra["midharness"]["calls"] == 0


# -- what the verifier sees --------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["listwise", "pointwise", "pairwise"])
async def test_verifier_never_sees_generator_reasoning(mechanism):
    _, requests, _ = await run_step(prefer(PREFERRED, CANDIDATES), {"n": 4, "verifier": mechanism})
    for body in requests:
        if not is_verifier(body):
            continue
        text = json.dumps(body)
        assert "SECRET_REASONING" not in text and "SECRET_PLAN" not in text
        assert "system prompt of the generator" not in text and "Reply in JSON" not in text
        prompt = body["messages"][0]["content"]
        assert INSTRUCTION in prompt and '"ls\\n"' in prompt and "root@box:/app# ls" in prompt


# -- request shapes: decision-only, constrained choice, grammar, reasoning, verifier model ------------------


async def test_decision_only_request_shape_with_choice_and_logprob_margin():
    def respond(body):
        if not is_verifier(body):
            return CANDIDATES[:2]
        return {
            "content": "B",
            "logprobs": [
                {
                    "token": "B",
                    "logprob": -0.2231,
                    "top_logprobs": [{"token": "B", "logprob": -0.2231}, {"token": "A", "logprob": -1.6094}],
                }
            ],
        }

    reply, requests, _ = await run_step(respond, {"n": 2, "verifier": "pairwise"}, supports_choice=True)
    body = next(b for b in requests if is_verifier(b))
    assert body["max_tokens"] == 1 and body["logprobs"] is True and body["top_logprobs"] == 5
    assert body["structured_outputs"] == {"choice": ["A", "B"]}
    verdict = reply.extra["midharness"]["verdicts"][0]
    assert verdict["verdict"] == "B" and verdict["p_a"] == pytest.approx(0.2, abs=1e-3)
    assert verdict["margin"] == pytest.approx(0.6, abs=1e-3)
    scores = reply.extra["midharness"]["scores"]
    assert scores[str(verdict["b"])] == pytest.approx(0.8, abs=1e-3)


async def test_grammar_constraint_and_verifier_model():
    reply, requests, _ = await run_step(
        prefer(PREFERRED, CANDIDATES[1:3]),
        {"n": 2, "verifier": "pairwise", "constraint": "grammar", "verifier_model": "verifier-lora"},
    )
    gen, ver = requests
    assert gen["model"] == "scripted" and ver["model"] == "verifier-lora"
    assert ver["grammar"] == 'root ::= "A" | "B"' and "structured_outputs" not in ver
    assert reply.extra["midharness"]["verifier_model"] == "verifier-lora"


@pytest.mark.parametrize("flavor,expected", [("vllm", "structured_outputs"), ("llamacpp", "grammar")])
async def test_auto_constraint_follows_the_server_kind(flavor, expected):
    cost = CostLedger()
    with ScriptedServer(prefer(PREFERRED, CANDIDATES), flavor=flavor) as srv:
        async with client_for(srv) as client:
            actor = build_actor({"n": 4, "verifier": "listwise"}, Caller(client), client, INSTRUCTION, parse, cost)
            reply = await actor.act(HISTORY)
        ver = next(b for b in srv.requests if is_verifier(b))
    assert expected in ver and ver["max_tokens"] == 1 and executed(reply) == [PREFERRED + "\n"]
    if flavor == "llamacpp":
        assert ver["grammar"] == 'root ::= "1" | "2" | "3" | "4"'
    else:
        assert ver["structured_outputs"] == {"choice": ["1", "2", "3", "4"]}


async def test_constraint_none_sends_free_text_requests():
    settings = {"n": 4, "verifier": "listwise", "constraint": "none"}
    _, requests, _ = await run_step(prefer(PREFERRED, CANDIDATES), settings)
    ver = next(b for b in requests if is_verifier(b))
    assert "structured_outputs" not in ver and "grammar" not in ver and ver["max_tokens"] == 1


@pytest.mark.parametrize(
    "mechanism,answer", [("pairwise", None), ("listwise", "BEST: 3"), ("pointwise", None)]
)
async def test_reasoning_verdicts_parse_final_line(mechanism, answer):
    base = prefer(PREFERRED, CANDIDATES)

    def respond(body):
        out = base(body)
        if not is_verifier(body):
            return out
        final = {"pairwise": "VERDICT", "listwise": "BEST", "pointwise": "SCORE"}[mechanism]
        return f"Let me think. A says one thing, B another; 1 and 2 look weak.\n{final}: {out}"

    reply, requests, _ = await run_step(respond, {"n": 4, "verifier": mechanism, "decision_only": False})
    ver = next(b for b in requests if is_verifier(b))
    assert "logprobs" not in ver and ver["max_tokens"] == 1024
    assert (
        "VERDICT:" in ver["messages"][0]["content"]
        or "BEST:" in ver["messages"][0]["content"]
        or "SCORE:" in ver["messages"][0]["content"]
    )
    assert executed(reply) == [PREFERRED + "\n"]


# -- failures and cost -------------------------------------------------------------------------------------


async def test_verifier_context_overflow_is_recorded_other_errors_propagate():
    def overflow(body):
        return ScriptedError.context_length_vllm() if is_verifier(body) else CANDIDATES[:2]

    reply, _, _ = await run_step(overflow, {"n": 2, "verifier": "pairwise"})
    rec = reply.extra["midharness"]
    assert rec["verdicts"][0]["error"].startswith("ContextLengthExceeded") and executed(reply) == [
        "echo one\n"
    ]

    def broken(body):
        return ScriptedError(400, "bad request: unknown field") if is_verifier(body) else CANDIDATES

    with pytest.raises(Exception, match="unknown field"):
        await run_step(broken, {"n": 4, "verifier": "tournament"})


async def test_cost_ledger_pot_and_verifier_usage():
    samples = [action("a" * 40 + "\n"), action("echo b\n"), action("echo c\n"), action("echo d\n")]
    reply, _requests, cost = await run_step(
        prefer("echo c", samples), {"n": 4, "verifier": "tournament", "pivots": 2}
    )
    rec = reply.extra["midharness"]
    longest = max((len(s) + 3) // 4 for s in samples)
    stages = 1 + any(v["stage"] == "pivot" for v in rec["verdicts"])
    assert rec["pot"] == longest + stages * 1  # each one-letter verdict is 1 token on the fake
    assert cost.parallel_output_tokens == rec["pot"]
    assert cost.verifier.input_tokens == rec["verifier_tokens"]["input"] > 0
    assert cost.generator.calls == 0  # the caller owns generator accounting


def test_build_actor_validates_settings():
    with pytest.raises(Exception, match="verifier"):
        build_actor({"n": 4, "verifier": "best"}, None, object(), INSTRUCTION, parse, None)
    with pytest.raises(Exception, match="extra"):
        build_actor({"n": 4, "pivot": 3}, None, object(), INSTRUCTION, parse, None)
    assert isinstance(build_actor({"n": 2}, None, object(), INSTRUCTION, parse, None), MidHarnessActor)


# -- with the harness's own model caller and JSON parser --------------------------------------------------


async def test_with_the_harness_model_caller_and_parser():
    from harness_seed import model_call, parsing
    from harness_seed.settings import load_settings

    settings = load_settings()

    def parse_json(text: str):
        return parsing.parse_response(text, "json")

    cost = CostLedger()
    with ScriptedServer(prefer(PREFERRED, CANDIDATES)) as srv:
        async with client_for(srv) as client:
            caller = model_call.ModelCaller(client, settings.model, cost)
            mid = dict(settings.midharness, n=4, verifier="tournament")
            actor = build_actor(mid, caller, None, INSTRUCTION, parse_json, cost)  # None: the caller's client
            reply = await actor.act(HISTORY)
        requests = list(srv.requests)
    rec = reply.extra["midharness"]
    assert isinstance(reply, model_call.ModelReply) and rec["choice_sample"] == 2
    assert [c.keystrokes for c in parse_json(reply.text).commands] == [PREFERRED + "\n"]
    assert rec["calls"] == expected_calls("tournament", 4, rec) == len(requests) - 1
    assert cost.generator.calls == 1 and cost.verifier.calls == rec["calls"]
    stages = 1 + any(v["stage"] == "pivot" for v in rec["verdicts"])
    shares = [c["output_tokens"][0] for c in rec["candidates"]]
    assert cost.parallel_output_tokens == rec["pot"] == max(shares) + stages


async def test_history_is_cut_to_fit_the_verifier_context():
    long_obs = "New Terminal Output:\n" + "line of output\n" * 3000  # ~45,000 characters
    history = [*HISTORY, {"role": "assistant", "content": action("cat big\n")}, {"role": "user", "content": long_obs}]
    cost = CostLedger()
    with ScriptedServer(prefer(PREFERRED, CANDIDATES), context_limit=2048) as srv:
        async with client_for(srv) as client:
            actor = build_actor({"n": 4, "verifier": "pairwise"}, Caller(client), client, INSTRUCTION, parse, cost)
            reply = await actor.act(history)
        prompts = [b["messages"][0]["content"] for b in srv.requests if is_verifier(b)]
    assert executed(reply) == [PREFERRED + "\n"]
    assert max(len(p) for p in prompts) < 2048 * 3  # fits: the fake counts ~4 characters per token
    assert "characters omitted" in prompts[0]
