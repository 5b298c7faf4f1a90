"""The harness process: read the trial spec, run the agent, and always leave an outcome behind.

``main(["--spec", PATH])`` attaches to the sandbox named in the spec, builds the model client from its
endpoint, runs :class:`loop.Agent`, and writes ``agent_result.json`` (an ``AgentOutcome``) and the final
trajectories (``trajectory.rich.json``; ``trajectory.json``, strict ATIF) into ``spec.agent_dir`` whatever
happens: ``model_unreachable`` when the model server could not be reached after the retries (the runner scores
that ⊥), the cause of any other infrastructure error (``sandbox``...), ``agent_timeout`` past the spec's
timeout, ``terminated`` on SIGTERM, and ``crash`` with the traceback for anything else.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import traceback
from pathlib import Path

import trials.harness_api as api

from . import loop
from .settings import load_settings

log = logging.getLogger(__name__)

# run() status -> (AgentOutcome.status, error_kind, error). A session the agent ended is its own outcome: the
# runner runs the verifier (error_kind is not an infrastructure cause).
_STATUS = {"completed": ("completed", None, None), "max_episodes": ("max_episodes", None, None),
           "session_ended": ("error", "session_ended", "session ended by the agent")}


def _setup_logging(agent_dir: Path) -> None:
    handler = logging.FileHandler(agent_dir / "harness.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    for noisy in ("httpx", "httpx2", "httpcore", "openai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def error_kind(exc: BaseException) -> str:
    """How the runner should read an exception that ended the run."""
    if isinstance(exc, TimeoutError):
        return "agent_timeout"
    if isinstance(exc, asyncio.CancelledError):
        return "terminated"
    cause = getattr(exc, "cause", None)
    if isinstance(cause, str) and cause:  # InfraError family, ServerUnreachable, TmuxError
        return cause
    return "crash"


async def run_trial(spec: api.TrialSpec) -> api.AgentOutcome:
    """Run the agent for ``spec``; the outcome is returned, and written with the trajectory."""
    agent_dir = Path(spec.agent_dir)
    api.TRIAL_ID.set(spec.trial_id)
    outcome = api.AgentOutcome(status="error", error_kind="crash")
    agent: loop.Agent | None = None
    clients: list = []
    status: str | None = None
    try:
        settings = load_settings(spec.settings)
        env = api.attach_environment(spec.env)
        client = api.ModelClient(spec.endpoint)
        clients.append(client)
        verifier = api.ModelClient(spec.verifier_endpoint) if spec.verifier_endpoint else None
        if verifier is not None:
            clients.append(verifier)
        agent = loop.Agent(instruction=spec.instruction, settings=settings, env=env, client=client,
                           verifier_client=verifier, agent_dir=agent_dir, trial_id=spec.trial_id,
                           model_name=spec.endpoint.model, refine_context=spec.refine_context,
                           harness_version=spec.harness_version)
        status = await asyncio.wait_for(agent.run(), timeout=spec.timeout_sec)
        outcome.status, outcome.error_kind, outcome.error = _STATUS[status]
    except (Exception, asyncio.CancelledError) as exc:  # noqa: BLE001 (every end must leave an outcome)
        outcome.error_kind = error_kind(exc)
        outcome.error = "".join(traceback.format_exception(exc))[-8000:]
        status = outcome.error_kind
        log.error("run ended by %s: %s", outcome.error_kind, exc)
    finally:
        if agent is not None:
            outcome.episodes = agent.episodes
            outcome.cost = agent.cost
            outcome.metadata = {"summarizations": agent.context.summarizations,
                                "model_requests": len(agent.caller.request_log),
                                "model_request_sec": [round(r["sec"], 3) for r in agent.caller.request_log],
                                "trajectory": settings.trajectory.file,
                                "atif_trajectory": settings.trajectory.atif_file}
            try:
                outcome.cost.price(spec.endpoint.price, spec.verifier_endpoint.price if spec.verifier_endpoint
                                   else None)
                await agent.close(status, outcome.error)
            except Exception as exc:  # noqa: BLE001 (the outcome below must still be written)
                log.error("could not finish the trajectory: %s", exc)
        for c in clients:
            try:
                await c.aclose()
            except Exception as exc:  # noqa: BLE001
                log.debug("closing a model client failed: %s", exc)
        outcome.write(agent_dir)
    return outcome


async def _main(spec: api.TrialSpec) -> int:
    task = asyncio.current_task()
    loop_ = asyncio.get_running_loop()
    if task is not None:
        try:  # SIGTERM from the runner: stop cleanly so the outcome and trajectory get written
            loop_.add_signal_handler(signal.SIGTERM, task.cancel)
        except (NotImplementedError, RuntimeError):
            pass
    try:
        outcome = await run_trial(spec)
    except asyncio.CancelledError:
        return 1
    return 0 if outcome.status != "error" else 1


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``--spec trial_spec.json``; exit code 0 unless the run ended in an error."""
    parser = argparse.ArgumentParser(prog="harness", description="Run the Terminus-2 seed harness on one trial")
    parser.add_argument("--spec", required=True, help="path of the trial's trial_spec.json")
    args = parser.parse_args(argv)
    spec = api.TrialSpec.load(args.spec)
    agent_dir = Path(spec.agent_dir)
    agent_dir.mkdir(parents=True, exist_ok=True)
    _setup_logging(agent_dir)
    return asyncio.run(_main(spec))
