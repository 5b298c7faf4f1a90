"""One trial: sandbox up → agent in its own process group → tests → reward → ``result.json``.

The agent starts through :mod:`trials.launch`: a launcher that has imported the platform and library modules
already (made while the sandbox starts, or by the previous trial of the slot), one process per trial. A sandbox
that can (docker) starts the harness's tmux session as it starts, when the harness's settings ask for that
(:mod:`trials.terminal`); the harness adopts it.

Outcome rules (the runner never raises for a bad task; everything lands in ``result.json``):
- ⊥ (``infra``): the sandbox could not start (``image_build``, ``sandbox``...), the task cannot run in this
  environment (``unsupported_task``), the harness reported ``model_unreachable``, the sandbox failed while
  verifying, or the runner itself hit an unexpected exception (``runner_error``, traceback kept).
- Otherwise the verifier always runs (also after an agent timeout or error: the tests decide what the agent
  left behind, as in Harbor). ``passed`` iff the reward is 1.0. A trial that is not passed is ``failed`` with
  the first cause in this order: ``agent_timeout``, ``agent_error``, ``verifier_timeout``, ``verifier_error``
  (no or unreadable reward), ``task_failure``.
- Reward: read only from what the tests wrote during their own run (trials/environments/verifier.py: the
  folder is emptied first, and where the sandbox allows, the tests see a private ``/logs/verifier``; what the
  agent wrote there is recorded in ``verifier.planted``, never read). ``reward.json`` wins over ``reward.txt``. JSON may be a number, or an object: its
  ``reward`` key when present, else the mean of its numeric values. ``reward.txt`` holds one float. A task
  with ``legacy_exit_code`` and no reward file scores 1.0 iff ``test.sh`` exited 0.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import logging
import os
import signal
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import confine, launch, terminal
from .agents import AgentSpec, cache_root
from .channel import serving
from .endpoints.spec import EndpointSpec
from .environments.base import Environment
from .environments.verifier import VerifierRun, run_verifier
from .errors import InfraError, TaskError
from .harness_api import AgentOutcome, TrialSpec, write_json_atomic
from .load import LoadProbe
from .results import TrialResult, read_inference, read_lost_spans

log = logging.getLogger(__name__)

KILL_GRACE_SEC = 5.0
STOP_TIMEOUT_SEC = 60.0
# Oracle trials get a placeholder endpoint: TrialSpec requires one, the oracle never calls it.
NO_ENDPOINT = EndpointSpec(base_url="http://127.0.0.1:9/v1", model="none")

EnvFactory = Callable[[str, Any, Path, str | None], Environment]

# What a launcher imports before its trial (trials/launch.py), by the module an agent runs: platform and library
# modules only, never candidate code. monitor.host runs every harness; openai comes with the model client.
PRELOAD = {"monitor.host": ("monitor.host", "trials.endpoints.client", "jinja2", "tenacity"),
           "trials.agents": ("trials.agents", "trials.tasks")}


class _Infra(Exception):
    """Internal: stop the trial as ⊥ with this cause."""

    def __init__(self, cause: str, message: str, log_path: str | None = None):
        super().__init__(message)
        self.cause, self.message, self.log_path = cause, message, log_path


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _default_factory(kind: str, task: Any, trial_dir: Path, job_id: str | None) -> Environment:
    from .environments.factory import make_environment

    return make_environment(kind, task, trial_dir, job_id)


def parse_reward(verifier_dir: Path) -> tuple[float | None, str | None, Any, str | None]:
    """(reward, source, detail, error) from the files the verifier wrote (see the module docstring)."""
    jpath, tpath = verifier_dir / "reward.json", verifier_dir / "reward.txt"
    if jpath.is_file():
        try:
            data = json.loads(jpath.read_text())
        except ValueError as exc:
            return None, "reward.json", None, f"reward.json is not JSON: {exc}"
        if isinstance(data, bool) or not isinstance(data, (int, float, dict)):
            return None, "reward.json", data, "reward.json must be a number or an object"
        if isinstance(data, dict):
            if "reward" in data and isinstance(data["reward"], (int, float)) and not isinstance(data["reward"], bool):
                return float(data["reward"]), "reward.json", data, None
            nums = [v for v in data.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
            if not nums:
                return None, "reward.json", data, "reward.json has no numeric value"
            return sum(nums) / len(nums), "reward.json", data, None
        return float(data), "reward.json", data, None
    if tpath.is_file():
        text = tpath.read_text().strip()
        try:
            return float(text), "reward.txt", None, None
        except ValueError:
            return None, "reward.txt", None, f"reward.txt is not a number: {text[:80]!r}"
    return None, None, None, "the verifier wrote no reward.txt or reward.json"


def _record_tampering(res: TrialResult, run: VerifierRun) -> None:
    """The detector's findings into ``result.json`` (see trials/environments/verifier.py)."""
    v = res.verifier
    v.isolation, v.isolation_note = run.isolation, run.note
    v.planted, v.planted_during = run.planted, run.planted_during
    v.tampered = bool(run.planted or run.planted_during)
    if run.stopped or run.stop_note:
        res.notes.append(run.stop_note or f"the agent's processes were stopped before the tests: {run.stopped}")
    if v.tampered:
        res.notes.append(f"the agent wrote into /logs/verifier (never read): before the tests {run.planted}, "
                         f"during them {run.planted_during}")
        log.warning("%s: the agent wrote into /logs/verifier: %s %s", res.trial_name, run.planted,
                    run.planted_during)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _kill_group_now(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def _terminate(proc: launch.AgentProcess) -> None:
    """SIGTERM the agent's whole process group, SIGKILL it after a grace period."""
    pgid = proc.pid  # start_new_session: the agent leads its own group
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        await asyncio.wait_for(proc.wait(), KILL_GRACE_SEC)
    except TimeoutError:
        pass
    _kill_group_now(pgid)
    await proc.wait()


def agent_launch(agent: AgentSpec, spec_path: Path, task_path: Path) -> launch.AgentLaunch:
    """How the agent of one trial will start (made when the trial starts, so a spare warms up meanwhile).
    A harness (every version, the seed too) runs confined (trials/confine.py): the sandbox's paths, a scrubbed
    environment. So does the oracle (it runs the task's own solve.sh): its task folder is its read-only input,
    as a harness's package is."""
    untrusted = agent.harness_dir is not None or agent.kind == "oracle"
    confined = untrusted and confine.enabled()
    if untrusted and not confined:
        confine.warn_unconfined(f"agent {agent.name}")
    agent_dir = spec_path.parent
    seen = Path(confine.inside(spec_path, agent_dir)) if confined else spec_path
    cmd = agent.command(seen, task_path)
    env = {**os.environ, **agent.env, "RISE_TRIAL_SPEC": str(seen)}
    module = launch.module_of(cmd)
    python = hashlib.sha256(sys.executable.encode()).hexdigest()[:8]
    learned = None if module is None else (
        cache_root() / "launch" / f"{module}-v{launch.LEARNED_VERSION}-{python}.json")
    inputs = [Path(str(agent.harness_dir))] if agent.harness_dir is not None else [task_path]
    conf = confine.for_harness(inputs, agent.env, learned) if confined else None
    spares = None
    if conf is not None:
        env = {**conf.env, "RISE_TRIAL_SPEC": str(seen)}
        spares = confine.spare_root(agent_dir)
    if module is None:
        return launch.AgentLaunch(cmd, env, confinement=conf)
    return launch.AgentLaunch(cmd, env, PRELOAD.get(module, ("trials.harness_api",)), learned, conf, spares)


async def run_agent_process(agent: AgentSpec, spec_path: Path, task_path: Path, agent_dir: Path,
                            timeout: float, launcher: launch.AgentLaunch | None = None
                            ) -> tuple[int | None, bool, float]:
    """Launch the agent in its own session; returns (exit code, timed out, seconds)."""
    own = launcher is None
    launcher = launcher or agent_launch(agent, spec_path, task_path)
    t0 = time.monotonic()
    try:
        with open(agent_dir / "stdout.log", "ab") as out:  # noqa: ASYNC230 - a local file, opened once
            out.write(f"$ {' '.join(launcher.cmd)}\n".encode())
        proc = launcher.start(agent_dir / "stdout.log")
    finally:
        if own:
            launcher.release()
    # Lets a resumed job find and kill an agent orphaned by a killed runner (checked against its cmdline; an
    # agent in a launcher does not wait for that: it kills its own group when the runner's pipe closes).
    (agent_dir / "agent.pid").write_text(f"{proc.pid}\n")
    timed_out = False
    try:
        await asyncio.wait_for(proc.wait(), timeout)
    except TimeoutError:
        timed_out = True
        await _terminate(proc)
    finally:
        if proc.returncode is None:  # cancelled: no awaiting here, just make sure nothing survives
            _kill_group_now(proc.pid)
        proc.close()
    if _group_alive(proc.pid):  # children the agent left behind
        _kill_group_now(proc.pid)
    launcher.limits = proc.finish_limits()  # also kills what left the group but not the cgroup
    launcher.absorb(agent_dir)
    return proc.returncode, timed_out, time.monotonic() - t0


def _last_line(text: str | None, limit: int = 500) -> str | None:
    """The last non-empty line (a traceback's exception line), capped."""
    lines = [ln for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1].strip()[:limit] if lines else None


def _read_outcome(agent_dir: Path) -> tuple[AgentOutcome | None, str | None]:
    path = agent_dir / "agent_result.json"
    if not path.is_file():
        return None, "the agent wrote no agent_result.json"
    try:
        return AgentOutcome.model_validate_json(path.read_text()), None
    except ValueError as exc:
        return None, f"unreadable agent_result.json: {exc}"


async def run_trial(task: Any, agent: AgentSpec, endpoint: EndpointSpec | None, trial_dir: Path,
                    env_kind: str, job_id: str | None, settings: dict[str, Any] | None = None,
                    verifier_endpoint: EndpointSpec | None = None, *, repetition: int = 1,
                    env_factory: EnvFactory | None = None, agent_timeout_sec: float | None = None,
                    refine_context: str | None = None) -> TrialResult:
    """Run one trial in ``trial_dir`` and write its ``result.json``. Never raises for a bad task or agent
    (only for cancellation); the sandbox is always stopped. ``refine_context`` reaches the harness in its
    trial spec (Sequential Refine: a summary of an earlier attempt)."""
    trial_dir = Path(trial_dir).resolve()
    agent_dir, verifier_dir = trial_dir / "agent", trial_dir / "verifier"
    for d in (agent_dir, verifier_dir):
        d.mkdir(parents=True, exist_ok=True)
    res = TrialResult(trial_name=trial_dir.name, run_id=uuid.uuid4().hex, job_id=job_id, task_name=task.name,
                      repetition=repetition, status="infra", env_kind=env_kind, agent_name=agent.name,
                      harness_version=agent.harness_version, model=endpoint.model if endpoint else None,
                      started_at=_now())
    write_json_atomic(trial_dir / "config.json", {
        "trial_name": trial_dir.name, "run_id": res.run_id, "job_id": job_id, "task_name": task.name,
        "task_path": str(task.path), "repetition": repetition, "env_kind": env_kind,
        "agent": agent.model_dump(mode="json"), "settings": settings or {},
        "endpoint": endpoint.model_dump(mode="json") if endpoint else None,
        "verifier_endpoint": verifier_endpoint.model_dump(mode="json") if verifier_endpoint else None,
    })
    t_total, load = time.monotonic(), LoadProbe.start()
    env: Environment | None = None
    launcher: launch.AgentLaunch | None = None
    try:
        launcher = agent_launch(agent, agent_dir / "trial_spec.json", Path(task.path))
        factory = env_factory or _default_factory
        t0 = time.monotonic()
        try:
            env = factory(env_kind, task, trial_dir, job_id)
            if getattr(env, "starts_terminal", False):  # the harness's tmux session starts with the sandbox
                env.terminal_request = terminal.requested(agent.harness_dir, settings)
            await env.start()
        except InfraError as exc:
            raise _Infra(exc.cause, str(exc), exc.log_path) from exc
        except TaskError as exc:
            raise _Infra("unsupported_task", str(exc)) from exc
        finally:
            res.durations.env_start = time.monotonic() - t0
        await _agent_phase(res, task, agent, endpoint, verifier_endpoint, env, trial_dir, settings,
                           agent_timeout_sec, refine_context, launcher)
        await _verifier_phase(res, task, env, verifier_dir)
    except _Infra as exc:
        res.status, res.failure_class = "infra", None
        res.infra_cause, res.infra_message, res.infra_log_path = exc.cause, exc.message, exc.log_path
    except InfraError as exc:  # the sandbox died under the agent or verifier phase
        res.status, res.failure_class = "infra", None
        res.infra_cause, res.infra_message, res.infra_log_path = exc.cause, str(exc), exc.log_path
    except Exception as exc:  # a runner bug must not take the grid down: ⊥ with the evidence
        log.exception("trial %s crashed", trial_dir.name)
        res.status, res.failure_class = "infra", None
        res.infra_cause, res.infra_message = "runner_error", f"{type(exc).__name__}: {exc}"
        res.traceback = traceback.format_exc()
    finally:
        if launcher is not None:
            launcher.release()
        if env is not None:
            t0 = time.monotonic()
            try:
                await asyncio.wait_for(env.stop(), STOP_TIMEOUT_SEC)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001 - a failed stop is recorded, never fatal
                res.notes.append(f"env.stop failed: {type(exc).__name__}: {exc}")
            res.durations.env_stop = time.monotonic() - t0
            _record_sandbox_limits(res, env)
    res.durations.total = time.monotonic() - t_total
    res.machine_load = load.finish()
    res.finished_at = _now()
    res.write(trial_dir)
    return res


async def _agent_phase(res: TrialResult, task: Any, agent: AgentSpec, endpoint: EndpointSpec | None,
                       verifier_endpoint: EndpointSpec | None, env: Environment, trial_dir: Path,
                       settings: dict[str, Any] | None, agent_timeout_sec: float | None,
                       refine_context: str | None, launcher: launch.AgentLaunch) -> None:
    agent_dir = trial_dir / "agent"
    timeout = agent_timeout_sec or task.config.agent.timeout_sec
    spec = TrialSpec(trial_id=f"{res.job_id}/{res.trial_name}" if res.job_id else res.trial_name,
                     task_name=task.name, instruction=task.instruction, env=env.handle(),
                     endpoint=endpoint or NO_ENDPOINT, verifier_endpoint=verifier_endpoint,
                     agent_dir=str(agent_dir), timeout_sec=timeout, workdir=task.config.environment.workdir,
                     settings=settings or {}, harness_version=agent.harness_version,
                     refine_context=refine_context)
    spec_path = agent_dir / "trial_spec.json"
    async with serving(launcher.confinement, env, spec, agent_dir) as seen:  # a confined harness's one door
        seen.dump(spec_path)
        rc, timed_out, seconds = await run_agent_process(agent, spec_path, Path(task.path), agent_dir, timeout,
                                                         launcher)
    res.durations.agent = seconds
    res.agent_exit_code, res.agent_timed_out = rc, timed_out
    _record_harness_limits(res, launcher)
    outcome, problem = _read_outcome(agent_dir)
    res.lost_spans = read_lost_spans(agent_dir, monitored="monitor.host" in agent.argv)
    res.inference = read_inference(agent_dir)
    if any(res.lost_spans.values()):  # the trace is incomplete: say so wherever the result is read
        res.notes.append(f"monitor lost spans: {res.lost_spans}")
        log.warning("%s: the monitor lost spans %s", trial_dir.name, res.lost_spans)
    if outcome is None:
        res.agent_status, res.agent_error = "missing", problem
        if "harness_memory" in res.limits.hit:  # killed at its memory limit: the candidate's fault, not ⊥
            res.agent_error_kind = "memory_limit"
            res.agent_error = f"the harness was killed at its memory limit ({res.limits.harness.memory_mb} MiB)"
        return
    res.agent_status, res.agent_error_kind, res.agent_error = outcome.status, outcome.error_kind, outcome.error
    res.episodes, res.cost = outcome.episodes, outcome.cost
    if endpoint is not None and not res.cost.cost_usd:  # a harness that does not price its tokens
        res.cost.price(endpoint.price, verifier_endpoint.price if verifier_endpoint else None)
    if outcome.error_kind in HARNESS_INFRA_KINDS:
        res.traceback = outcome.error if outcome.error and "\n" in outcome.error.strip() else None
        raise _Infra(outcome.error_kind, _last_line(outcome.error) or f"the harness reported {outcome.error_kind}")


def _record_harness_limits(res: TrialResult, launcher: launch.AgentLaunch) -> None:
    """Who the harness ran as, its limits and what it hit, into ``result.json`` ``limits``."""
    conf = launcher.confinement
    ids = confine.harness_identity() if conf is not None else None
    res.limits.harness_uid = (conf.ids[0] if conf.ids else os.geteuid()) if conf is not None else None
    res.limits.harness_uid_note = ids if isinstance(ids, str) else None
    if res.limits.harness_uid_note:  # said plainly wherever the result is read
        res.notes.append(res.limits.harness_uid_note)
    res.limits.harness = launcher.limits
    res.limits.refresh(res.notes, res.trial_name)


def _record_sandbox_limits(res: TrialResult, env: Environment) -> None:
    """The local sandbox's limits and what it hit (known once it has stopped)."""
    if getattr(env, "limit_usage", None) is not None:
        res.limits.sandbox = env.limit_usage  # type: ignore[attr-defined]
        res.limits.refresh(res.notes, res.trial_name)


# Error kinds a harness reports for failures of the infrastructure, not of the agent (InfraError causes): ⊥.
HARNESS_INFRA_KINDS = frozenset({"model_unreachable", "model_server", "sandbox", "image_build", "infra"})


async def _verifier_phase(res: TrialResult, task: Any, env: Environment, verifier_dir: Path) -> None:
    vconf = task.config.verifier
    logs = verifier_dir / "logs"
    t0 = time.monotonic()
    try:
        run = await run_verifier(env, Path(task.tests_dir), logs, workdir=task.config.environment.workdir,
                                 variables=dict(vconf.env), timeout=vconf.timeout_sec, user=vconf.user)
    finally:
        res.durations.verifier = time.monotonic() - t0
    vres = run.result
    (verifier_dir / "test-stdout.txt").write_text(vres.stdout)
    (verifier_dir / "test-stderr.txt").write_text(vres.stderr)
    res.verifier.returncode, res.verifier.timed_out = vres.returncode, vres.timed_out
    _record_tampering(res, run)
    if run.isolation == "private" and run.note is not None:  # the private view failed: nothing is read
        reward, source, detail, error = None, None, None, run.note
    else:
        # An environment may copy the folder itself or only its contents; accept both.
        found = logs / "verifier" if (logs / "verifier").is_dir() and not (logs / "reward.txt").exists() else logs
        reward, source, detail, error = parse_reward(found)
        if reward is None and getattr(task, "legacy_exit_code", False) and source is None and not vres.timed_out:
            reward, source, error = (1.0 if vres.returncode == 0 else 0.0), "exit_code", None
    res.reward = reward
    res.verifier.reward_source, res.verifier.reward_detail, res.verifier.error = source, detail, error
    if reward is not None and reward >= 1.0:
        res.status, res.failure_class = "passed", None
        return
    res.status = "failed"
    if res.agent_timed_out:
        res.failure_class = "agent_timeout"
    elif res.agent_status in ("missing", "error"):
        res.failure_class = "agent_error"
    elif vres.timed_out:
        res.failure_class = "verifier_timeout"
    elif reward is None:
        res.failure_class = "verifier_error"
    else:
        res.failure_class = "task_failure"
