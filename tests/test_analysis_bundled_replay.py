"""The analysis of a real reference corpus by the real bundled model, replayed in CI without a model.

The corpus (``tests/data/analysis/trials/bundled-1.5b``) is the v0 reference corpus of ``scripts/run.sh``'s
experiment: the seed on the bundled Qwen2.5-Coder-1.5B, three starter tasks × r = 2 in the local sandbox
(hello-file flipped; redacted with ``redact.py``). The recordings (``tests/data/analysis/recordings/bundled-1.5b``)
are that experiment's ``rise analyze demo --backend replay --record --recording DIR`` against the bundled
llama.cpp server, the 1.5B in every role (analyst, grouper, reviewer). Replaying asserts what the platform does
with them: every role call's request matches the recording (same prompts, same tool results over the same files),
the same findings, groups and ranking come out, and the ledger holds them; never what a 1.5B model "should" say.
Re-record after changing the analysis roles, their tools or the seed's Handbook (a replay miss says so)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data" / "analysis"
CORPUS = DATA / "trials" / "bundled-1.5b"
RECORDINGS = DATA / "recordings" / "bundled-1.5b"
EXPECTED = RECORDINGS / "expected.json"
STARTER = Path(__file__).resolve().parent.parent / "data" / "starter"


DEMO_TASKS = ["hello-file", "write-json", "count-lines"]


def make_demo(tmp_path: Path, base_url: str = "http://127.0.0.1:9/v1", corpus: Path = CORPUS,
              tasks: list[str] = DEMO_TASKS):
    """The demo experiment as scripts/run.sh made it when the corpus was recorded (three tasks: project-skeleton
    joined later), with the stored corpus as v0's reference corpus."""
    from evolve.experiment.config import ExperimentConfig
    from evolve.experiment.store import init_experiment

    cfg = ExperimentConfig.model_validate({
        "name": "demo", "r": 2, "concurrency": 1, "env": "local",
        "endpoint": {"base_url": base_url, "model": "qwen2.5-coder-1.5b", "max_output_tokens": 1024},
        "tasks": {"dir": str(STARTER), "development": list(tasks)},
    })
    exp = init_experiment("demo", cfg, runs_dir=tmp_path)
    shutil.copytree(corpus, exp.root / "versions" / "v0" / "reference")
    return exp


def analyze(exp, *args: str, recordings: Path = RECORDINGS, timeout: float = 300,
            kill_at: str = "") -> subprocess.CompletedProcess:
    env = {**__import__("os").environ, "RISE_TEST_KILL_AT": kill_at}
    return subprocess.run([sys.executable, "-m", "rise.cli", "analyze", str(exp.root), "--backend", "replay",
                           "--recording", str(recordings), *args], check=False, capture_output=True, text=True,
                          timeout=timeout, env=env)


def researcher_inputs_by_group(result: dict) -> dict[str, dict]:
    """The researcher's inputs for every ranked group of an analysis.json."""
    from evolve.roles.analysis.models import Group
    from evolve.roles.researcher import inputs_from_group

    return {g["name"]: inputs_from_group(Group.model_validate(g)).model_dump(mode="json")
            for g in result["groups"] if g.get("rank")}


