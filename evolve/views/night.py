"""``rise record``: a night's compact record, small enough to commit (``docs/nights/<date>/``), written from the
experiment's store at every stop of the main job (each run rewrites it with the state of that moment).

Every file comes from the view that the matching command uses, never recomputed here: ``status.txt``
(:func:`evolve.views.status.print_status`), ``show/<version or candidate>.txt``
(:func:`evolve.views.show.show_text`),
``audit.txt`` (:func:`evolve.experiment.audit.audit`), ``report.html`` and the morning page ``morning.md``
(:func:`evolve.views.report.build_report`, :mod:`evolve.views.morning`), the power lines
(:func:`evolve.round.power.experiment_power`, :mod:`evolve.views.power`), the time split per grid
(:mod:`evolve.views.timing`), where the night stands (:mod:`evolve.views.resume`); the tables of trials, stages
and decisions are :mod:`evolve.views.night_tables`, the stops and resumes :mod:`evolve.views.stretches`.
``report.png`` is the report in headless Chromium when one is on PATH. The experiment is only read; the record may
not be written inside it.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
from rich.console import Console

from evolve.experiment.audit import Audit, audit
from evolve.experiment.store import Experiment
from evolve.views import night_tables as tables
from evolve.views.report import Report, build_report, render_report

TEMPLATES = Path(__file__).resolve().parent / "templates"
WINDOW = "1280,7200"  # the screenshot's size: the report's first 7200 px at 1280 wide
WHAT = {
    "README.md": "this index",
    "config.toml": "the frozen experiment config (`experiment.toml`)",
    "ledger.jsonl": "the ledger, copied whole: every event with its numbers",
    "trials.csv": "one line per trial of every grid: arm, version, task, repetition, status, reward, episodes, "
                  "agent and total seconds, times, machine load, model calls and speeds, tokens",
    "decisions.md": "each decision (adoption, rejection, ⊥-blocked) with its reason, policy and numbers",
    "decisions.json": "the same, as booked (the decision's whole record)",
    "power.md": "the power line as the grid stands, and each round's booked power (measured and the prior's)",
    "stages.md": "time per stage (start, end, units) from the ledger; per grid, where its trials' time went",
    "resumes.md": "where the night stands, its stretches of work and the stops between them, the stops the loop "
                  "booked, what kills cut off",
    "status.txt": "`rise status`", "audit.txt": "`rise audit`", "morning.md": "the morning page",
    "report.html": "`rise report` (one static page)", "report.png": "a screenshot of the report",
}


@dataclass
class NightRecord:
    out: Path
    sizes: dict[str, int] = field(default_factory=dict)  # file (relative to out) -> bytes
    screenshot: str = ""  # what became of the screenshot
    snapshot: str = ""  # the snapshot beside the record (``rise record --snapshot``), in words; "" when none

    @property
    def total(self) -> int:
        return sum(self.sizes.values())


def _status_text(exp: Experiment) -> str:
    from evolve.views.status import print_status

    buf = io.StringIO()
    print_status(exp, Console(file=buf, width=120, highlight=False, soft_wrap=True, color_system=None))
    return buf.getvalue()


def _show_texts(exp: Experiment, report: Report) -> dict[str, str]:
    """``rise show`` of each adopted version and of each candidate not adopted (an adopted one is its version)."""
    from evolve.views.show import show_text, version_view

    views = list(report.views) + [version_view(exp, c.branch) for c in report.candidates if c.status != "adopted"]
    return {f"show/{v.label.replace('/', '-')}.txt": show_text(exp, v) for v in views}


def _power_lines(exp: Experiment, report: Report) -> list[str]:
    from evolve.round.power import experiment_power

    out = ["# Power", "", "As the grid stands now (the line `rise evolve` prints before its first round):", "",
           f"- {experiment_power(exp).line()}"]
    for m in report.morning:
        out += ["", f"## Round {m.round}", "", f"- {m.power.measured}"]
        out += [f"- {line}" for line in (m.power.prior, m.saved) if line]
    return out


def _stages_lines(exp: Experiment, report: Report) -> list[str]:
    from trials.time_split import render_split

    how = ("From the ledger (an event is booked when its unit ends; a trial's start is its `started_at`, a role "
           "call's its seconds before the event). Times UTC.")
    out = ["# Time per stage", "", how, "",
           "| round | stage | start | end | span | units | unit time |", "|---|---|---|---|---|---|---|"]
    rows = tables.stage_rows(exp)
    out += [f"| {s.round} | {s.stage} | {s.start[:19]} | {s.end[:19]} | {s.span_s / 60:.1f} min | {s.units} | "
            f"{s.unit_s / 60:.1f} min |" for s in rows]
    out = out if rows else [*out[:-2], "No event booked yet."]
    out += ["", "# Time per grid", ""]
    for row in report.time:
        out += [f"## {row.label}", "", "```", render_split(row.split, row.load), "```", ""]
    return out if report.time else [*out, "No grid has results yet."]


def _resumes_lines(exp: Experiment, night: list[str], checked: Audit, trials: list[dict]) -> list[str]:
    from evolve.views.stretches import stop_lines

    return ["# Stops and resumes", "", "## Where the night stands", "", "```",
            *night, "```", "", *stop_lines(exp, trials, checked)]


def _trials_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=tables.TRIAL_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def _render(template: str, **data) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, autoescape=False, trim_blocks=True, lstrip_blocks=True)
    env.filters["cell"] = lambda text: str(text).replace("|", "\\|").replace("\n", " ")
    return env.get_template(template).render(**data)


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def screenshot(page: Path, png: Path, browser: str | None) -> str:
    """``page`` rendered by headless ``browser`` into ``png``; returns what happened, in words."""
    if browser is None:
        return "not taken: no chromium on PATH"
    with tempfile.TemporaryDirectory(prefix="rise-record-") as profile:
        try:
            done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                                   "--no-first-run", f"--user-data-dir={profile}", f"--screenshot={png}",
                                   f"--window-size={WINDOW}", page.resolve().as_uri()],
                                  check=False, capture_output=True, text=True, timeout=180)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"not taken: {browser} failed ({exc})"
    if done.returncode != 0 or not png.is_file():
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"not taken: {browser} exited {done.returncode} ({tail})"
    return f"`report.png`, the report's first {WINDOW.split(',')[1]} px at {WINDOW.split(',')[0]} wide ({browser})"


def _files(exp: Experiment) -> tuple[dict[str, str | bytes], Report]:
    """Every file of the record but the screenshot and the index, by its name in the record; and the report they
    were read from."""
    report = build_report(exp)
    checked = audit(exp)
    trials = tables.trial_rows(exp)
    files: dict[str, str | bytes] = {
        "config.toml": exp.config_path.read_bytes(),
        "ledger.jsonl": exp.ledger.path.read_bytes() if exp.ledger.path.is_file() else b"",
        "trials.csv": _trials_csv(trials),
        "decisions.md": "\n".join(tables.decision_lines(records := tables.decision_records(exp))).rstrip() + "\n",
        "decisions.json": json.dumps(records, indent=1, default=str) + "\n",
        "power.md": "\n".join(_power_lines(exp, report)) + "\n",
        "stages.md": "\n".join(_stages_lines(exp, report)) + "\n",
        "resumes.md": "\n".join(_resumes_lines(exp, report.night, checked, trials)) + "\n",
        "status.txt": _status_text(exp),
        "audit.txt": "\n".join(checked.lines()) + "\n",
        "morning.md": _render("morning.md.j2", name=exp.config.name, rounds=report.morning,
                               night=report.night),
        "report.html": render_report(report),
        **_show_texts(exp, report),
    }
    return files, report


SNAPSHOT = "snapshot.tar.xz"


def write_record(exp: Experiment, out: Path, take_screenshot: bool = True, snapshot: bool = False) -> NightRecord:
    """Write the night's record of ``exp`` into ``out`` (see the module docstring); files of an earlier run are
    replaced, and a screenshot not taken this time is removed rather than left stale. With ``snapshot``, the whole
    experiment is packed beside it (:mod:`evolve.experiment.snapshot`), so the night can resume on a machine that
    has lost it; an older snapshot there is left as it is when none is taken."""
    out = Path(out).absolute()
    if out.resolve().is_relative_to(exp.root.resolve()):
        raise ValueError(f"{out}: the record may not be written inside the experiment {exp.root}")
    files, report = _files(exp)
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out / "show", ignore_errors=True)  # versions and candidates as they are now
    rec = NightRecord(out)
    for name, data in files.items():
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
        rec.sizes[name] = path.stat().st_size
    (out / "report.png").unlink(missing_ok=True)
    if take_screenshot:
        rec.screenshot = screenshot(out / "report.html", out / "report.png", chromium())
        if (out / "report.png").is_file():
            rec.sizes["report.png"] = (out / "report.png").stat().st_size
    else:
        rec.screenshot = "not taken: --no-screenshot"
    from evolve.experiment.snapshot import read, save

    info = save(exp, out / SNAPSHOT) if snapshot else read(out / SNAPSHOT) if (out / SNAPSHOT).is_file() else None
    if info is not None:
        rec.snapshot = (f"[{SNAPSHOT}]({SNAPSHOT}), {info.size:,} bytes: the whole experiment as it was at "
                        f"{info.taken[:19]} UTC ({info.events} ledger events), traces and harness repository "
                        f"included, to resume the night where that machine is gone: `rise restore` unpacks it "
                        f"(`bash scripts/run.sh --restore {_shown(out / SNAPSHOT)}` does that, then resumes)")
    _write_index(exp, rec, report.night[0])
    return rec


def _shown(path: Path) -> str:
    """``path`` as a command run from the current folder (the checkout) would name it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _write_index(exp: Experiment, rec: NightRecord, night: str) -> None:
    """``README.md``: every file with its size and the total, this index's own size included (rendered until the
    size it states is its own)."""
    state = night.removeprefix(f"{exp.root}: ")
    written = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")[:19]
    size, text = 0, ""
    for _ in range(8):
        sizes = {**rec.sizes, "README.md": size}
        rows = [{"name": n, "size": s, "what": WHAT.get(n) or WHAT_SHOW} for n, s in sorted(sizes.items())]
        text = _render("night.md.j2", name=exp.config.name, written=written, root=exp.root,
                       state=f"State: {state}.", total=sum(sizes.values()), files=rows, screenshot=rec.screenshot,
                       snapshot=rec.snapshot)
        if len(text.encode("utf-8")) == size:
            break
        size = len(text.encode("utf-8"))
    (rec.out / "README.md").write_text(text, encoding="utf-8")
    rec.sizes["README.md"] = size


WHAT_SHOW = "`rise show` of this version or candidate: its diffs, settings, evaluation against its baseline"
