"""The researcher role on the role runtime, against a scripted OpenAI-compatible server (real HTTP, no model):
its tools search and read the corpus, cited ids are checked against what the call's searches returned and
re-verified, the search record is kept when nothing is found, and the ablation calls no model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from evolve.roles.researcher import NO_PRECEDENT, ResearcherInputs, research_group
from evolve.roles.runtime import make_backend, read_transcript
from research.api import Research, ResearchSettings
from trials.endpoints.scripted import ScriptedServer
from trials.endpoints.spec import EndpointSpec

LOOP = '''def finish(agent, claim):
    """Before accepting a completion claim, ask the model to confirm once and run the checks."""
    if not agent.confirmed:
        agent.confirmed = True
        return "Are you sure the task is complete? Verify first."
    return agent.run_checks()
'''
GROUP = ResearcherInputs(group="premature completion", behaviours=["completion.claim"], tasks=["hello-file"],
                         wish="verify the work before accepting the model's completion claim")


@pytest.fixture
def research(tmp_path: Path) -> Research:
    for name, text in (("alpha", LOOP), ("beta", LOOP.replace("finish", "complete_task"))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "agent.py").write_text(text)
    corpus = tmp_path / "corpus.toml"
    corpus.write_text('version = 1\n[[sources]]\nkind = "local"\nname = "alpha"\npath = "alpha"\n'
                      '[[sources]]\nkind = "local"\nname = "beta"\npath = "beta"\n')
    r = Research(ResearchSettings(corpus=str(corpus)), root=tmp_path / "cache")
    r.sync(log=lambda m: None)
    return r


def call(name: str, **args) -> dict:
    return {"content": "", "tool_calls": [{"name": name, "arguments": args}]}


def _ids_seen(body: dict) -> list[str]:
    """Reference ids in the tool results the model has been shown so far."""
    text = "\n".join(m.get("content") or "" for m in body["messages"] if m["role"] == "tool")
    return re.findall(r"id=([0-9a-f]{12})", text)


def _backend(srv: ScriptedServer):
    return make_backend("openai", EndpointSpec(base_url=srv.base_url, model="scripted"))


def test_references_are_checked_against_the_calls_searches(research: Research, tmp_path: Path) -> None:
    def model(body: dict) -> dict:
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if turn == 0:
            return call("search_corpus", query="verify completion claim")
        if turn == 1:
            return call("read_reference", ref="0123456789ab")  # never returned: the tool refuses
        if turn == 2:
            return call("read_reference", ref=_ids_seen(body)[0])
        first, second = _ids_seen(body)[:2]
        return call("final_answer", questions=["verify completion claim"], conclusion="both confirm once",
                    references=[{"ref": first, "how": "asks the model to confirm once, then runs checks"},
                                {"ref": second, "how": "the same confirmation before completing the task"},
                                {"ref": "fedcba987654", "how": "an id the model made up entirely"}])

    with ScriptedServer(model) as srv:
        out = research_group(GROUP, tmp_path, _backend(srv), research, transcripts=tmp_path / "tr")
        requests = srv.requests
    assert out.outcome == "references" and out.statement.startswith("2 references from 2 frameworks")
    assert {c.reference.framework for c in out.references} == {"alpha", "beta"}
    assert all(c.verification.ok and c.reference.sha256 == c.verification.actual_sha256 for c in out.references)
    assert [r.ref for r in out.rejected] == ["fedcba987654"]
    assert [s.query for s in out.searches] == ["verify completion claim"] and len(out.read) == 1
    tool_msgs = [m["content"] for m in requests[-1]["messages"] if m["role"] == "tool"]
    assert "was not returned by search_corpus" in tool_msgs[1] and "sha256 verified" in tool_msgs[2]
    rows = read_transcript(Path(out.transcript))
    assert [r["tool"] for r in rows if r["kind"] == "tool_call"] == ["search_corpus", "read_reference",
                                                                      "read_reference"]
    # the outcome round-trips as JSON (what a round folder keeps)
    assert json.loads(out.model_dump_json())["references"][0]["reference"]["path"] == "agent.py"


def test_nothing_found_is_an_explicit_outcome_with_its_search_record(research: Research, tmp_path: Path) -> None:
    script = [call("search_corpus", query="kubernetes autoscaler"), call("search_corpus", query="gpu quota"),
              call("final_answer", questions=["kubernetes autoscaler", "gpu quota"], references=[],
                   conclusion="no framework here scales clusters")]
    with ScriptedServer(script) as srv:
        out = research_group(GROUP, tmp_path, _backend(srv), research, transcripts=tmp_path / "tr")
    assert out.outcome == "no_precedent" and out.statement == NO_PRECEDENT
    assert [(s.query, s.references) for s in out.searches] == [("kubernetes autoscaler", []), ("gpu quota", [])]
    logged = [json.loads(x)["query"] for x in (research.root / "searches.jsonl").read_text().splitlines()]
    assert logged[-2:] == ["kubernetes autoscaler", "gpu quota"]


def test_ablation_calls_no_model(research: Research, tmp_path: Path) -> None:
    off = Research(research.settings.model_copy(update={"external_research": False}), root=research.root)
    with ScriptedServer([]) as srv:
        out = research_group(GROUP, tmp_path, _backend(srv), off)
        assert srv.requests == []
    assert out.outcome == "disabled" and "--no-external-research" in out.statement and not out.searches


def test_a_repeated_search_reads_the_next_unread_hit(research: Research, tmp_path: Path) -> None:
    """The bundled 1.5B searched the same words again and again and read nothing: a repeated search reads the best
    hit not read yet (hash-checked, recorded as read); once every hit is read it says so and lists them again."""
    q = "verify completion claim"
    script = [call("search_corpus", query=q), call("search_corpus", query="Verify completion claim "),
              call("search_corpus", query=q), call("search_corpus", query=q),
              call("final_answer", questions=[q], references=[], conclusion="nothing handles it")]
    with ScriptedServer(script) as srv:
        out = research_group(GROUP, tmp_path, _backend(srv), research, transcripts=tmp_path / "tr")
        shown = [m["content"] for m in srv.requests[-1]["messages"] if m["role"] == "tool"]
    hits = re.findall(r"id=([0-9a-f]{12})", shown[0])
    assert shown[0].startswith("2 references") and len(hits) == 2
    # second and third search: hit 1, then hit 2, each read in full from its pinned source
    for text, ref in ((shown[1], hits[0]), (shown[2], hits[1])):
        assert text.startswith("You searched") and f"cite id={ref}" in text and "sha256 verified" in text
        assert "Before accepting a completion claim" in text  # the unit's own lines, not the excerpt list
    assert out.read == hits  # reads made for the model are in the search record like any other
    assert "you have read every hit" in shown[3] and "2 references for" in shown[3]
    assert len(out.searches) == 4 and out.outcome == "no_precedent"


def test_a_repeated_read_moves_on_to_the_next_unread_hit(research: Research, tmp_path: Path) -> None:
    """The bundled 1.5B, once it read a hit, read the same one five times over: a repeated read reads the next
    unread hit of the latest search instead; once all are read it says to answer."""
    q = "verify completion claim"
    first: dict[str, str] = {}

    def reply(body: dict) -> dict:  # search, then read its first hit over and over, then answer
        turn = sum(1 for m in body["messages"] if m["role"] == "tool")
        if turn == 0:
            return call("search_corpus", query=q)
        if turn < 4:
            first.setdefault("id", _ids_seen(body)[0])
            return call("read_reference", ref=first["id"])
        return call("final_answer", questions=[q], references=[], conclusion="nothing handles it")

    script = reply
    with ScriptedServer(script) as srv:
        out = research_group(GROUP, tmp_path, _backend(srv), research, transcripts=tmp_path / "tr")
        shown = [m["content"] for m in srv.requests[-1]["messages"] if m["role"] == "tool"]
    hits = re.findall(r"id=([0-9a-f]{12})", shown[0])
    assert first["id"] == hits[0] and "sha256 verified" in shown[1]
    assert shown[2].startswith(f"You read {hits[0]} already") and f"cite id={hits[1]}" in shown[2]
    assert "Before accepting a completion claim" in shown[2]  # the next hit's own lines
    assert "every hit of your searches" in shown[3] and "Answer now" in shown[3]
    assert out.read == hits


def test_a_read_reference_the_conclusion_names_is_cited(research: Research, tmp_path: Path) -> None:
    """The bundled 1.5B read OpenHands' TaskManager._run_until_finished, wrote in its conclusion that it handles the
    problem, and listed no reference: a reference the call read and whose unit the conclusion names is cited, with
    the sentence that names it; one only searched, never read, is not."""
    def reply(body: dict) -> dict:
        turn = sum(1 for m in body["messages"] if m["role"] == "tool")
        if turn == 0:
            return call("search_corpus", query="verify completion claim")
        ids = _ids_seen(body)
        if turn == 1:
            return call("read_reference", ref=ids[0])
        return call("final_answer", questions=["q"], references=[], conclusion=(
            "Both frameworks confirm first. The finish function asks the model once, then runs the checks! "
            "complete_task does the same."))

    with ScriptedServer(reply) as srv:
        out = research_group(GROUP, tmp_path, _backend(srv), research, transcripts=tmp_path / "tr")
    read = out.searches[0].references[0]
    assert out.read == [read.id] and read.unit in ("finish", "complete_task")
    [cited] = out.references
    assert cited.reference.id == read.id and cited.from_conclusion and cited.verification.status == "match"
    expected = ("The finish function asks the model once, then runs the checks!" if read.unit == "finish"
                else "complete_task does the same.")
    assert cited.note.how == expected
    assert out.outcome == "references" and out.statement.endswith("(1 named in the conclusion, not listed)")
