"""Shared parts of the ``rise evolve`` tests (no tests here).

Test doubles, named as such:
- :class:`FlakyClaimer`, the agent's model (a ScriptedServer responder over real HTTP): on hello-file it solves
  at once; on write-json every other trial solves at once and the others claim completion without doing
  anything (they do the work only when a later message asks them to verify). So the seed's reference corpus
  has one flipping task (write-json) and one stable pass (hello-file); executable completion verification
  passes both; keystroke trimming (its commands never run) fails both.
- :class:`ScriptedRoles`, a role backend (the runtime's Backend protocol) answering every role of a round:
  the analyst, grouper and reviewer with well-formed answers citing the real traces; the proposer with the
  mechanisms a test scripts per round; the implementer as a **scripted coding agent** that issues, through
  the REAL tools (read_file, grep, edit_file, write_file, run in bubblewrap, check), the calls a capable coding
  agent would make to build a known mechanism (tests/data/candidates/build.py's edits, turned into exact-string
  edits against the worktree it is given). Every call is logged to ``count_file`` (role and a hash of its
  prompt), so a test can show that no role call was made twice.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from tests.test_controller_support import MARK, SOLVE, STARTER, _reply

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "tests" / "data" / "candidates" / "build.py"


class FlakyClaimer:
    """The agent's scripted model (see the module docstring); ``trials`` counts trial starts per task."""

    def __init__(self) -> None:
        self.trials: dict[str, int] = {}

    def __call__(self, body: dict) -> str:
        msgs = body.get("messages", [])
        first = next((m.get("content") or "" for m in msgs if m.get("role") == "user"), "")
        task = next((t for t, mark in MARK.items() if mark in first), None)
        if task is None:
            return "Nothing to summarise."
        mine = [m.get("content") or "" for m in msgs if m.get("role") == "assistant"]
        if any(f"SOLVE {task}" in text for text in mine):
            return _reply("Done and checked.", None, True)
        later = [m.get("content") or "" for m in msgs if m.get("role") == "user"][1:]
        direct = task == "hello-file"
        if not mine:  # the first call of a trial
            self.trials[task] = self.trials.get(task, 0) + 1
            direct = direct or self.trials[task] % 2 == 1
        if direct or any(re.search(r"verif", t, re.IGNORECASE) for t in later):
            line = SOLVE[task].rstrip("\n") + f"; cat {MARK[task]}\n"
            return _reply(f"SOLVE {task}: doing the work and showing it.", line, False)
        return _reply("The task is already complete.", None, True)


def make_experiment(runs: Path, base_url: str, name: str = "evo", heldout: tuple[str, ...] = (), **extra: Any):
    """An experiment over hello-file and write-json (r = 2, local sandbox, by default no held-out split)."""
    from evolve.experiment.config import ExperimentConfig
    from evolve.experiment.store import init_experiment

    cfg = ExperimentConfig.model_validate({
        "name": name, "endpoint": {"base_url": base_url, "model": "scripted", "timeout_sec": 30},
        "tasks": {"dir": str(STARTER), "development": ["hello-file", "write-json"], "heldout": list(heldout)},
        "r": 2, "env": "local", "concurrency": 1, "adoption": {"policy": "paper", "baseline": "reference"}, **extra})
    return init_experiment(name, cfg, runs_dir=runs)


# ------------------------------------------------------------------------------------ proposals the tests script
VERIFY = {"mechanism": "verify-completion", "summary": "Withhold the first completion claim once and ask the model "
          "to run a command that verifies the result.", "behaviour_change": "the first claim of a run is "
          "withheld once; the model is asked to verify", "behaviours": ["completion.verify"],
          "functions": ["completion:VerificationGate.review"], "setting": "completion.verify_before_complete",
          "predicted_fixes": ["write-json"], "tasks_at_risk": ["hello-file"],
          "observations": ["completion:VerificationGate.review spans"]}
TRIM = {"mechanism": "keystroke-trim", "summary": "Strip trailing whitespace from keystrokes to keep the pane "
        "tidy.", "behaviour_change": "keystrokes are sent without trailing whitespace", "behaviours": ["dispatch.trim"],
        "functions": ["tmux:trim_keystrokes"], "setting": "tmux.trim_keystrokes", "predicted_fixes": ["write-json"],
        "tasks_at_risk": []}
# a settings-tier proposal (the loop then offers the settings tier only): one more confirmation before a claim is
# accepted, a switch the seed's Handbook lists for completion.handshake; made with no coding agent
CONFIRM = {"mechanism": "confirm-more", "summary": "Ask the model to confirm a completion claim three times "
           "before accepting it.", "behaviour_change": "a completion claim is accepted after three confirmations",
           "behaviours": ["completion.handshake"], "functions": ["completion:CompletionHandshake.on_reply"],
           "tier": "settings", "settings": [{"key": "terminus.confirmations", "value": 3}],
           "predicted_fixes": ["write-json"], "tasks_at_risk": []}


