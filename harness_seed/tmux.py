"""The agent's terminal: one tmux session inside the sandbox, driven only through ``env.exec``.

The session is ``-x 160 -y 40`` running ``bash --login`` with a large history, its pane piped to a log file.
Keys go through ``tmux send-keys``, shell-quoted and split so each send-keys command line stays under the
tmux message limit. The agent sends non-blocking (send, then sleep for the command's duration); the blocking
mode appends ``; tmux wait -S done`` to the command and waits for that signal, raising
:class:`TmuxTimeout` when it does not come in time.

Who is to blame when the pane cannot be read: a capture that fails while the session lives is retried
(``capture_attempts``) and then reported as :class:`CaptureFailed`, which the loop tolerates; a session that
is gone while the sandbox still runs commands was ended from inside (the agent typed ``exit``, killed tmux...)
and raises :class:`SessionEnded`, an agent outcome; only a sandbox that no longer runs anything raises
:class:`TmuxError` (cause ``sandbox``, scored ⊥).
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_fixed

import trials.harness_api as api

log = logging.getLogger(__name__)

# Exit statuses of the start script (TmuxSession.start) besides 0.
_NO_TMUX, _ADOPTED = 127, 100
# What ends a keystroke string that runs a command (for the blocking mode).
_ENTER_KEYS = ("Enter", "C-m", "KPEnter", "C-j", "^M", "^J")


class TmuxError(RuntimeError):
    """tmux is missing in the sandbox or does not answer (an environment failure, not the agent's)."""

    cause = "sandbox"


class CaptureFailed(TmuxError):
    """The pane could not be read, several times, while the session and the sandbox were alive."""


class SessionEnded(RuntimeError):
    """The tmux session ended while the sandbox still answers: ended from inside, by the agent's keys."""

    cause = "session_ended"


class TmuxTimeout(TimeoutError):
    """A blocking command did not signal completion within its limit."""

    def __init__(self, keys: str, timeout_sec: float):
        super().__init__(f"command did not finish within {timeout_sec:g} s: {keys[:80]!r}")
        self.keys, self.timeout_sec = keys, timeout_sec


def split_for_send(keys: str, prefix: str, max_bytes: int) -> list[str]:
    """Split ``keys`` so that ``prefix + shell-quoted piece`` is under ``max_bytes`` bytes for each piece."""
    budget = max_bytes - len(prefix.encode()) - 4  # the two quotes, a possible ';' escape, slack
    if budget < 16:
        raise ValueError(f"max_bytes={max_bytes} leaves no room for keys after {prefix!r}")
    pieces, current, size = [], [], 0
    for ch in keys:
        cost = 5 if ch == "'" else len(ch.encode())  # shlex.quote writes ' as '"'"'
        if size + cost > budget and current:
            pieces.append("".join(current))
            current, size = [], 0
        current.append(ch)
        size += cost
    if current:
        pieces.append("".join(current))
    return pieces


def tmux_arg(piece: str) -> str:
    """``piece`` as one shell-quoted send-keys argument. tmux reads a trailing ``;`` as a command separator
    (and drops it), so a trailing ``;`` is escaped as ``\\;``, which tmux turns back into ``;``."""
    if piece.endswith(";"):
        piece = piece[:-1] + "\\;"
    return shlex.quote(piece)


def is_executing(keys: str) -> bool:
    """Whether ``keys`` ends by pressing Enter (so a blocking wait makes sense)."""
    return keys.endswith("\n") or keys.endswith(_ENTER_KEYS)


class TmuxSession:
    """One named tmux session in the sandbox. ``settings`` is the ``[tmux]`` section (see settings.py)."""

    def __init__(self, env: Any, settings: Any, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
        self.env, self.s, self._sleep = env, settings, sleep
        self.name = settings.session_name
        self.target = shlex.quote(self.name)

    async def _exec(self, cmd: str, timeout: float | None = None, check: bool = True) -> Any:
        result = await self.env.exec(cmd, timeout=timeout or self.s.exec_timeout_sec)
        if result.timed_out:
            raise TmuxError(f"tmux command timed out in the sandbox: {cmd[:120]}")
        if check and result.returncode != 0:
            raise TmuxError(f"tmux command failed ({result.returncode}): {cmd[:120]}: "
                            f"{(result.stderr or result.stdout).strip()[:400]}")
        return result

    def creation(self) -> dict[str, Any]:
        """The settings that make the session (what a sandbox that started it names in its handle)."""
        return {k: getattr(self.s, k) for k in api.TERMINAL_KEYS}

    async def start(self) -> None:
        """Create the session (or adopt a live one of the same name) and wait for the shell's first prompt.

        A session the sandbox started with itself (``env.terminal``, when ``tmux.with_environment``) made with
        exactly these settings is adopted without a command: the sandbox waited for its prompt. One made with
        other settings is killed and replaced. Otherwise one command in the sandbox asks whether tmux is there
        and whether the session is, and creates it if not (each command costs a round trip, about 0.05-0.1 s
        through ``docker exec``, and this is the harness's start); then the pane is read until the login shell
        has printed something."""
        premade = getattr(self.env, "terminal", None)
        replace = ""
        if premade:
            if self.s.with_environment and premade == self.creation():
                log.info("adopting the tmux session %s the sandbox started", self.name)
                return
            if premade.get("session_name") == self.name:  # made with other settings: not ours to adopt
                log.info("replacing the tmux session %s the sandbox started with other settings", self.name)
                replace = f"tmux kill-session -t {self.target} 2>/dev/null\n"
        create = api.tmux_create_command(**self.creation())
        result = await self._exec(f"command -v tmux >/dev/null 2>&1 || exit {_NO_TMUX}\n{replace}"
                                  f"tmux has-session -t {self.target} 2>/dev/null && exit {_ADOPTED}\n"
                                  f"{create}", check=False)
        if result.returncode == _NO_TMUX:
            raise TmuxError("tmux is not installed in the sandbox (the task image must provide it)")
        if result.returncode == _ADOPTED:
            log.info("adopting the running tmux session %s", self.name)
            return
        if result.returncode != 0:
            raise TmuxError(f"tmux command failed ({result.returncode}): {create[:120]}: "
                            f"{(result.stderr or result.stdout).strip()[:400]}")
        deadline = time.monotonic() + self.s.startup_timeout_sec
        while time.monotonic() < deadline:  # a login shell takes a moment to print its prompt
            if (await self.capture()).strip():
                return
            await self._sleep(0.05)

    async def is_alive(self) -> bool:
        """Whether the session still exists."""
        result = await self.env.exec(f"tmux has-session -t {self.target}", timeout=self.s.exec_timeout_sec)
        return result.returncode == 0 and not result.timed_out

    async def sandbox_answers(self) -> bool:
        """Whether the sandbox still runs a trivial command (it is not gone)."""
        try:
            result = await self.env.exec("true", timeout=self.s.exec_timeout_sec)
        except Exception as exc:  # noqa: BLE001 (any failure to run anything means the sandbox is gone)
            log.warning("the sandbox does not run commands: %s", exc)
            return False
        return result.ok

    async def check_alive(self) -> None:
        """Raise :class:`SessionEnded` when the session is gone but the sandbox answers, :class:`TmuxError`
        when the sandbox itself is gone; return when the session lives."""
        if await self.is_alive():
            return
        if await self.sandbox_answers():
            raise SessionEnded("session ended by the agent")
        raise TmuxError("the sandbox stopped answering (the tmux session is gone with it)")

    async def capture(self, entire: bool = False) -> str:
        """The visible pane, or with ``entire`` the whole scrollback. A failed capture is retried while the
        session lives (:class:`CaptureFailed` after the last attempt); a gone session raises as
        :meth:`check_alive` does."""
        cmd = f"tmux capture-pane -p {'-S - ' if entire else ''}-t {self.target}"
        retrying = AsyncRetrying(stop=stop_after_attempt(self.s.capture_attempts),
                                 wait=wait_fixed(self.s.capture_retry_wait_sec),
                                 retry=retry_if_exception_type(CaptureFailed), sleep=self._sleep, reraise=True)
        async for attempt in retrying:
            with attempt:
                result = await self.env.exec(cmd, timeout=self.s.exec_timeout_sec)
                if result.ok:
                    return result.stdout
                await self.check_alive()
                why = "timed out" if result.timed_out else (result.stderr or result.stdout).strip()[:300]
                log.warning("tmux capture failed (attempt %d): %s", attempt.retry_state.attempt_number, why)
                raise CaptureFailed(f"tmux capture-pane failed {self.s.capture_attempts} times: {why}")
        raise AssertionError("unreachable: tenacity re-raises the last failure")

    async def _send(self, keys: str) -> None:
        prefix = f"tmux send-keys -t {self.target} -- "
        for piece in split_for_send(keys, prefix, self.s.max_send_bytes):
            try:
                await self._exec(prefix + tmux_arg(piece))
            except TmuxError:
                await self.check_alive()  # keys sent earlier may have ended it (`exit`, then more keys)
                raise

    async def send_keys(self, keys: str, block: bool = False, min_timeout_sec: float = 0.0,
                        max_timeout_sec: float | None = None) -> None:
        """Type ``keys`` into the pane. Non-blocking: send, then sleep ``min_timeout_sec``. Blocking (only for
        keys that end with Enter): wait for the command to finish, at most ``max_timeout_sec`` (default the
        ``blocking_timeout_sec`` setting), raising :class:`TmuxTimeout` past it."""
        started = time.monotonic()
        if block and is_executing(keys):
            limit = max_timeout_sec if max_timeout_sec is not None else self.s.blocking_timeout_sec
            body = keys[:-1] if keys.endswith("\n") else keys[: -len(next(k for k in _ENTER_KEYS
                                                                             if keys.endswith(k)))]
            await self._send(body)
            await self._exec(f"tmux send-keys -t {self.target} -- '; tmux wait -S done' Enter")
            result = await self.env.exec(f"timeout {limit:g}s tmux wait done", timeout=limit + 10)
            if result.returncode != 0:
                await self.check_alive()  # the command itself may have ended the session (`exit`)
                raise TmuxTimeout(keys, limit)
        elif keys:
            await self._send(keys)
        remaining = min_timeout_sec - (time.monotonic() - started)
        if remaining > 0:
            await self._sleep(remaining)

    async def stop(self) -> None:
        """Kill the session (idempotent)."""
        await self.env.exec(f"tmux kill-session -t {self.target}", timeout=self.s.exec_timeout_sec)
