"""The ``rise`` command line. Each room registers its own commands from ``rise/commands/<room>.py``.

A command run from the shell (:func:`main`: the ``rise`` script, ``python -m rise``, ``python -m rise.cli``) imports
only the module that registers it, so ``rise eval`` does not pay for the evolution controller, the research
sources or the Docker client (issue 42: every ``rise`` started by importing all fifteen, 1.7 s of CPU before it did
anything). ``rise --help``, an unknown name and ``rise.cli.app`` (the tests' ``CliRunner``) load them all."""

from __future__ import annotations

import importlib
import logging
import sys

import typer

_app = typer.Typer(
    help="RiseHarness: evolve a terminal-agent harness while the model stays fixed.\n\n"
    "Run harness versions on Harbor tasks against an OpenAI-compatible model, record dual traces, "
    "check Handbooks and evaluate candidates.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)

# Each module exposes register(app), and registers these commands and command groups (tests/test_cli_imports.py
# checks them against register()); in this order `rise --help` shows them.
COMMANDS = {
    "eval": ["eval", "metrics", "compare"], "pair": ["pair"], "tasks": ["tasks"], "serve": ["serve"],
    "images": ["images"], "midharness": ["midharness"], "trace": ["trace"], "handbook": ["handbook"],
    "experiment": ["init", "freeze", "status", "snapshot", "restore"], "evolve": ["round", "reference", "evolve"],
    "transfer": ["transfer"], "inspect": ["audit", "show", "report", "record"], "research": ["research"],
    "analyze": ["analyze"], "role": ["role"],
}
COMMAND_MODULES = list(COMMANDS)
MODULE_OF = {name: module for module, names in COMMANDS.items() for name in names}
_loaded: set[str] = set()


@_app.callback()
def _main(verbose: bool = typer.Option(False, "--verbose", "-v", help="debug logging")) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def load(modules: list[str]) -> typer.Typer:
    """The app with ``modules``' commands registered (in :data:`COMMAND_MODULES` order). A module that fails to
    import is an error, never a command silently missing."""
    for name in COMMAND_MODULES:
        if name in modules and name not in _loaded:
            importlib.import_module(f"rise.commands.{name}").register(_app)
            _loaded.add(name)
    return _app


def modules_for(args: list[str]) -> list[str]:
    """The command modules a command line needs: the one registering its command, else all (help, a typo)."""
    command = next((a for a in args if not a.startswith("-")), None)
    return [MODULE_OF[command]] if command in MODULE_OF else COMMAND_MODULES


def main() -> None:
    """The ``rise`` command: loads only the module of the command asked for, then runs it."""
    load(modules_for(sys.argv[1:]))()


def __getattr__(name: str) -> typer.Typer:
    if name == "app":  # every command, for callers that drive the app themselves (CliRunner, docs)
        return load(COMMAND_MODULES)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    main()
