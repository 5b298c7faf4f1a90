"""The sandbox interface every environment implements (docker, local).

A harness running in its own subprocess reconnects to a started environment with
:func:`trials.environments.factory.attach`, from the
JSON-able ``handle()`` the runner wrote into the trial spec: a confined harness gets a ``channel`` handle (the
runner serves exec/upload/download of its sandbox, trials/channel.py); the platform's own agents (the oracle)
get the sandbox's own handle.
"""

from __future__ import annotations

import abc
import shlex
from pathlib import Path
from typing import Any

from pydantic import BaseModel


class ExecResult(BaseModel):
    """Outcome of one command run inside the sandbox."""

    returncode: int
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def in_workdir(cmd: str, cwd: str) -> str:
    """``cmd`` as a ``bash -c`` script that starts in ``cwd``, or in ``/`` when ``cwd`` is gone.

    Every sandbox runs its commands from ``/`` through this. Entering a missing folder fails the command
    before it starts (``env -C``, ``docker exec -w``), so an agent that deleted its workdir (``rm -rf /app``: the
    1.5B did it on the night of 2026-12-07) made the harness's own tmux calls fail, its sandbox look gone, and the
    trial ⊥: not the agent's failure but an infrastructure fault, rerun and never counted. The agent's terminal
    lives on in a real container; its control calls now do too, and what the agent did is judged by the verifier."""
    return f"cd -- {shlex.quote(cwd)} 2>/dev/null || cd /\n{cmd}"


class Environment(abc.ABC):
    """One sandbox for one trial. All methods are async; ``exec`` runs ``cmd`` with ``bash -c``."""

    kind: str = "abstract"
    # Whether :meth:`start` also starts the terminal in ``terminal_request`` (see trials/terminal.py; the runner
    # sets the request before ``start``); ``terminal`` is then what was started (its identity), else None.
    # A harness reads ``terminal`` from the environment it attached to.
    starts_terminal: bool = False
    terminal_request: Any = None  # a trials.terminal.TerminalSpec
    terminal: dict[str, Any] | None = None

    @abc.abstractmethod
    async def start(self) -> None:
        """Bring the sandbox up (build the image if needed). Raises InfraError subclasses."""

    @abc.abstractmethod
    async def exec(
        self,
        cmd: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
        user: str | None = None,
    ) -> ExecResult:
        """Run ``cmd`` (a shell string) inside the sandbox; a timeout kills it and sets ``timed_out``."""

    @abc.abstractmethod
    async def upload(self, src: Path, dst: str) -> None:
        """Copy a host file or directory ``src`` to ``dst`` inside the sandbox."""

    @abc.abstractmethod
    async def download(self, src: str, dst: Path) -> None:
        """Copy ``src`` inside the sandbox (file or directory) to the host path ``dst``."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Tear the sandbox down; idempotent."""

    @abc.abstractmethod
    def handle(self) -> dict[str, Any]:
        """A JSON-able description another process can :func:`~trials.environments.factory.attach` to (must
        include ``kind``)."""

    async def verifier_target(self) -> dict[str, Any] | str:
        """Where the verifier's private run enters this sandbox (see trials/environments/verifier.py): a dict
        with ``pid`` (a host pid holding the sandbox's namespaces), ``cgroups`` (join its cgroups too) and
        ``env`` (the sandbox's environment variables); or a string saying why only the shared mode is possible."""
        return f"the {self.kind} sandbox has no private verifier mode"

    @classmethod
    @abc.abstractmethod
    def attach(cls, handle: dict[str, Any]) -> Environment:
        """Reconnect to a started sandbox from its handle, without owning its lifetime."""

