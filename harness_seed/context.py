"""Keeping the chat inside the model's context window.

- Proactive: before a call, when fewer than ``proactive_free_tokens`` tokens are free, summarize.
- On overflow (the server refused the prompt): drop user/assistant pairs from the end until
  ``unwind_target_free_tokens`` are free, then summarize.
- Summarizing is a handoff to a fresh agent in three sub-calls: (1) the history writes a summary; (2) a fresh
  agent that sees only the task, the summary and the screen asks at least five questions; (3) the history
  (plus its summary) answers them. The chat becomes [first message, question prompt, questions] and the next
  prompt hands over the answers. Fallbacks when a sub-call fails on overflow: a short summary from the last
  characters of the screen; then no model call at all (the task and the screen). A failed proactive
  summarization has no fallback: the chat and the pending observation are kept (as in the reference).

Each sub-call writes one JSON file into the agent folder. The thresholds are capped at a fraction of the
context limit, so a small-context model is not summarized on every step (see DIFFERENCES.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trials.harness_api as api

from . import templates

log = logging.getLogger(__name__)


def _user(text: str) -> dict:
    return {"role": "user", "content": text}


def _assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


def _fatal(exc: BaseException) -> bool:
    """Errors a fallback must not hide: the server is gone, or refuses our key."""
    return getattr(exc, "cause", None) == "model_unreachable" or isinstance(exc, api.AuthError)


class ContextManager:
    """Context policy for one trial. ``screen`` returns the visible terminal pane."""

    def __init__(self, caller: Any, client: Any, settings: Any, agent_dir: str | Path, instruction: str,
                 screen: Callable[[], Awaitable[str]]):
        self.caller, self.client, self.s = caller, client, settings
        self.agent_dir, self.instruction, self.screen = Path(agent_dir), instruction, screen
        self.summarizations = 0
        self.subcall_files: list[str] = []
        self._limit: int | None = None

    # -- counting -------------------------------------------------------------------------------

    async def limit(self) -> int:
        """The context limit in tokens: the setting, else what the endpoint says."""
        if self._limit is None:
            self._limit = self.s.context_limit or await self.client.context_limit()
        return self._limit

    async def count(self, messages: list[dict]) -> int:
        if self.s.token_count == "estimate":
            return sum(len(str(m.get("content", ""))) for m in messages) // 4 + 4 * len(messages)
        return await self.client.count_tokens(messages)

    async def free_tokens(self, messages: list[dict]) -> int:
        return await self.limit() - await self.count(messages)

    async def _threshold(self, tokens: int, fraction: float) -> int:
        return min(tokens, int(await self.limit() * fraction))

    # -- the three entry points -----------------------------------------------------------------

    async def maybe_summarize(self, messages: list[dict]) -> tuple[list[dict], str] | None:
        """(new chat, next prompt) when the free context fell below the proactive threshold, else None."""
        if not self.s.summarize or len(messages) < 2:
            return None
        threshold = await self._threshold(self.s.proactive_free_tokens, self.s.proactive_max_fraction)
        free = await self.free_tokens(messages)
        if free >= threshold:
            return None
        log.info("%d tokens free (< %d): summarizing proactively", free, threshold)
        return await self.summarize(messages, reason="proactive", fallbacks=False)

    async def unwind(self, messages: list[dict]) -> list[dict]:
        """``messages`` without as many trailing user/assistant pairs as it takes to free the unwind target
        (the first message always stays)."""
        target = await self._threshold(self.s.unwind_target_free_tokens, self.s.unwind_max_fraction)
        chat = list(messages)
        while len(chat) > 1 and await self.free_tokens(chat) < target:
            chat = chat[:-2] if len(chat) >= 3 else chat[:1]
        log.info("unwound the chat from %d to %d messages", len(messages), len(chat))
        return chat

    async def summarize(self, messages: list[dict], reason: str = "overflow",
                        fallbacks: bool = True) -> tuple[list[dict], str] | None:
        """Hand the work over to a fresh agent; returns (new chat, next prompt). Without ``fallbacks``
        (proactive summarization, as in the reference) a failed handoff returns None: the chat and the pending
        prompt stay as they are, and the call goes ahead."""
        if not messages:
            return [], self.instruction
        self.summarizations += 1
        k = self.summarizations
        screen = await self.screen()
        summary_prompt = templates.render("summary", instruction=self.instruction)
        try:
            summary = await self._subcall(k, "summary", reason, messages + [_user(summary_prompt)])
            question_prompt = templates.render("questions", instruction=self.instruction, summary=summary,
                                               screen=screen)
            questions = await self._subcall(k, "questions", reason, [_user(question_prompt)])
            answers = await self._subcall(k, "answers", reason, messages + [
                _user(summary_prompt), _assistant(summary),
                _user(templates.render("answers", questions=questions))])
            chat = [messages[0], _user(question_prompt), _assistant(questions)]
            return chat, templates.render("handoff", answers=answers)
        except api.ModelError as exc:
            if _fatal(exc):
                raise
            if not fallbacks:
                log.warning("proactive summarization %d failed (%s); keeping the chat as it is", k, exc)
                return None
            log.warning("summarization %d failed (%s); trying the short summary", k, exc)
        tail = screen[-self.s.short_summary_screen_chars:] if self.s.short_summary_screen_chars else ""
        try:
            short = await self._subcall(k, "short_summary", reason, [_user(templates.render(
                "short_summary", instruction=self.instruction, screen=tail))])
            return messages, templates.render("short_handoff", instruction=self.instruction, summary=short)
        except api.ModelError as exc:
            if _fatal(exc):
                raise
            log.warning("short summary %d failed (%s); continuing from the screen alone", k, exc)
        return messages, templates.render("fallback_state", instruction=self.instruction, screen=tail)

    async def _subcall(self, k: int, name: str, reason: str, messages: list[dict]) -> str:
        """One summarization sub-call, written to ``summarization-<k>-<name>.json`` whatever happens."""
        path = self.agent_dir / f"summarization-{k}-{name}.json"
        record: dict[str, Any] = {"summarization": k, "subcall": name, "reason": reason,
                                  "trial_id": api.TRIAL_ID.get(), "episode": api.EPISODE.get(),
                                  "started": time.time(), "messages": messages}
        try:
            reply = await self.caller.call(messages, free_text=True)
        except Exception as exc:
            record["error"] = f"{type(exc).__name__}: {exc}"
            raise
        else:
            record.update(response=reply.text, finish_reason=reply.finish_reason,
                          input_tokens=reply.input_tokens, output_tokens=reply.output_tokens,
                          latency_sec=reply.latency_sec)
            return reply.text
        finally:
            api.write_json_atomic(path, record)
            self.subcall_files.append(path.name)
