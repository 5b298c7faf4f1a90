"""The ``rise`` command line. Each room registers its own commands from ``rise/commands/<room>.py``."""

from __future__ import annotations

import importlib
import logging

import typer

app = typer.Typer(
    help="RiseHarness: evolve a terminal-agent harness while the model stays fixed.\n\n"
    "Run harness versions on Harbor tasks against an OpenAI-compatible model, record dual traces, "
    "check Handbooks and evaluate candidates.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)

# Each module exposes register(app); listed here so `rise --help` shows them in this order.
COMMAND_MODULES = ["eval", "pair", "tasks", "serve", "images", "midharness", "trace", "handbook", "experiment", "evolve", "transfer", "inspect", "research", "analyze", "role"]


@app.callback()
def _main(verbose: bool = typer.Option(False, "--verbose", "-v", help="debug logging")) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


for _name in COMMAND_MODULES:  # a module that fails to import is an error, never a command silently missing
    importlib.import_module(f"rise.commands.{_name}").register(app)

if __name__ == "__main__":
    app()
