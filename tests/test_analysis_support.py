"""Builders of crafted trial folders for the analysis tests: a trajectory.json in the seed's ATIF shape, spans
in the monitor's OTLP-JSON lines, result.json and trial_spec.json. Each helper writes what the real harness
writes (same keys and nesting), so detectors read crafted and real folders through the same code."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from monitor.export import REQUEST_SUFFIX, STATUS_ERROR, SpanData, encode_span, request_prefix

PROMPT = "root@sandbox:/app# "
_ids = itertools.count(0x1000)


class CraftedTrial:
    """One trial folder, built episode by episode. ``write()`` puts it on disk and returns the folder."""

    def __init__(self, root: Path, task: str = "demo", rep: int = 1, status: str = "failed",
                 instruction: str = "Create /app/x.txt.", outcome: str = "completed"):
        self.folder = root / f"{task}__r{rep}"
        self.task, self.rep, self.status, self.instruction, self.outcome = task, rep, status, instruction, outcome
        self.trial_id = f"job/{task}__r{rep}"
        self.steps: list[dict[str, Any]] = [{"step_id": 1, "trial_id": self.trial_id, "episode": None,
                                             "source": "user", "message": "task prompt"}]
        self.spans: list[SpanData] = []
        self.requests: list[dict[str, Any]] = []
        self.files: dict[str, Any] = {}
        self.clock = 1_000_000_000

    def episode(self, commands: list[tuple[str, float]] = (), *, claim: bool = False, observation: str | None = "",
                **extra: Any) -> int:
        """Add one agent step; ``observation`` is the terminal text shown next (wrapped like the seed does)."""
        ep = len(self.steps) - 1
        calls = [{"tool_call_id": f"call_{ep}_{i}", "function_name": "bash_command",
                  "arguments": {"keystrokes": k, "duration": d}} for i, (k, d) in enumerate(commands, 1)]
        if claim:
            calls.append({"tool_call_id": f"call_{ep}_complete", "function_name": "mark_task_complete",
                          "arguments": {}})
        step_extra = {"parse_error": None, "warnings": [], "finish_reason": "stop", "timed_out": False,
                      "timings": {"model_sec": 1.0, "exec_sec": sum(d for _, d in commands)}, **extra}
        obs = None if observation is None else {"results": [{"content": observation}]}
        self.steps.append({"step_id": len(self.steps) + 1, "trial_id": self.trial_id, "episode": ep,
                           "source": "agent", "message": "{}", "tool_calls": calls, "observation": obs,
                           "extra": step_extra})
        step = self.span("loop:Agent.step", ep)
        self.span("parsing:parse_response", ep, parent=step)
        for keys, _ in commands:
            self.span("tmux:TmuxSession.send_keys", ep, parent=step, args={"keys": keys})
        self.span("observation:limit_output", ep, parent=step, result=observation or "")
        self.span("completion:CompletionHandshake.on_reply", ep, parent=step)
        return ep

    def span(self, boundary: str, episode: int | None, *, parent: SpanData | None = None,
             args: dict[str, str] | None = None, result: str | None = None,
             error: tuple[str, str] | None = None) -> SpanData:
        self.clock += 1000
        attrs: dict[str, Any] = {"rise.boundary": boundary, "rise.trial_id": self.trial_id,
                                 "code.function.name": "harness." + boundary.replace(":", ".")}
        if episode is not None:
            attrs["rise.episode"] = episode
        if args is not None:
            attrs["rise.args"] = json.dumps(args)
        if result is not None:
            attrs["rise.return"] = result
        s = SpanData(trace_id=1, span_id=next(_ids), parent_id=parent.span_id if parent else None, name=boundary,
                     start_ns=self.clock, end_ns=self.clock + 500, attributes=attrs)
        if error is not None:
            s.status_code = STATUS_ERROR
            s.events.append((self.clock, "exception", {"exception.type": error[0], "exception.message": error[1]}))
        self.spans.append(s)
        return s

    def write(self, spans: bool = True) -> Path:
        agent = self.folder / "agent"
        agent.mkdir(parents=True, exist_ok=True)
        doc = {"schema_version": "ATIF-v1.4", "trial_id": self.trial_id,
               "agent": {"name": "terminus-2", "extra": {"format": "json"}}, "steps": self.steps,
               "final_metrics": {"extra": {"status": self.outcome, "requests": self.requests}}}
        (agent / "trajectory.json").write_text(json.dumps(doc))
        (agent / "trial_spec.json").write_text(json.dumps({"task_name": self.task, "instruction": self.instruction}))
        (self.folder / "result.json").write_text(json.dumps({
            "trial_name": self.folder.name, "task_name": self.task, "repetition": self.rep, "status": self.status,
            "run_id": "r", "agent_status": self.outcome}))
        if spans:
            prefix = request_prefix({"rise.trial_id": self.trial_id})
            (agent / "spans.jsonl").write_text("".join(prefix + encode_span(s) + REQUEST_SUFFIX
                                                       for s in self.spans))
        for name, content in self.files.items():
            (agent / name).write_text(json.dumps(content))
        return self.folder


def screen(*lines: str) -> str:
    """An observation as the seed writes it (incremental output)."""
    return "New Terminal Output:\n" + "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------- role test double
class ScriptedBackend:
    """A Backend (the runtime's protocol) that answers each role call from ``answer(role, prompt, job)`` and
    records every call; the runtime around it (prompt rendering, validation, transcripts, budget) is the real
    one. ``use_digest`` makes each analyst call use the digest tool first, as a model would."""

    name = "scripted"

    def __init__(self, answer, *, use_digest: bool = True, price_per_mtok: float = 1.0,
                 count_file: Path | None = None):
        from trials.endpoints.spec import PriceTable

        self.answer, self.use_digest, self.count_file = answer, use_digest, count_file
        self.price = PriceTable(input_per_mtok=price_per_mtok, output_per_mtok=price_per_mtok)
        self.calls: list[tuple[str, str]] = []

    async def run(self, job):
        from evolve.roles.runtime import BackendReply, Usage
        from evolve.roles.runtime.tools import invoke

        self.calls.append((job.role.name, job.prompt))
        if self.count_file is not None:
            with self.count_file.open("a") as fh:
                fh.write(job.role.name + "\n")
        if self.use_digest and job.role.name == "analyst":
            trial = next(t for t in job.tools if t.name == "digest")
            path = job.prompt.split("Detector digest of the failed run (", 1)[1].split(")", 1)[0]
            await invoke(trial, job.ctx, {"trial": path})
        output = job.role.output.model_validate(self.answer(job.role.name, job.prompt, job))
        return BackendReply(output=output, usage=Usage(input_tokens=len(job.prompt) // 4, output_tokens=50,
                                                       requests=1))


def finding_answer(success: str, failure: str, episode: int = 0, *, step: int | None = None,
                   span: str | None = None, behaviour: str = "completion.handshake") -> dict:
    """A well-formed analyst answer citing ``failure`` at ``episode`` (and ``step``/``span`` when given)."""
    ref = {"trial": failure, "episode": episode, "step": step, "span": span}
    return {
        "differences": [{"description": "the failed run claimed completion without checking the file",
                         "behaviours": [behaviour] if behaviour else [], "evidence": [ref]}],
        "wish": {"action": "check the output before accepting a claim", "condition": "a claim after no check"},
        "information_available": {"answer": True, "explanation": "the screen showed the file was missing",
                                  "evidence": [ref]},
        "mechanism_existed": {"answer": False, "explanation": "the handshake only asks again",
                              "evidence": [{"trial": success, "episode": 0}]},
        "revised_wish": {"action": "run the named check before confirming", "condition": "a first claim"},
        "evidence": [ref],
    }


def make_experiment(tmp_path: Path, grid: dict[str, str], name: str = "exp",
                    base_url: str = "http://127.0.0.1:9/v1"):
    """An experiment (real store: git harness repo tagged v0) whose v0 reference corpus is crafted from ``grid``
    (task -> p/f/i per rep). Passed runs check their work; failed ones claim at once."""
    from evolve.experiment.config import ExperimentConfig, TaskSplit
    from evolve.experiment.store import init_experiment
    from trials.endpoints.spec import EndpointSpec

    cfg = ExperimentConfig(name=name, endpoint=EndpointSpec(base_url=base_url, model="m"),
                           tasks=TaskSplit(dir="data/starter"), r=max(len(c) for c in grid.values()))
    exp = init_experiment(name, cfg, runs_dir=tmp_path)
    ref = exp.root / "versions" / "v0" / "reference"
    status = {"p": "passed", "f": "failed", "i": "infra"}
    for task, cells in grid.items():
        for rep, c in enumerate(cells, 1):
            t = CraftedTrial(ref, task=task, rep=rep, status=status[c],
                             instruction=f"Create `/app/{task}.txt`, then run `python3 /app/check.py {task}`.")
            if c == "p":
                t.episode([(f"echo ok > /app/{task}.txt\n", 0.1)], observation=screen(PROMPT + "echo ok", PROMPT))
                t.episode([(f"python3 /app/check.py {task}\n", 0.5)], observation=screen(PROMPT + "python3", "OK", PROMPT))
                t.episode([], claim=True, observation=None)
            else:
                t.episode([(f"echo ok > /app/{task}", 0.1)], observation=screen(PROMPT + f"echo ok > /app/{task}"))
                t.episode([], claim=True, observation=None)
            t.write()
    return exp
