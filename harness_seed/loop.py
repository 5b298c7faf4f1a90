"""The agent loop: observe, ask the model, parse, act, until the claim of completion is confirmed.

Everything the loop decides is a setting or a template; the rooms it calls each do one thing: ``tmux``
(the terminal), ``observation`` (what the model sees), ``parsing`` (what the reply means), ``completion`` (when
to stop), ``context`` (the window), ``model_call`` (the model, behind the Mid-Harness actor), ``trajectory``
(the record). Those calls go through module and instance attributes, so runtime instrumentation sees them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import trials.harness_api as api

from . import completion, context, model_call, observation, parsing, templates, tmux, trajectory
from .settings import Settings

log = logging.getLogger(__name__)


def _user(text: str) -> dict:
    return {"role": "user", "content": text}


class Agent:
    """Terminus-2 for one trial."""

    def __init__(self, *, instruction: str, settings: Settings, env: Any, client: Any, agent_dir: str | Path,
                 trial_id: str, model_name: str, verifier_client: Any = None, refine_context: str | None = None,
                 harness_version: str = "seed", sleep: Any = asyncio.sleep):
        self.instruction, self.s, self.refine_context = instruction, settings, refine_context
        self.fmt = settings.terminus.format
        self.agent_dir = Path(agent_dir)
        self.cost = api.CostLedger()
        self.caller = model_call.ModelCaller(client, settings.model, self.cost, sleep=sleep)
        if self.fmt != "json":
            self.caller.response_format = None  # the JSON schema constrains JSON-format replies only
        self.session = tmux.TmuxSession(env, settings.tmux, sleep=sleep)
        self.context = context.ContextManager(self.caller, client, settings.context, self.agent_dir,
                                              instruction, screen=self.visible_screen)
        self.handshake = completion.CompletionHandshake(settings.terminus.confirmations)
        self.trajectory = trajectory.Trajectory(
            self.agent_dir / settings.trajectory.file, trial_id,
            {"name": "terminus-2", "version": harness_version, "model_name": model_name,
             "extra": {"package": __package__, "format": self.fmt, "settings": settings.model_dump()}})
        self.model_name = model_name
        self.actor = self._build_actor(verifier_client)
        self.messages: list[dict] = []  # the chat so far (user/assistant turns)
        self.prompt = ""  # the next user message
        self.previous_buffer: str | None = None
        self.episodes = 0
        self._subcall_mark = 0

    def _build_actor(self, verifier_client: Any) -> Any:
        from .midharness.actor import build_actor  # H6's package; imported late so the loop loads without it

        return build_actor(dict(self.s.midharness), self.caller, verifier_client, self.instruction,
                           self.parse, self.cost)

    def parse(self, text: str) -> parsing.ParseResult:
        return parsing.parse_response(text, self.fmt)

    # -- the loop -------------------------------------------------------------------------------

    async def run(self) -> str:
        """Run to the end; returns ``completed``, ``max_episodes`` or ``session_ended`` (the agent's keys ended
        the tmux session; a sandbox that is gone raises :class:`tmux.TmuxError` instead)."""
        await self.session.start()
        screen = observation.limit_output(await self.observe(), self.s.terminus.initial_screen_bytes)
        self.prompt = templates.render(f"prompt_{self.fmt}", instruction=self.instruction, terminal_state=screen,
                                       refine_context=self.refine_context,
                                       max_duration=self.s.terminus.max_command_duration_sec)
        self.trajectory.add_prompt(self.prompt)
        self.trajectory.write()
        try:
            for episode in range(self.s.terminus.max_episodes):
                api.set_episode(episode)
                self.episodes = episode + 1
                await self.session.check_alive()
                if await self.step(episode):
                    return "completed"
        except tmux.SessionEnded:
            log.warning("the tmux session was ended from inside the sandbox; stopping")
            return "session_ended"
        return "max_episodes"

    async def step(self, episode: int) -> bool:
        """One episode; True when the run is over."""
        clock, extra = _Clock(), {}
        self._subcall_mark = len(self.context.subcall_files)
        handoff = await self.context.maybe_summarize(self.messages)
        if handoff is not None:
            (self.messages, self.prompt), extra["summarization"] = handoff, "proactive"
        sent, reply = await self.query(self.prompt, extra)
        clock.lap("model_sec")
        text = reply.text
        if reply.finish_reason == "length":
            salvaged, multiple = parsing.salvage_truncated(reply.text, self.fmt)
            if salvaged is None:
                self.handshake.on_reply(None)
                self.messages = sent + [self._reply_message(reply.text, reply)]
                self.prompt = templates.render("output_length", max_tokens=self.s.model.max_tokens,
                                               multiple_blocks=multiple, warnings=self.parse(text).warnings)
                return self._record(episode, sent, reply, None, clock, extra)
            text, extra["salvaged_from_truncated"] = salvaged, True
        self.messages = sent + [self._reply_message(text, reply)]
        parsed = self.parse(text)
        if parsed.error is not None:
            self.handshake.on_reply(parsed)
            self.prompt = templates.render("parse_error", error=parsed.error, warnings=parsed.warnings,
                                           fmt=self.fmt)
            return self._record(episode, sent, reply, parsed, clock, extra)
        try:
            extra["timed_out"], output = await self.execute_commands(parsed.commands)
        except Exception as exc:  # keep the step that happened, then let the run end as it must
            ended = isinstance(exc, tmux.SessionEnded)
            extra["session_ended" if ended else "error"] = True if ended else f"{type(exc).__name__}: {exc}"
            clock.lap("exec_sec")
            self._record(episode, sent, reply, parsed, clock, extra, done=True)
            raise
        clock.lap("exec_sec")
        verdict = self.handshake.on_reply(parsed)
        extra["completion"] = verdict.value
        if verdict is completion.Verdict.DONE:
            return self._record(episode, sent, reply, parsed, clock, extra, done=True)
        if verdict is completion.Verdict.CONFIRM:
            self.prompt = templates.render("completion_confirm", terminal_output=output, fmt=self.fmt)
        elif parsed.warnings:
            self.prompt = templates.render("warnings", warnings=parsed.warnings, observation=output)
        else:
            self.prompt = output
        return self._record(episode, sent, reply, parsed, clock, extra)

    # -- the parts of a step --------------------------------------------------------------------

    def _reply_message(self, text: str, reply: model_call.ModelReply) -> dict:
        """The assistant turn the chat keeps. With ``model.interleaved_thinking`` (off, as in the reference by
        default) the reasoning the server split out goes back with it as ``reasoning_content``."""
        message = {"role": "assistant", "content": text}
        if self.s.model.interleaved_thinking and reply.extra.get("reasoning"):
            message["reasoning_content"] = reply.extra["reasoning"]
        return message

    async def query(self, prompt: str, extra: dict) -> tuple[list[dict], model_call.ModelReply]:
        """Ask the actor for a reply to ``prompt``; on a context overflow unwind, summarize and ask again."""
        sent = self.messages + [_user(prompt)]
        try:
            return sent, await self.actor.act(sent)
        except api.ContextLengthExceeded:
            if not self.s.context.summarize:
                raise
            log.info("context length exceeded; unwinding and summarizing")
        chat = await self.context.unwind(self.messages)
        self.messages, handoff = await self.context.summarize(chat, reason="overflow")  # type: ignore[misc]
        extra["summarization"] = "overflow"
        sent = self.messages + [_user(handoff)]
        try:
            return sent, await self.actor.act(sent)
        except api.ModelError as exc:
            if getattr(exc, "cause", None) == "model_unreachable" or isinstance(exc, api.AuthError):
                raise
            log.warning("the call after summarizing failed too (%s)", exc)
            return sent, model_call.ModelReply(text=templates.render("technical_difficulties"),
                                               finish_reason="fallback", extra={"error": str(exc)})

    async def execute_commands(self, commands: list[parsing.Command]) -> tuple[bool, str]:
        """Send each command and wait its (capped) duration; (timed out?, observation text)."""
        limit = self.s.observation.limit_bytes
        for cmd in commands:
            duration = min(max(cmd.duration, 0.0), self.s.terminus.max_command_duration_sec)
            try:
                await self.session.send_keys(cmd.keystrokes, block=self.s.tmux.blocking,
                                             min_timeout_sec=duration)
            except tmux.TmuxTimeout as exc:
                return True, templates.render("timeout", command=cmd.keystrokes, timeout_sec=f"{exc.timeout_sec:g}",
                                              terminal_state=observation.limit_output(await self.observe(), limit))
        return False, observation.limit_output(await self.observe(), limit)

    async def observe(self) -> str:
        """The terminal as the model should see it now (incremental when possible)."""
        try:
            buffer = await self.session.capture(entire=True)
            screen = await self.session.capture()
        except tmux.CaptureFailed as exc:  # tolerated, as the reference does: say so, keep the diff base
            log.warning("%s", exc)
            return templates.render("capture_failed", error=str(exc))
        obs = observation.build_observation(buffer, screen, self.previous_buffer, self.s.observation.incremental)
        self.previous_buffer = obs.buffer
        return obs.text

    async def visible_screen(self) -> str:
        """The visible pane for summarization; empty when it cannot be read (a summary does not need it)."""
        try:
            return await self.session.capture()
        except tmux.CaptureFailed as exc:
            log.warning("no screen for the summary: %s", exc)
            return ""

    def _record(self, episode: int, sent: list[dict], reply: model_call.ModelReply, parsed: Any, clock: _Clock,
                extra: dict, done: bool = False) -> bool:
        if "summarization" in extra:
            extra["summarization_files"] = self.context.subcall_files[self._subcall_mark:]
        extra["pending_completion"] = self.handshake.pending
        self.trajectory.add_episode(episode=episode, model_name=self.model_name, sent=sent, reply=reply,
                                    parsed=parsed, observation=None if done else self.prompt,
                                    timings=clock.done(), extra=extra)
        self.trajectory.write()
        return done

    async def close(self, status: str | None, error: str | None = None) -> None:
        """Write the final trajectory and copy the pane log into the agent folder (never raises)."""
        self.trajectory.finish(self.cost, {
            "status": status, "error": error, "episodes": self.episodes,
            "summarizations": self.context.summarizations, "subcall_files": self.context.subcall_files,
            "requests": self.caller.request_log}, self.caller.inference)
        self.trajectory.write()
        if self.s.trajectory.atif_file not in ("", self.s.trajectory.file):  # never over the rich record
            self.trajectory.write_atif(self.agent_dir / self.s.trajectory.atif_file)
        try:
            await self.session.env.download(self.s.tmux.pane_log, self.agent_dir / "pane.log")
        except Exception as exc:  # noqa: BLE001 (a missing log must not hide the run's outcome)
            log.info("no pane log copied: %s", exc)


class _Clock:
    """Lap timer for a step's timings."""

    def __init__(self) -> None:
        self.start = self.last = time.monotonic()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.laps[name] = round(now - self.last, 4)
        self.last = now

    def done(self) -> dict[str, float]:
        return {**self.laps, "step_sec": round(time.monotonic() - self.start, 4)}
