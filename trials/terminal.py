"""A terminal started with the sandbox: the tmux session a harness asks the environment to create as it starts.

A terminal harness's start costs round trips into the sandbox before its first prompt (through ``docker exec``
about 50 ms each on an idle machine: create the session, then read the pane until the login shell has printed
its prompt). A harness whose ``settings.toml`` says ``[tmux] with_environment = true`` gets its session created
by the environment instead, in the same command that prepares the sandbox's folders, while the sandbox starts (the
reference Harbor starts tmux during environment set-up too). The environment puts what it created in its handle
(``terminal``: the session's creation settings, :meth:`TerminalSpec.identity`); the harness adopts the session
without a round trip when those are exactly its own settings, and otherwise replaces it.

The runner reads the harness's settings as data (the ``[tmux]`` table of its ``settings.toml`` and the trial's
``tmux`` overrides) and never imports harness code: a broken candidate cannot break the evaluator here either.
Anything it cannot read means no terminal is started, and the harness starts its own as before. Only the docker
sandbox starts terminals (``Environment.starts_terminal``); the local sandbox's commands are cheap and it is
unchanged.

:func:`create_command` is the one definition of how the session is made, for the environment and for a harness
that creates its own (``trials.harness_api`` exports it), so an adopted session is the one the harness would
have made.
"""

from __future__ import annotations

import math
import shlex
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from . import harness_settings

# Exit status of the environment's start command when tmux is missing or the session could not be made (the
# sandbox itself is fine; the harness then starts its own session, and reports what goes wrong as it always did).
NOT_STARTED = 90
PROMPT_POLL_SEC = 0.02


class TerminalSpec(BaseModel):
    """The ``[tmux]`` settings that make the session (all required: a missing one means no terminal is
    started, rather than a guess at the harness's default), and how long to wait for the first prompt."""

    model_config = ConfigDict(extra="ignore")

    session_name: str
    width: int
    height: int
    shell: str
    term: str
    history_limit: int
    pane_log: str
    startup_timeout_sec: float = 5.0

    def identity(self) -> dict[str, Any]:
        """What makes the session: the handle's ``terminal``, compared by the harness with its own settings."""
        return {k: getattr(self, k) for k in IDENTITY_KEYS}


IDENTITY_KEYS = tuple(k for k in TerminalSpec.model_fields if k != "startup_timeout_sec")


def create_command(session_name: str, width: int, height: int, shell: str, term: str, history_limit: int,
                   pane_log: str) -> str:
    """One shell line that creates the session: ``history-limit`` before ``new-session`` (so it applies to the
    first pane), a login shell of a fixed size, the pane piped to ``pane_log``."""
    logfile, target = shlex.quote(pane_log), shlex.quote(session_name)
    return (f"mkdir -p \"$(dirname {logfile})\" && export TERM={shlex.quote(term)} && "
            f"tmux start-server \\; set-option -g history-limit {int(history_limit)} \\; "
            f"new-session -d -s {target} -x {int(width)} -y {int(height)} "
            f"{shlex.quote(shell)} \\; pipe-pane -t {target} {shlex.quote('cat > ' + logfile)}")


def start_script(spec: TerminalSpec, workdir: str) -> str:
    """Shell lines for the environment's start command: create the session in ``workdir`` (where a harness's
    own command would have run), then wait in the sandbox, without a round trip each, until the pane shows
    something (the login shell's prompt) or ``startup_timeout_sec`` has passed. Exits :data:`NOT_STARTED` when
    tmux is missing or the session cannot be made; falls through (status 0) otherwise."""
    target = shlex.quote(spec.session_name)
    polls = max(1, math.ceil(spec.startup_timeout_sec / PROMPT_POLL_SEC))
    create = create_command(**spec.identity())
    return (f"command -v tmux >/dev/null 2>&1 || exit {NOT_STARTED}\n"
            f"( cd {shlex.quote(workdir)} && {create} ) || exit {NOT_STARTED}\n"
            f"for _ in $(seq {polls}); do\n"
            f"  screen=$(tmux capture-pane -p -t {target} 2>/dev/null)\n"
            f"  [ -n \"${{screen//[[:space:]]/}}\" ] && break\n"
            f"  sleep {PROMPT_POLL_SEC:g}\n"
            f"done\n")


def requested(harness_dir: str | Path | None, overrides: dict[str, Any] | None = None) -> TerminalSpec | None:
    """The terminal a harness asks the environment to start (see the module docstring), or None: no harness
    folder, no readable ``settings.toml``, ``with_environment`` not true, or a creation setting missing or
    of the wrong type (the harness then starts its own session and reports any problem itself)."""
    if harness_dir is None:
        return None
    try:
        data = harness_settings.read(harness_dir)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    table = data.get("tmux")
    if not isinstance(table, dict):
        return None
    table = {**table, **harness_settings.section(overrides or {}, "tmux")}
    if table.get("with_environment") is not True:
        return None
    try:
        return TerminalSpec.model_validate(table)
    except ValidationError:
        return None
