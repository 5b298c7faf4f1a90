"""``rise report``: the static HTML report over a synthetic experiment, rendered in headless Chromium; the
spend and running-job helpers that ``rise status`` prints.

The browser test's screenshot is kept: beside the test's tmp folder it is copied to ``$RISE_TEST_ARTIFACTS/
report.png`` (default ``runs/artifacts/report.png`` in the checkout, where ``.ci/run`` leaves it)."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evolve.views.report import build_report, experiment_spend, render_report, running_jobs, write_report
from rise.cli import app
from tests.test_report_support import DEV, build_experiment

runner = CliRunner()
ARTIFACTS = Path(os.environ.get("RISE_TEST_ARTIFACTS") or Path(__file__).resolve().parents[1] / "runs" / "artifacts")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH")


@pytest.fixture(scope="module")
def exp(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    return build_experiment(root / "runs", root)


# ---------------------------------------------------------------------------------------------- helpers
class _Dom(HTMLParser):
    """Elements of a dumped DOM as (tag, attrs) plus the page text."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data):
        self.text.append(data)

    def find(self, tag: str, **attrs: str) -> list[dict[str, str]]:
        return [a for t, a in self.elements if t == tag and all(
            v in a.get(k.replace("_", "-").replace("cls", "class"), "").split() or a.get(
                k.replace("_", "-").replace("cls", "class")) == v for k, v in attrs.items())]


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--no-first-run", f"--user-data-dir={profile}", *args],
                          check=False, capture_output=True, text=True, timeout=120)


def png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit RGB/RGBA non-interlaced PNG (what Chromium writes) into rows of pixel bytes."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
            assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, bpp, rows


# ------------------------------------------------------------------------------------------------ tests
def test_report_model(exp):
    rep = build_report(exp)
    assert [c.label for c in rep.columns] == ["v0", "r01 verify → v1", "r01 harmful", "r02 flaky"]
    assert [c.status for c in rep.columns] == ["seed", "adopted", "rejected", "blocked"]
    assert rep.tasks == sorted(DEV)
    by = {c.slug: c for c in rep.candidates}
    assert by["verify"].version == "v1" and by["verify"].checks == {"smoke": "passed", "contracts": "passed",
                                                                    "screening": "passed"}
    assert by["harmful"].regressions == ["alpha"] and by["harmful"].comparison.counts["regressed"] == 1
    assert by["flaky"].status == "blocked" and by["flaky"].blocked_cells == [
        "alpha#3: infra:model_unreachable", "gamma#2: infra:model_unreachable"]
    assert [r["adopted"] for r in rep.rounds] == ["v1", None] and rep.rounds[1]["blocked"] == 1
    assert rep.columns[0].heldout.metrics.pass_at_1 == 0.25 and rep.columns[1].heldout.metrics.pass_at_1 == 0.75
    # 16 trials per dev grid (v0, verify, harmful, flaky), 4 per held-out grid (v0, v1); the v1 reference link
    # points at verify's evaluation and is not counted twice
    assert rep.total_spend.trials == 16 * 4 + 4 * 2
    assert rep.columns[1].ref.cost.generator.input_tokens == 16 * 1500
    assert rep.total_spend.usd == pytest.approx(2e-6 * (16 * 1000 + 16 * 1500 + 16 * 800 + 16 * 1200 + 8 * 1000))
    assert set(experiment_spend(exp)) == {"versions", "rounds"}
    html = render_report(rep)
    assert "<script" not in html and not re.search(r'(src|href)="(https?:)?//', html)  # nothing from the network


