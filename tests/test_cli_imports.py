"""Every ``rise`` command starts by importing rise.cli; the heavy libraries only some commands compute with
(scipy.stats: decisions and power; openai: model calls) are imported when used, not at start (issue 42: they
were 1.4 of the 2.4 s every command, test and script spent before doing anything)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("scipy", "scipy.stats", "openai")


def test_starting_rise_imports_neither_scipy_nor_openai():
    code = f"import json, sys, rise.cli; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [], out.stdout


def test_the_lazy_distributions_are_scipys_own():
    from scipy.stats import binom as real_binom

    from validate._lazy_scipy import binom, hypergeom

    assert binom.sf(2, 5, 0.5) == real_binom.sf(2, 5, 0.5)
    assert abs(float(hypergeom.pmf(1, 10, 3, 4)) - 0.5) < 1e-12  # C(3,1) C(7,3) / C(10,4) = 105 / 210


def test_each_module_registers_exactly_the_commands_the_cli_maps_to_it():
    import importlib

    import typer
    from typer.main import get_command_name

    from rise import cli

    for module in cli.COMMAND_MODULES:
        app = typer.Typer()
        importlib.import_module(f"rise.commands.{module}").register(app)
        names = [c.name or get_command_name(c.callback.__name__) for c in app.registered_commands]
        names += [g.name or g.typer_instance.info.name for g in app.registered_groups]
        assert sorted(names) == sorted(cli.COMMANDS[module]), module
    # and no module of commands is left out of the map (its commands would be missing from `rise`)
    registering = {p.stem for p in (REPO / "rise" / "commands").glob("*.py") if "\ndef register(" in p.read_text()}
    assert registering == set(cli.COMMANDS)


def test_a_command_from_the_shell_imports_only_its_own_module():
    """`rise eval` loads the eval commands and not the controller; `rise --help` still lists every command."""
    code = ("import json, sys; sys.argv = ['rise', 'eval', '--help']; from rise import cli\n"
            "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
            "print(json.dumps([m for m in ('rise.commands.eval', 'rise.commands.evolve', 'evolve.round.controller')"
            " if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["rise.commands.eval"], out.stdout
    assert "--job-dir" in out.stdout
    listing = subprocess.run([sys.executable, "-m", "rise", "--help"], cwd=REPO, capture_output=True, text=True,
                             check=True, env={**os.environ, "COLUMNS": "200"}).stdout
    from rise import cli

    for name in cli.MODULE_OF:
        assert f" {name} " in listing, name


def test_a_mistyped_command_is_named_among_all_of_them():
    proc = subprocess.run([sys.executable, "-m", "rise.cli", "evall"], cwd=REPO, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 2 and "evall" in proc.stderr