def record(base_url: str, work: Path, corpus: Path = CORPUS, recordings: Path = RECORDINGS,
           tasks: list[str] = DEMO_TASKS) -> None:
    """Make the recordings and expected.json again against a running bundled server (not a test: run
    ``python tests/test_analysis_bundled_replay.py [BASE_URL] [wide]`` with the 1.5B served, e.g. by
    scripts/run.sh)."""
    exp = make_demo(work, base_url, corpus, tasks)
    fresh = work / "recordings"
    out = analyze(exp, "--record", recordings=fresh, timeout=7200)
    if out.returncode != 0:
        raise SystemExit(f"rise analyze failed:\n{out.stderr}")
    events = [json.loads(line) for line in (exp.root / "ledger.jsonl").read_text().splitlines()]
    result = json.loads((exp.root / "rounds" / "r01" / "analysis" / "analysis.json").read_text())
    lines = [re.sub(r"^v\d+ \([0-9a-f]+\): ", "", ln.strip())  # the commit differs in every experiment
             for ln in out.stdout.splitlines() if ln.strip() and not ln.startswith("records:")]
    expected = {"note": f"rise analyze on the bundled model, recorded {__import__('datetime').date.today()}",
                "kinds": [e["kind"] for e in events if ":analysis" in e["key"]],
                "groups": [g["name"] for g in result["groups"]], "findings": len(result["findings"]),
                "calls": len(list((exp.root / "rounds" / "r01" / "analysis" / "transcripts").glob("*.jsonl"))),
                "stdout_lines": [ln for ln in lines if "$" not in ln and " s" not in ln[-4:]]}
    ranked = [g for g in result["groups"] if g.get("rank")]
    if ranked:  # the researcher's replay (tests/test_research_bundled_replay.py) starts from the top group
        from evolve.roles.analysis.models import Group
        from evolve.roles.researcher import inputs_from_group

        top = Group.model_validate(min(ranked, key=lambda g: g["rank"]))
        expected["researcher_inputs"] = inputs_from_group(top).model_dump(mode="json")
        expected["researcher_inputs_by_group"] = researcher_inputs_by_group(result)
    shutil.rmtree(recordings, ignore_errors=True)
    shutil.copytree(fresh, recordings)
    (recordings / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    print(out.stdout)


def test_the_real_analysis_replays_to_the_recorded_findings_and_groups(tmp_path: Path) -> None:
    expected = json.loads(EXPECTED.read_text())
    exp = make_demo(tmp_path)
    out = analyze(exp)
    assert out.returncode == 0, out.stderr[-3000:]
    events = [json.loads(line) for line in (exp.root / "ledger.jsonl").read_text().splitlines()]
    kinds = [e["kind"] for e in events if ":analysis" in e["key"]]
    assert kinds == expected["kinds"]
    result = json.loads((exp.root / "rounds" / "r01" / "analysis" / "analysis.json").read_text())
    assert [g["name"] for g in result["groups"]] == expected["groups"]
    assert len(result["findings"]) == expected["findings"]
    for line in expected["stdout_lines"]:
        assert line in out.stdout
    # every role call left a transcript that ended, and the recordings were all used (no extra, no missing call)
    transcripts = sorted((exp.root / "rounds" / "r01" / "analysis" / "transcripts").glob("*.jsonl"))
    assert len(transcripts) == expected["calls"]


def test_a_changed_corpus_is_a_replay_miss_not_an_invented_answer(tmp_path: Path) -> None:
    exp = make_demo(tmp_path)
    trajectory = exp.root / "versions" / "v0" / "reference" / "hello-file__r1" / "agent" / "trajectory.json"
    trajectory.write_text(trajectory.read_text().replace("hello", "HELLO"))
    out = analyze(exp)
    # the pair's call fails by name (the analysis goes on with the other pairs, as for any failed role call)
    assert out.returncode == 0, out.stderr
    assert "failed: pair hello-file:2:1: role analyst: replay_miss" in out.stdout
    assert "not in the recording" in out.stdout and "0 valid finding(s)" in out.stdout


def test_kill_9_after_the_real_finding_then_resume_makes_no_call_twice(tmp_path: Path) -> None:
    """kill -9 right after the analyst's finding is in the ledger, then --resume: the same result, and the real
    analyst call is not made again (one transcript per recorded call, every ledger key once)."""
    kill_after_first_finding_then_resume(make_demo(tmp_path), RECORDINGS)


def kill_after_first_finding_then_resume(exp, recordings: Path) -> None:
    """kill -9 once the first finding is in the ledger, then --resume on ``recordings``: the recorded result, one
    transcript per recorded call (none made twice) and every ledger key once."""
    expected = json.loads((recordings / "expected.json").read_text())
    killed = analyze(exp, recordings=recordings, kill_at="analysis-finding@1")
    assert killed.returncode == -9, killed.stderr[-2000:]
    resumed = analyze(exp, "--resume", recordings=recordings)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    for line in expected["stdout_lines"]:
        assert line in resumed.stdout
    transcripts = sorted((exp.root / "rounds" / "r01" / "analysis" / "transcripts").glob("*.jsonl"))
    assert len(transcripts) == expected["calls"], [t.name for t in transcripts]
    keys = [json.loads(line)["key"] for line in (exp.root / "ledger.jsonl").read_text().splitlines()]
    assert len(keys) == len(set(keys))


if __name__ == "__main__":
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: the repository root
    from tests.test_analysis_bundled_wide import WIDE_CORPUS, WIDE_RECORDINGS, WIDE_TASKS

    wide = sys.argv[2:3] == ["wide"]
    with tempfile.TemporaryDirectory() as tmp:
        record(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080/v1", Path(tmp),
               *((WIDE_CORPUS, WIDE_RECORDINGS, WIDE_TASKS) if wide else ()))


def test_rise_analyze_during_an_open_round_writes_into_that_round(tmp_path: Path) -> None:
    """scripts/run.sh killed during analysis, then `rise analyze`: its records belong to the open round r01 (they
    went to r02 before, and the round's summary showed no role call)."""
    from evolve.experiment.ledger import RoundStart

    exp = make_demo(tmp_path)
    exp.ledger.append(RoundStart(key="r01:start", round=1, incumbent="v0"))
    out = analyze(exp)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (exp.root / "rounds" / "r01" / "analysis" / "analysis.json").is_file()
    assert not (exp.root / "rounds" / "r02").exists()