def _build_module():
    spec = importlib.util.spec_from_file_location("candidate_build", BUILD)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def patch_for(name: str, worktree: Path) -> str:
    """build.py's patch for candidate ``name`` against a copy of ``worktree`` (without its .git link)."""
    with tempfile.TemporaryDirectory(prefix="evolve-build-") as tmp:
        copy = Path(tmp) / "harness"
        shutil.copytree(worktree, copy, ignore=shutil.ignore_patterns(".git", "__pycache__", "*.pyc"))
        return _build_module().build(name, seed=copy)


def agent_calls(patch: str) -> list[tuple[str, dict]]:
    """The tool calls a coding agent makes to carry out ``patch``: read each file it changes, replace each
    hunk's old text by its new text (exact-string edits), write new files whole."""
    from unidiff import PatchSet

    calls: list[tuple[str, dict]] = [("grep", {"pattern": "class CompletionHandshake", "path": "."})]
    for pf in PatchSet(patch):
        path = pf.path
        if pf.is_added_file:
            content = "".join(line.value for h in pf for line in h if line.is_added)
            calls.append(("write_file", {"path": path, "content": content}))
            continue
        calls.append(("read_file", {"path": path}))
        for hunk in pf:
            old = "".join(line.value for line in hunk if line.is_context or line.is_removed)
            new = "".join(line.value for line in hunk if line.is_context or line.is_added)
            calls.append(("edit_file", {"path": path, "old": old, "new": new}))
    # a syntax check that writes nothing (no __pycache__ to commit)
    calls.append(("run", {"cmd": "python3 -c 'import ast, sys; [ast.parse(open(f).read(), f) for f in sys.argv[1:]]' "
                                 "*.py && ls contracts"}))
    calls.append(("check", {}))
    return calls


class ScriptedRoles:
    """The role backend test double (see the module docstring). ``proposals``: per round number, the proposer's
    answers in call order; ``build_as``: the build.py candidate the implementer builds whatever the proposal
    calls its mechanism (for proposals a real model wrote), else the proposal's mechanism name."""

    name = "scripted"

    def __init__(self, proposals: dict[int, list[dict]], count_file: Path, *, price_per_mtok: float = 10.0,
                 run_check: tuple[str, ...] = ("verify-completion",), bad_findings: bool = False,
                 build_as: str = "", split_groups: bool = False):
        from trials.endpoints.spec import PriceTable

        self.proposals, self.count_file, self.run_check = proposals, count_file, run_check
        self.bad_findings = bad_findings  # the analyst cites an episode that does not exist
        self.build_as = build_as
        self.split_groups = split_groups  # the grouper puts each finding in a group of its own
        self.price = PriceTable(input_per_mtok=price_per_mtok, output_per_mtok=price_per_mtok)
        self.tool_results: list[tuple[str, str]] = []

    def __call__(self, role: str, key: str) -> ScriptedRoles:  # the loop's backend factory
        return self

    def _log(self, role: str, rnd: str, prompt: str) -> int:
        """Log the call; returns how many calls of this role this round made before it."""
        before = sum(1 for line in calls_logged(self.count_file) if line.startswith(f"{role} {rnd} "))
        with self.count_file.open("a") as fh:
            fh.write(f"{role} {rnd} {hashlib.sha256(prompt.encode()).hexdigest()[:16]}\n")
        return before

    async def run(self, job):
        from evolve.roles.runtime import BackendReply, Usage
        from evolve.roles.runtime.tools import invoke
        from validate.evaluate import kill_point

        role = job.role.name
        rnd = next(p for p in reversed(Path(job.ctx.transcript.path).parts) if re.fullmatch(r"r\d\d", p))
        before = self._log(role, rnd, job.prompt)
        tools = {t.name: t for t in job.tools}
        if role == "analyst":
            answer = _analyst(job.prompt, 99 if self.bad_findings else 0)
        elif role == "grouper":
            ids = [ln.split()[1] for ln in job.prompt.splitlines() if ln.startswith("- f")]
            answer = {"groups": [{"name": "verify before claiming", "wish": "check before a claim", "members": ids}]}
            if self.split_groups:
                answer = {"groups": [{"name": f"wish {i}", "wish": f"the harness should do thing {i}",
                                      "members": [fid]} for i, fid in enumerate(ids, 1)]}
        elif role == "reviewer":
            names = [ln[3:] for ln in job.prompt.splitlines() if ln.startswith("## ")]
            answer = {"reviews": [{"group": n, "verdict": "accept", "applies_to_all": True, "distinct": True,
                                   "reason": "every member claimed without the named check"} for n in names]}
        elif role == "researcher":  # search, read the first hit, cite it
            found = await invoke(tools["search_corpus"], job.ctx, {"query": "confirm completion claim checks"})
            ids = re.findall(r"\b[0-9a-f]{12}\b", found)
            await invoke(tools["read_reference"], job.ctx, {"ref": ids[0]})
            answer = {"questions": ["how do harnesses check a completion claim before accepting it?"],
                      "references": [{"ref": ids[0], "how": "asks the model to confirm once, then runs the checks"}],
                      "conclusion": "confirm once and run checks before accepting a claim"}
        elif role == "proposer":
            await invoke(tools["read_file"], job.ctx, {"path": "completion.py"})
            script = self.proposals[int(rnd[1:])]
            answer = script[min(before, len(script) - 1)]
        elif role == "implementer":
            mech = self.build_as or job.prompt.split("Mechanism: ", 1)[1].split("\n", 1)[0].strip()
            repair = "The checks of your implementation failed" in job.prompt  # nothing to rebuild: check again
            # a repair: the scripted agent fixes what the (stand-in) contract check named, then checks again
            calls = [("edit_file", {"path": f"contracts/{mech}.toml", "old": "version = 1\n",
                                    "new": "version = 1\n# repaired: cases reviewed against the failure\n"})] \
                if repair else agent_calls(patch_for(mech, job.ctx.workspace))
            for name, args in calls:
                if name == "check" and mech not in self.run_check:  # the real check() is slow: once per test
                    continue
                self.tool_results.append((name, await invoke(tools[name], job.ctx, args)))
                if repair:  # the kill tests' point inside a repair call: its edit made, its answer not given
                    kill_point("implementer-repair-edit")
            answer = {"summary": f"implemented {mech} behind its setting, with its contract and Handbook entry",
                      "files": sorted({a["path"] for n, a in calls if "path" in a and n != "grep"}),
                      "setting": "", "contract": f"contracts/{mech}.toml",
                      "check_passed": mech not in self.run_check or "passed" in self.tool_results[-1][1]}
        else:
            raise AssertionError(f"no script for role {role}")
        output = job.role.output.model_validate(answer)
        return BackendReply(output=output, usage=Usage(input_tokens=len(job.prompt) // 4, output_tokens=60,
                                                       requests=1))


