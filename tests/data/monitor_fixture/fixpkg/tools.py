"""Functions the fixture's loop calls through several kinds of references."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass


@dataclass
class Reply:
    text: str
    finish_reason: str = "stop"
    input_tokens: int = 10
    output_tokens: int = 3


def shout(text: str) -> str:
    return text.upper()


def explode(reason: str) -> None:
    raise ValueError(f"exploded: {reason}")


async def fetch(key: str, delay: float = 0.0) -> dict:
    await asyncio.sleep(delay)
    return {"key": key, "value": len(key)}


REGISTRY = {"shout": shout}


class Base:
    def describe(self) -> str:
        return f"<{type(self).__name__}>"


class Helper(Base):
    def __init__(self, model: str = "fixture-model"):
        self.model = model

    @staticmethod
    def double(x: int) -> int:
        return 2 * x

    @classmethod
    def make(cls, model: str) -> Helper:
        return cls(model)

    async def call(self, messages: list[dict], n: int = 1, temperature: float = 0.0):
        await asyncio.sleep(0)
        if n == 1:
            return Reply("ok")
        return [Reply(f"cand{i}", output_tokens=i + 1) for i in range(n)]
