"""Reward forgery: an agent that plants ``reward.json`` = 1 and ``reward.txt`` = 1 in ``/logs/verifier``, and one
that leaves a background process rewriting them (also through ``/proc/<pid>/root`` of every process it can see,
and rewriting ``/tests/test.sh``) while the tests run. The agent is the oracle running a hostile ``solve.sh``
on a copy of ``write-json`` that it does not solve, so the task's own tests write ``reward.txt`` = 0.

Each attempt must score 0 (the reward comes from the tests only), be recorded in ``result.json``
(``verifier.tampered``, ``planted``, ``planted_during``) and leave no forged file among those read. An honest
oracle on the same task still scores 1. On ``local`` (bubblewrap) and ``docker`` (marked).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from tests.test_runner_fake_env import REPO, DirEnv, make_task
from tests.test_runner_sandbox import copy_task, rise_eval
from trials.agents import AgentSpec
from trials.runner import run_trial

STARTER = REPO / "data" / "starter"

PLANT = """#!/bin/bash
mkdir -p /logs/verifier
echo 1 > /logs/verifier/reward.txt
echo '{"reward": 1}' > /logs/verifier/reward.json
"""

# Left running in the sandbox after the agent ends; writes every 10 ms for up to a minute.
WRITER = r"""#!/bin/bash
cat > /tmp/forge.sh <<'EOF'
end=$((SECONDS + 60))
while [ $SECONDS -lt $end ]; do
  mkdir -p /logs/verifier 2>/dev/null
  for d in /logs/verifier /proc/[0-9]*/root/logs/verifier; do
    echo 1 > "$d/reward.txt" 2>/dev/null
    echo '{"reward": 1}' > "$d/reward.json" 2>/dev/null
  done
  for t in /tests/test.sh /proc/[0-9]*/root/tests/test.sh; do
    [ -f "$t" ] && printf '#!/bin/bash\nmkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\n' > "$t" 2>/dev/null
  done
  sleep 0.01
done
EOF
setsid nohup bash /tmp/forge.sh >/dev/null 2>&1 </dev/null &
sleep 0.5
"""


def _need(env: str) -> None:
    if not (STARTER / "write-json" / "task.toml").is_file():
        pytest.skip("the starter suite (data/starter) is not there")
    if env == "local":
        from trials.environments.local import bwrap_available

        if not bwrap_available():
            pytest.skip("bubblewrap (bwrap) and nsenter are needed for the local sandbox")
    else:
        from tests.test_runner_sandbox import _need_docker

        _need_docker()


def _trials(tmp_path: Path, env: str) -> dict[str, dict]:
    tasks = tmp_path / "tasks"
    copy_task("write-json", tasks, "plant", solve=PLANT)
    copy_task("write-json", tasks, "writer", solve=WRITER)
    copy_task("write-json", tasks, "honest")
    out = tmp_path / "res.json"
    proc = rise_eval("--tasks", str(tasks), "--agent", "oracle", "--env", env, "-r", "1", "-c", "3",
                     "--job-dir", str(tmp_path / "job"), "--json", str(out), timeout=500)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return {t["task_name"]: json.loads((tmp_path / "job" / f"{t['task_name']}__r1" / "result.json").read_text())
            for t in json.loads(out.read_text())["trials"]}


def _read_files(tmp_path: Path, task: str) -> dict[str, str]:
    logs = tmp_path / "job" / f"{task}__r1" / "verifier" / "logs"
    return {p.relative_to(logs).as_posix(): p.read_text().strip() for p in logs.rglob("*") if p.is_file()}


def _check(tmp_path: Path, env: str) -> None:
    res = _trials(tmp_path, env)
    for name in ("plant", "writer"):
        r = res[name]
        assert r["reward"] == 0.0, f"{env}/{name}: the forged reward was read: {r['reward']} {r['verifier']}"
        assert r["status"] == "failed" and r["failure_class"] == "task_failure"
        v = r["verifier"]
        assert v["isolation"] == "private" and v["isolation_note"] is None, v
        assert v["tampered"] and any("/logs/verifier" in n for n in r["notes"]), r["notes"]
        assert v["reward_source"] == "reward.txt"
        assert _read_files(tmp_path, name) == {"reward.txt": "0"}  # only what the tests wrote
    assert {"reward.json", "reward.txt"} <= set(res["plant"]["verifier"]["planted"])
    assert res["plant"]["verifier"]["planted_during"] == []
    # the writer is still at work while the tests run: the shared folder fills again, and is never read
    assert {"reward.json", "reward.txt"} <= set(res["writer"]["verifier"]["planted_during"])
    honest = res["honest"]
    assert honest["reward"] == 1.0 and not honest["verifier"]["tampered"], honest["verifier"]
    assert honest["verifier"]["planted"] == honest["verifier"]["planted_during"] == []


@pytest.mark.sandbox
def test_forged_rewards_are_blocked_and_recorded_local(tmp_path):
    _need("local")
    _check(tmp_path, "local")


@pytest.mark.docker
def test_forged_rewards_are_blocked_and_recorded_docker(tmp_path):
    _need("docker")
    _check(tmp_path, "docker")


def planting_agent(spec_path: str) -> int:
    """A process agent for the shared mode (a fake sandbox folder): plants both reward files and stops."""
    from trials.harness_api import AgentOutcome, TrialSpec

    spec = TrialSpec.load(spec_path)
    folder = Path(spec.env["root"]) / "logs" / "verifier"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "reward.json").write_text('{"reward": 1}')
    (folder / "reward.txt").write_text("1")
    AgentOutcome(status="completed").write(spec.agent_dir)
    return 0


def test_shared_mode_never_reads_a_planted_reward(tmp_path):
    """A sandbox without a private verifier view (the fake one): the planted files are removed before the
    tests run and recorded; the weaker mode is named in result.json."""
    task = make_task(tmp_path / "tasks")
    agent = AgentSpec(kind="process", name="planter", harness_version="planter-v1",
                      argv=[sys.executable, "-m", "tests.escape.test_reward_forgery", "--spec", "{spec}"],
                      env={"PYTHONPATH": str(REPO)})
    res = asyncio.run(run_trial(task, agent, None, tmp_path / "trial", "fake", None,
                                env_factory=lambda kind, t, d, j: DirEnv(t, d)))
    assert res.reward == 0.0 and res.status == "failed", res.verifier
    assert res.verifier.isolation == "shared" and "no private verifier mode" in (res.verifier.isolation_note or "")
    assert res.verifier.tampered and set(res.verifier.planted) == {"reward.json", "reward.txt"}
    written = tmp_path / "trial" / "verifier" / "logs"
    assert sorted(p.name for p in written.iterdir()) == ["reward.txt"] and (written / "reward.txt").read_text() == "0\n"


if __name__ == "__main__":
    sys.exit(planting_agent(sys.argv[sys.argv.index("--spec") + 1]))