def _analyst(prompt: str, episode: int = 0) -> dict:
    from tests.test_analysis_support import finding_answer

    success = prompt.split("Run **", 1)[1].split("**", 1)[0]
    failure = prompt.split("run\n**", 1)[1].split("**", 1)[0] if "run\n**" in prompt else \
        prompt.split("; run **", 1)[1].split("**", 1)[0]
    return finding_answer(success, failure, episode)


def calls_logged(count_file: Path) -> list[str]:
    return count_file.read_text().splitlines() if count_file.is_file() else []


def repairing_checks(fail_once: set[str]):
    """Checks for the loop tests: the real smoke check, and stand-in contracts (a test double) that fail a new
    mechanism named in ``fail_once`` until its contract file carries the repair mark, sending the failure
    through the controller's repair hook (the implementer) first; every other candidate passes."""
    from evolve.round.checks import Checks, _real_smoke

    async def contracts(candidate: Path, incumbent: Path, frozen: Path, repair: Any, max_repairs: int,
                        out_dir: Path) -> tuple[bool, dict[str, Any]]:
        import asyncio

        new = sorted(p for p in (candidate / "contracts").glob("*.toml")
                     if p.stem in fail_once and not (incumbent / "contracts" / p.name).exists())
        repairs = 0
        while any("# repaired" not in p.read_text() for p in new):
            failures = [f"{p.stem}: positive case 'first claim withheld': expected the verify prompt" for p in new]
            if repair is None or repairs >= max_repairs or not await asyncio.to_thread(repair, candidate, failures):
                return False, {"summary": f"stand-in contracts failed: {failures}", "repairs": repairs,
                               "failures": failures}
            repairs += 1
        return True, {"summary": f"stand-in contracts passed after {repairs} repair(s)", "repairs": repairs,
                      "mechanisms": [p.stem for p in new]}

    return Checks(_real_smoke, contracts)


def kill_at_each_stage_then_resume(runs: Path, calls: Path, mechanism: str, stages: list[str]) -> str:
    """``python -m tests.evolve_driver`` on the experiment ``evo`` under ``runs``, killed by SIGKILL at each of
    ``stages`` in turn (``tests.kill_series``, the loop of scripts/kill_each_stage.py; each run must die
    there), then run once more to the end; returns that last run's output (its exit status must be 0)."""
    import sys

    from tests.kill_series import kill_series

    args = [sys.executable, "-m", "tests.evolve_driver", str(runs), "evo", str(calls), "1", mechanism]
    series = kill_series(args, stages, runs / "kills", cwd=REPO, timeout=600)
    for inv in series[:-1]:
        assert inv.killed, f"not killed at {inv.stage}: rc {inv.returncode}\n{inv.log.read_text()[-3000:]}"
    assert len(series) == len(stages) + 1, f"ended by itself at {series[-1].stage}: {series[-1].log.read_text()[-3000:]}"
    last = series[-1].log.read_text()
    assert series[-1].returncode == 0, last[-3000:]
    return last
