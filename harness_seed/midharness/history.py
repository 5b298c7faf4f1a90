"""What the verifier may see of the chat: observations and the actions that ran, never the reasoning.

The generator's chat is [first prompt (instructions + task + first screen), reply, observation, reply, ...].
Each past assistant reply is re-parsed and only its commands and completion flag are kept; its analysis and
plan are dropped. The first prompt is reduced to the text after the task instruction (the first screen), so
the generator's format instructions do not reach the verifier either.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .dedupe import commands_of


@dataclass
class Turn:
    observation: str
    commands: list[tuple[str, float]] | None  # None: the reply did not parse, nothing ran
    task_complete: bool = False


@dataclass
class HistoryView:
    turns: list[Turn]  # each: the observation the agent saw, then what it did
    current: str  # the observation the candidates answer
    omitted: int = 0  # oldest turns left out to fit the budget

    def record(self) -> dict:
        return {
            "omitted": self.omitted,
            "turns": [
                {
                    "observation": t.observation,
                    "commands": None if t.commands is None else [list(c) for c in t.commands],
                    "task_complete": t.task_complete,
                }
                for t in self.turns
            ],
            "current": self.current,
        }

    @classmethod
    def from_record(cls, data: dict) -> HistoryView:
        turns = [
            Turn(
                observation=t.get("observation", ""),
                commands=None
                if t.get("commands") is None
                else [(str(k), float(d)) for k, d in t["commands"]],
                task_complete=bool(t.get("task_complete")),
            )
            for t in data.get("turns", [])
        ]
        return cls(turns=turns, current=data.get("current", ""), omitted=int(data.get("omitted", 0)))


def _content(message: dict) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def _first_screen(prompt: str, instruction: str) -> str:
    """The part of the first prompt after the instruction (the terminal state), else the whole prompt."""
    if instruction and instruction.strip():
        at = prompt.find(instruction.strip())
        if at >= 0:
            return prompt[at + len(instruction.strip()) :].strip()
    return prompt.strip()


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters omitted ...]\n{text[-half:]}"


def build_history(
    messages: list[dict],
    instruction: str,
    parse_fn: Callable[[str], Any],
    history_chars: int = 20000,
    observation_chars: int = 4000,
) -> HistoryView:
    """The verifier's view of ``messages`` (the chat about to be sent for this step)."""
    chat = [m for m in messages if m.get("role") in ("user", "assistant")]
    observations: list[str] = []
    actions: list[tuple[list[tuple[str, float]] | None, bool]] = []
    for m in chat:
        text = _content(m)
        if m["role"] == "user":
            if not observations and not actions:
                text = _first_screen(text, instruction)
            if len(observations) > len(actions):  # two user turns in a row: keep both as one observation
                observations[-1] += "\n\n" + text
            else:
                observations.append(text)
            continue
        try:
            parsed = parse_fn(text)
            ok = not getattr(parsed, "error", None)
        except Exception:  # noqa: BLE001 - an unparseable past reply just shows as "nothing ran"
            parsed, ok = None, False
        if len(observations) == len(actions):
            observations.append("")
        actions.append(
            (commands_of(parsed) if ok else None, bool(ok and getattr(parsed, "task_complete", False)))
        )
    current = observations.pop() if len(observations) > len(actions) else ""
    turns = [
        Turn(_cut(obs, observation_chars), cmds, done) for obs, (cmds, done) in zip(observations, actions)
    ]
    current = _cut(current, min(max(observation_chars, history_chars // 2), history_chars))
    # Newest turns matter most: drop from the front until the budget holds.
    omitted = 0
    size = sum(len(t.observation) + sum(len(k) for k, _ in t.commands or []) + 40 for t in turns)
    while turns and size + len(current) > history_chars:
        t = turns.pop(0)
        size -= len(t.observation) + sum(len(k) for k, _ in t.commands or []) + 40
        omitted += 1
    return HistoryView(turns=turns, current=current, omitted=omitted)