def test_running_jobs_seen_through_their_lock(exp):
    job = exp.root / "rounds" / "r02" / "flaky" / "evaluation"
    (job / "zeta__r1").mkdir()  # a trial in flight: no result.json yet
    fd = os.open(job / "job.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        assert running_jobs(exp) == []
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        jobs = running_jobs(exp)
        assert [(j["job_dir"], j["pid"], j["done"], j["total"], j["in_flight"]) for j in jobs] == [
            ("rounds/r02/flaky/evaluation", os.getpid(), 16, 16, ["zeta__r1"])]
        res = runner.invoke(app, ["status", str(exp.root)])
        assert res.exit_code == 0, res.output
        assert "running: rounds/r02/flaky/evaluation" in res.output and "in flight: zeta__r1" in res.output
        assert "spend: 72 trials" in res.output
    finally:
        os.close(fd)
        (job / "zeta__r1").rmdir()
    assert running_jobs(exp) == []
    assert "running: nothing" in runner.invoke(app, ["status", str(exp.root)]).output


@needs_chromium
def test_report_renders_in_headless_chromium(exp, tmp_path):
    res = runner.invoke(app, ["report", str(exp.root)])
    assert res.exit_code == 0, res.output
    page = exp.root / "report.html"
    assert page.is_file()

    dumped = _chromium(tmp_path / "profile", "--dump-dom", page.as_uri())
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dom = _Dom()
    dom.feed(dumped.stdout)
    text = " ".join(dom.text)
    cells = dom.find("rect", cls="cell")
    assert len(cells) == 4 * 4 and {c["data-task"] for c in cells} == set(DEV)
    rate = {(c["data-task"], c["data-column"]): c["data-rate"] for c in cells}
    assert rate[("beta", "v0")] == "0.000" and rate[("beta", "r01 verify → v1")] == "1.000"
    assert rate[("alpha", "r02 flaky")] == "1.000"  # 3/3 observed, one ⊥
    points = {p["data-column"]: float(p["data-pass1"]) for p in dom.find("circle", cls="point")}
    assert points == {"v0": 0.375, "r01 verify → v1": 0.75, "r01 harmful": 0.125, "r02 flaky": 0.7857}
    assert len(dom.find("line", cls="ci")) == 4 and len(dom.find("path", cls="heldout")) == 2
    assert dom.find("rect", cls="flip") and dom.find("rect", cls="cost")
    assert [d["data-status"] for d in dom.find("div", cls="card")] == ["adopted", "rejected", "blocked"]
    assert "Why it could not adopt" in text and "alpha#3: infra:model_unreachable" in text
    assert "Regressions of stable passes: alpha" in text
    assert "Executable completion verification" in text  # v1's Handbook diff
    assert "loop.verify_completion" in text and "sealed" in text
    assert dom.find("table", id="heldout-table") and dom.find("table", id="cost-table")

    # the morning page: per round, tiers, decisions with false adoption and power, grades, diffs, transfer
    rounds = dom.find("section", cls="morning-round")
    assert [(m["data-round"], m["data-outcome"]) for m in rounds] == [("1", "adopted v1"), ("2", "in progress")]
    tiers = {t["data-slug"]: t["data-tier"] for t in dom.find("tr") if "data-tier" in t}
    assert tiers == {"verify": "code", "harmful": "settings", "flaky": "code (no tier recorded)"}
    assert "power 82.9% at +0.15 against this baseline" in text and "measured false adoption 43.7%" in text
    assert dom.find("details", cls="morning-handbook") and dom.find("details", cls="morning-diff")
    assert dom.find("table", cls="transfer")
    rows = {(t["data-model"], t["data-split"], t["data-task"]): t["data-difference"] for t in dom.find("tr")
            if "data-model" in t}
    # held-out with the fixed model: v0 1/4, v1 3/4; second model (SMALL): beta 0/2 -> 1/2, gamma 1/2 -> 2/2
    assert rows[("scripted-model", "held-out", "sealed")] == "0.500"
    assert rows[("small-model", "development", "beta")] == "0.500"
    assert rows[("small-model", "development", "all")] == "0.250"  # (0 + 0.5 + 0 + 0.5) / 4
    assert rows[("small-model", "held-out", "sealed")] == "0.500"
    assert "versions/v1/synth-v1.rhz" in text and "second model" in text

    shot = tmp_path / "report.png"
    done = _chromium(tmp_path / "profile", f"--screenshot={shot}", "--window-size=1200,6400", page.as_uri())
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy2(shot, ARTIFACTS / "report.png")  # the test artefact (see the module docstring)
    width, bpp, rows = png_pixels(shot)
    colours: dict[bytes, int] = {}
    for row in rows[::3]:
        for x in range(0, width * bpp, bpp * 3):
            px = row[x:x + 3]
            colours[px] = colours.get(px, 0) + 1
    white = colours.get(b"\xff\xff\xff", 0)
    assert white < 0.97 * sum(colours.values()), "the screenshot is (almost) blank"
    assert len(colours) > 50
    # the heat map's pure colours: all-pass green and all-fail red cells are on the page
    assert colours.get(bytes((26, 152, 80)), 0) > 20 and colours.get(bytes((215, 48, 39)), 0) > 20


def test_report_default_path_and_atomic(exp, tmp_path):
    out = write_report(exp, tmp_path / "sub" / "r.html")
    assert out.read_text().startswith("<!DOCTYPE html>") and not list(out.parent.glob("*.tmp"))


def test_report_of_a_fresh_experiment(tmp_path):
    """Just initialised: no grids, no rounds; the page still renders and says so."""
    from evolve.experiment.config import ExperimentConfig
    from evolve.experiment.store import init_experiment
    from tests.test_report_support import make_seed

    cfg = ExperimentConfig.model_validate({"name": "empty", "endpoint": {"base_url": "http://x/v1", "model": "m"},
                                           "tasks": {"dir": "tasks"}})
    exp = init_experiment("empty", cfg, runs_dir=tmp_path / "runs", seed_dir=make_seed(tmp_path))
    html = write_report(exp).read_text()
    assert "No candidates yet." in html and "No version adopted yet." in html and "no grid" in html
    res = runner.invoke(app, ["show", str(exp.root), "v0"])
    assert res.exit_code == 0 and "status: seed" in res.output


def test_a_candidate_whose_evaluation_is_under_way_says_how_far_it_is_and_its_baseline(tmp_path):
    """The night of 2026-12-07 was stopped 20 trials into its candidate's evaluation: the morning page said "116
    cell(s) of the evaluation are ⊥ or missing" and no baseline Pass@1. It now tells the cells not run from the ⊥
    ones, and gives the baseline's own Pass@1 where the comparison pairs no task yet."""
    from evolve.experiment.ledger import RoundStart
    from tests.test_report_support import F, P, X, _candidate, write_job

    exp = build_experiment(tmp_path / "runs", tmp_path)
    exp.ledger.append(RoundStart(key="r03:start", round=3, incumbent="v1"))

    def edit(wt):
        (wt / "loop.py").write_text((wt / "loop.py").read_text() + "\n# stopped halfway\n")

    _candidate(exp, 3, "halfway", edit)
    job = write_job(exp.root / "rounds" / "r03" / "halfway" / "evaluation",
                    {"alpha": [P, X, P, F], **{t: [P, P, P, P] for t in DEV if t != "alpha"}})
    for t in DEV:  # alpha ran its four (one ⊥), the others their first run only
        for k in (2, 3, 4):
            if t != "alpha":
                shutil.rmtree(job / f"{t}__r{k}")
    (row,) = [c for c in build_report(exp).candidates if c.slug == "halfway"]
    assert row.status == "pending"
    assert row.reason.startswith("not decided yet: 9 of 16 trials of the evaluation not run, 1 ⊥ to rerun; ")
    assert row.baseline_pass_at_1 == 0.75  # v1's reference (the verify grid: 12 of 16), which the decision reads
    assert len(row.blocked_cells) == 10


def test_a_rejected_candidate_says_what_it_would_have_needed(exp):
    """The morning after a night that adopted nothing asks how close the best candidate came: harmful (2 of 16
    against v0's 6 of 16) needed 5 more passes under paper (7 of 16 is the first count above 0.375)."""
    from evolve.views.night import _render

    rep = build_report(exp)
    by = {c.slug: c for c in rep.candidates}
    assert by["harmful"].needed.startswith("it had 2 passes of 16 runs (Pass@1 0.125); adoption under paper needed 5 "
                                           "more (Pass@1 0.438 against the baseline's 0.375")
    assert "; measured gain -0.250 in Pass@1 (" in by["harmful"].needed  # 2 of 16 against 6 of 16, per task after
    assert by["verify"].needed == "" and by["flaky"].needed == ""  # adopted; blocked
    page = _render("morning.md.j2", name="synth", rounds=rep.morning, night=rep.night)
    assert "\n- rejected `harmful`: it had 2 passes of 16 runs" in page
    html = render_report(rep)
    assert '<ul class="needed"><li data-slug="harmful">rejected <code>harmful</code>: it had 2 passes' in html


def test_a_rejected_candidates_gain_is_shown_per_task_beside_what_the_grid_detects():
    """The night of 2026-12-07: verify-completion, curtailed at 127 of 136, against the reference corpus."""
    from evolve.views.report import _gains

    def cells(passed: int, runs: int) -> list[bool | None]:
        return [True] * passed + [False] * (runs - passed)

    tasks = ["count-lines", "hello-file", "project-skeleton", "write-json"]
    cand = {"count-lines": cells(22, 32), "hello-file": cells(21, 32), "project-skeleton": cells(10, 32),
            "write-json": cells(14, 31)}
    corpus = {"count-lines": cells(21, 34), "hello-file": cells(25, 34), "project-skeleton": cells(9, 34),
              "write-json": cells(9, 34)}
    assert _gains(cand, corpus, tasks, 0.13) == (
        "; measured gain +0.057 in Pass@1 (count-lines +0.07, hello-file -0.08, project-skeleton +0.05, "
        "write-json +0.19) against the +0.13 this grid detects with 80 % power")
    cand["write-json"] = [None] * 31  # every run ⊥: no rate for that task, left out of the pooled gain too
    assert "write-json" not in _gains(cand, corpus, tasks, None) and "detects" not in _gains(cand, corpus, tasks, None)
    assert _gains({}, corpus, tasks, 0.13) == ""
