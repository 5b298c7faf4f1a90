"""`rise init`, `rise freeze`, `rise status`: the experiment store from the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from evolve.experiment.config import ExperimentConfig
from evolve.experiment.freeze import freeze
from evolve.experiment.store import StoreError, init_experiment, open_experiment
from rise.commands import console as _console
from trials.validation import describe

console = _console.out()
ExpName = Annotated[str, typer.Argument(help="experiment name (under --runs-dir) or path")]
RunsDir = Annotated[Path, typer.Option("--runs-dir", help="where experiments live", envvar="RISE_RUNS_DIR")]


def init_cmd(
    name: Annotated[str, typer.Argument(help="experiment name; creates runs/NAME/")],
    config: Annotated[Path, typer.Option("--config", help="experiment TOML: endpoint, tasks (dev/held-out), r, "
                                         "policy")],
    runs_dir: RunsDir = Path("runs"),
    prior: Annotated[list[str] | None, typer.Option(
        "--prior", help="TASK=RATE or TASK=PASSES/RUNS: the expected pass rate of a development task, stored in "
        "[adoption] prior (power estimate before the reference corpus exists)")] = None,
    power: Annotated[bool, typer.Option("--power/--no-power", help="print the prior's power line (--no-power: "
                                        "leave it to the `rise evolve` that follows, which prints it too)")] = True,
) -> None:
    """Create an experiment: frozen experiment.toml, ledger, and a harness git repo from the seed (tag v0); then
    print what its grid can adopt from the prior (validate.power); the measured power follows the reference
    corpus, before the first evaluation."""
    from evolve.round.power import experiment_power

    try:
        cfg = ExperimentConfig.load(config)
        if prior:
            data = cfg.model_dump()
            data["adoption"]["prior"] = {**cfg.adoption.prior, **_prior_pairs(prior)}
            try:
                cfg = ExperimentConfig.model_validate(data)
            except ValidationError as exc:
                raise ValueError(f"--prior: {describe(exc, data)}") from None
        exp = init_experiment(name, cfg, runs_dir=runs_dir)
    except (ValueError, StoreError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    console.print(f"created {exp.root} (harness repo {exp.harness_dir}, tag v0 = {exp.commit_of('v0')[:10]})")
    if power:
        console.print(experiment_power(exp).line(), markup=False, soft_wrap=True)
        console.print("the measured power follows once v0's reference corpus is complete: each round prints it "
                      "before its first evaluation, beside the prior's, and books it in the ledger", markup=False,
                      soft_wrap=True)


def _prior_pairs(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        task, sep, rate = item.partition("=")
        if not sep or not task.strip() or not rate.strip():
            raise ValueError(f"--prior wants TASK=RATE or TASK=PASSES/RUNS, got {item!r}")
        out[task.strip()] = rate.strip()
    return out


def freeze_cmd(
    name: ExpName,
    version: Annotated[str, typer.Argument(help="adopted version tag, e.g. v1")],
    output: Annotated[Path, typer.Option("-o", "--output", help="file to write (.rhz)")],
    runs_dir: RunsDir = Path("runs"),
) -> None:
    """Freeze an adopted version into one file that `rise eval --agent FILE` runs anywhere."""
    try:
        manifest = freeze(open_experiment(name, runs_dir), version, output)
    except (ValueError, StoreError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    console.print(f"wrote {output}: {manifest['name']} commit {manifest['commit'][:10]}, "
                  f"{len(manifest['files'])} files, evolved for {manifest['evolved_for']['model']}")


def status_cmd(
    name: ExpName,
    runs_dir: RunsDir = Path("runs"),
) -> None:
    """Versions with their evaluations, rounds and decisions recorded in the ledger."""
    try:
        exp = open_experiment(name, runs_dir)
    except StoreError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    from evolve.views.status import print_status

    print_status(exp, console)


def snapshot_cmd(
    name: ExpName,
    output: Annotated[Path, typer.Option("-o", "--output", help="file to write (.tar.xz), outside the experiment")],
    runs_dir: RunsDir = Path("runs"),
) -> None:
    """Pack the whole experiment (ledger, config, harness repository, every grid and trial with its traces) into
    one file, to carry a night that is stopped onto another machine or checkout: `rise restore` unpacks it and
    `rise evolve --resume` goes on. Refused while a round holds the experiment. Unlike `rise record`, it holds the
    traces: the stages after a grid read them."""
    from evolve.experiment.lock import ExperimentLocked
    from evolve.experiment.snapshot import save

    try:
        info = save(open_experiment(name, runs_dir), output)
    except (StoreError, ExperimentLocked, OSError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    console.print(f"wrote {info.line()}", markup=False, highlight=False)


def restore_cmd(
    snapshot: Annotated[Path, typer.Argument(help="a file written by `rise snapshot`")],
    runs_dir: RunsDir = Path("runs"),
    show: Annotated[bool, typer.Option("--show", help="only say what the snapshot holds")] = False,
) -> None:
    """Unpack a snapshot into RUNS_DIR/<its experiment's name>, where no experiment of that name may exist; then
    `rise evolve NAME --resume` (or `bash scripts/run.sh`) goes on from where it was taken: the trial that was in
    flight then is moved aside and run again."""
    from evolve.experiment.snapshot import read, restore

    try:
        if show:
            console.print(read(snapshot).line(), markup=False, highlight=False)
            return
        info, exp = restore(snapshot, runs_dir)
    except (StoreError, OSError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    console.print(f"restored {exp.root} from {info.line()}", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.command("init")(init_cmd)
    app.command("freeze")(freeze_cmd)
    app.command("status")(status_cmd)
    app.command("snapshot")(snapshot_cmd)
    app.command("restore")(restore_cmd)
