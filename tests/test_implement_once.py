"""scripts/implement_once.py: one implementer call on a proposal, then the real smoke check and the real
contracts on what it left. The implementer here is a test double, named as one: the scripted coding agent of
tests/test_evolve_support.py (real tools, the edits a capable agent would make), or a careless one below."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.test_evolve_support import REPO, VERIFY, ScriptedRoles, make_experiment

pytestmark = [pytest.mark.tmux, pytest.mark.sandbox]


def _script():
    spec = importlib.util.spec_from_file_location("implement_once", REPO / "scripts" / "implement_once.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class CarelessCoder:
    """A test double for a small coding model: writes a settings.toml that does not parse (refused by the TOML
    guard), then breaks main.py, and says it is done."""

    name = "careless"

    def __init__(self, idle: bool = False) -> None:
        from trials.endpoints.spec import PriceTable

        self.price, self.idle = PriceTable(), idle  # idle: changes nothing (one edit that fails 3 times)

    def __call__(self, role: str, key: str) -> CarelessCoder:
        return self

    async def run(self, job):
        from evolve.roles.runtime import BackendReply, Usage
        from evolve.roles.runtime.tools import invoke

        tools = {t.name: t for t in job.tools}
        if self.idle:  # as the live 1.5B: the same edit of a line the file does not have, again and again
            for _ in range(3):
                await invoke(tools["edit_file"], job.ctx, {"path": "settings.toml", "old": "verify = false",
                                                           "new": "verify = true"})
            return BackendReply(output=job.role.output.model_validate({"summary": "the setting is now on",
                                                                       "check_passed": True}),
                                usage=Usage(input_tokens=100, output_tokens=20, requests=1))
        await invoke(tools["write_file"], job.ctx, {"path": "settings.toml", "content": "[completion\nx = 1\n"})
        await invoke(tools["write_file"], job.ctx, {"path": "main.py", "content": "raise SystemExit(3)\n"})
        answer = {"summary": "implemented the mechanism as asked", "check_passed": True}
        return BackendReply(output=job.role.output.model_validate(answer),
                            usage=Usage(input_tokens=100, output_tokens=20, requests=1))


@pytest.mark.timeout(900)
def test_a_built_mechanism_passes_both_checks(tmp_path, monkeypatch, capsys):
    exp = make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1")
    mod = _script()
    monkeypatch.setattr(mod, "default_backends", lambda _exp: ScriptedRoles({}, tmp_path / "calls.log",
                                                                            run_check=()))
    (tmp_path / "verify.json").write_text(json.dumps(VERIFY))
    rc = mod.main([exp.root.name, str(tmp_path / "verify.json"), "--runs-dir", str(tmp_path / "runs")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "cand/r90-verify-completion at " in out and "refused or failed: 0" in out
    assert ": passed" in out and "contracts passed: verify-completion" in out
    branch = exp.repo.heads["cand/r90-verify-completion"].commit
    assert branch.message.startswith("rise implementer: verify-completion (round 90")
    assert "contracts/verify-completion.toml" in exp.repo.git.diff("--name-only", exp.commit_of("v0"), branch)
    assert exp.ledger.find("implementation") == []  # a measurement: nothing booked


@pytest.mark.timeout(600)
def test_a_broken_candidate_fails_and_the_guard_refusal_is_listed(tmp_path, monkeypatch, capsys):
    exp = make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1")
    mod = _script()
    monkeypatch.setattr(mod, "default_backends", lambda _exp: CarelessCoder())
    (tmp_path / "verify.json").write_text(json.dumps(VERIFY))
    rc = mod.main([exp.root.name, str(tmp_path / "verify.json"), "--runs-dir", str(tmp_path / "runs"),
                   "--slug", "careless", "--round", "7"])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "refused or failed: 1" in out and "write_file: error: settings.toml would not be valid TOML" in out
    assert "cand/r07-careless" in out
    settings = exp.root / "worktrees" / "r07-careless" / "harness" / "settings.toml"
    assert "x = 1" not in settings.read_text()  # the guard kept the file
    assert ": FAILED" in out and "contracts passed" not in out and "contracts failed" not in out  # smoke first


def test_an_implementer_that_changes_nothing_gets_no_checks(tmp_path, monkeypatch, capsys):
    """Seen live four times: the 1.5B implementer's calls all failed, it answered check_passed = true, and the
    worktree was the incumbent's. The script says so, names the withdrawn tools, and runs no check on the
    incumbent's code."""
    exp = make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1")
    mod = _script()
    monkeypatch.setattr(mod, "default_backends", lambda _exp: CarelessCoder(idle=True))
    (tmp_path / "verify.json").write_text(json.dumps(VERIFY))
    rc = mod.main([exp.root.name, str(tmp_path / "verify.json"), "--runs-dir", str(tmp_path / "runs")])
    out = capsys.readouterr().out
    assert rc == 1 and "the implementer changed nothing" in out and "smoke check" not in out, out
    assert "tools withdrawn (only the answer offered from then on): edit_file failed 3 times" in out, out
