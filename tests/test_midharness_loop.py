"""Mid-Harness inside the seed agent loop: real HTTP (ScriptedServer) and a real tmux on the host.

A scripted verifier that prefers one of four candidate actions makes exactly that one run in the terminal;
the step's record lands in the trajectory, and `rise midharness export` reads it back.
"""

from __future__ import annotations

import json

import pytest

from harness_seed.midharness.export import examples_from_trajectory
from tests.test_midharness_actor import is_verifier, prefer
from tests.test_seed_support import HAVE_TMUX, reply, run_agent

pytestmark = [pytest.mark.tmux, pytest.mark.skipif(not HAVE_TMUX, reason="tmux is not installed")]

DONE = reply(analysis="done", plan="finish", complete=True)
CANDIDATES = [reply(analysis=f"SECRET {i}", commands=[(f"touch cand_{i}.txt\n", 0.1)]) for i in range(4)]


def responder(preferred: str):
    judge = prefer(preferred, CANDIDATES)
    generator_calls = []

    def respond(body: dict):
        if is_verifier(body):
            return judge(body)
        generator_calls.append(body)
        return list(CANDIDATES) if len(generator_calls) == 1 else DONE  # DONE is copied to every choice

    return respond


@pytest.mark.parametrize("mechanism", ["listwise", "pointwise", "pairwise", "tournament"])
async def test_preferred_candidate_is_the_only_one_executed(tmp_path, mechanism):
    agent, srv, status = await run_agent(responder("touch cand_2.txt"), tmp_path,
                                         **{"midharness.n": 4, "midharness.verifier": mechanism})
    assert status == "completed"
    host = tmp_path / "host"
    assert sorted(p.name for p in host.glob("cand_*.txt")) == ["cand_2.txt"]
    data = json.loads(agent.trajectory.path.read_text())
    steps = [s for s in data["steps"] if s["source"] == "agent"]
    rec = steps[0]["extra"]["midharness"]
    assert rec["choice"] == 2 and rec["unique"] == 4 and rec["verifier"] == mechanism
    assert steps[0]["tool_calls"][0]["arguments"]["keystrokes"] == "touch cand_2.txt\n"
    assert steps[1]["extra"]["midharness"]["calls"] == 0  # four identical DONE replies: merged, no verifier
    generator = [b for b in srv.requests if not is_verifier(b)]
    assert all(b["n"] == 4 and b["temperature"] == 0.8 for b in generator)
    assert data["final_metrics"]["extra"]["cost"]["verifier"]["calls"] == rec["calls"]
    verifier_text = json.dumps([b for b in srv.requests if is_verifier(b)])
    assert "SECRET" not in verifier_text
    rows = list(examples_from_trajectory(agent.trajectory.path))
    expected = rec["calls"] if mechanism in ("pairwise", "tournament") else 0
    assert len(rows) == expected and all(r.verdict in ("A", "B") and "SECRET" not in r.prompt for r in rows)


async def test_n1_loop_makes_the_base_agents_requests(tmp_path):
    script = [reply(commands=[("echo hi\n", 0.1)]), DONE, DONE]
    _, base, _ = await run_agent(list(script), tmp_path / "a")
    _, mine, _ = await run_agent(list(script), tmp_path / "b", **{"midharness.n": 1,
                                                                  "midharness.verifier": "tournament"})
    assert [b["messages"] for b in mine.requests] == [b["messages"] for b in base.requests]
    assert [{k: v for k, v in b.items() if k != "messages"} for b in mine.requests] == \
        [{k: v for k, v in b.items() if k != "messages"} for b in base.requests]
