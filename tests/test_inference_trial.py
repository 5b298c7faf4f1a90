"""Inference timings and machine load in a real trial of the seed harness: a llama.cpp-flavoured scripted
server over real HTTP, monitor.host, the local bwrap sandbox with real tmux, the real runner. The server's
``timings`` land in every model call's span, in the rich trajectory's steps, in result.json's summary (with
the machine's load), and ``rise trace time`` shows them for the trial and for its job."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from monitor.inference import model_calls, summary_of
from monitor.store import TrialTrace
from rise.cli import app
from tests.fakes.openai_server import ScriptedServer
from tests.test_harbor_diff_support import HARBOR_VENV_GROUP, atif_errors, harbor_python
from tests.test_monitor_seed_trial import DONE, REPO, SOLVE, SOLVE_ECHO, Model, _parts_missing
from tests.test_trajectory_atif import atif_problems
from trials.endpoints.spec import EndpointSpec
from trials.results import TrialResult

pytestmark = [pytest.mark.tmux, pytest.mark.sandbox, pytest.mark.xdist_group(HARBOR_VENV_GROUP)]


def _trial(tmp_path: Path, model: Model, settings: dict) -> tuple[TrialResult, Path]:
    from monitor.agents import resolve_agent
    from trials.runner import run_trial
    from trials.tasks.load import load_task

    task = load_task(REPO / "data" / "starter" / "hello-file")
    trial_dir = tmp_path / "job" / "hello-file__r1"
    with ScriptedServer(model, model="scripted-model", flavor="llamacpp", delay=0.05) as srv:
        endpoint = EndpointSpec(base_url=srv.base_url, model="scripted-model")
        res = asyncio.run(run_trial(task, resolve_agent("seed"), endpoint, trial_dir, "local", None,
                                    settings=settings))
    return res, trial_dir


def test_timings_reach_spans_trajectory_and_result(tmp_path):
    if (why := _parts_missing()):
        pytest.skip(why)
    # Mid-Harness with two candidates and a pairwise verifier: sampled calls and verifier calls both recorded
    res, trial = _trial(tmp_path, Model([[SOLVE, SOLVE_ECHO], [DONE, DONE]], candidates=2),
                        {"midharness.n": 2})
    assert res.status == "passed", res.model_dump_json(indent=1)

    trace = TrialTrace.load(trial)
    calls = model_calls(trace)
    boundaries = {span.boundary for span, _ in calls}
    assert {"model_call:ModelCaller.sample", "midharness.verifiers:VerifierCalls.ask"} <= boundaries
    genai = [s for s in trace.spans if s.is_genai and not s.is_error]
    assert len(calls) == len(genai), "a successful model call without timings in its span"
    for span, t in calls:
        assert t.source == "llamacpp" and t.prompt_ms is not None and t.predicted_ms is not None
        assert t.wall_ms >= 50.0 and t.queue_ms is not None and t.queue_ms >= 0
        assert span.attributes["rise.inference.prompt_n"] + span.attributes["rise.inference.cache_n"] > 0
    assert any(t.cache_n for _, t in calls), "no call found its prompt prefix in the slot's cache"

    # the rich trajectory: each agent step's metrics hold its call's timings and cached tokens
    rich = json.loads((trial / "agent" / "trajectory.rich.json").read_text())
    steps = [s for s in rich["steps"] if s["source"] == "agent"]
    assert steps and all(s["metrics"]["inference"]["source"] == "llamacpp" for s in steps)
    assert all(s["metrics"]["cached_tokens"] == s["metrics"]["inference"]["cache_n"] for s in steps)
    verdicts = steps[0]["extra"]["midharness"]
    assert "inference" in json.dumps(verdicts), "the verifier calls' timings are not in the step"
    final = rich["final_metrics"]
    assert final["extra"]["inference"]["calls"] >= 2 and final["total_cached_tokens"] is not None
    # the strict ATIF file keeps them under metrics.extra (an ATIF field for free-form data)
    atif = json.loads((trial / "agent" / "trajectory.json").read_text())
    agent = [s for s in atif["steps"] if s["source"] == "agent"]
    assert agent[0]["metrics"]["extra"]["inference"]["source"] == "llamacpp"
    assert "inference" not in agent[0]["metrics"] and isinstance(agent[0]["metrics"]["cached_tokens"], int)
    assert atif_problems(atif) == []
    path = trial / "agent" / "trajectory.json"  # and Harbor's own ATIF model accepts it
    assert atif_errors(harbor_python(), path) == {str(path): []}

    # result.json: the monitor's sum equals the spans' sum; the machine's load is recorded
    stored = TrialResult.load(trial / "result.json")
    assert stored.inference is not None
    assert stored.inference.calls == len(calls) == summary_of(trace).calls
    assert stored.inference.prefill_sec == pytest.approx(summary_of(trace).prefill_sec, abs=1e-3)
    assert stored.inference.cache_hit_ratio is not None and stored.inference.decode_tok_s
    load = stored.machine_load
    assert load is not None and load.cpus and len(load.loadavg_start) == 3 and len(load.loadavg_end) == 3
    assert load.busy is not None and 0 < load.busy <= 1 and load.steal is not None  # Linux counts steal

    # rise trace time: the trial (its split and its calls) and the job (per trial and the grid)
    runner = CliRunner()
    out = runner.invoke(app, ["trace", "time", str(trial)])
    assert out.exit_code == 0, out.output
    assert "prefill" in out.output and "prompt cache hits" in out.output and "machine load" in out.output
    assert "VerifierCalls.ask" in out.output
    shown = runner.invoke(app, ["trace", "show", str(trial)])  # each step's head: its call's split
    assert shown.exit_code == 0 and re.search(r"episode 0 .*model [\d.]+ s \(prefill [\d.]+ s, decode", shown.output)
    from monitor.agents import resolve_agent
    from trials.results import JobConfig

    JobConfig(job_id="j", tasks_dir=str(REPO / "data" / "starter"), task_names=["hello-file"],
              agent=resolve_agent("seed")).write(trial.parent / "config.json")
    out = runner.invoke(app, ["trace", "time", str(trial.parent)])
    assert out.exit_code == 0, out.output
    assert "hello-file__r1" in out.output and "grid (1 trials)" in out.output
