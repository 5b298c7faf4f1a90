"""The fixture's loop: episodes that call tools through module attributes, imported names and registries."""

from __future__ import annotations

import asyncio
import os

from trials.harness_api import set_episode

from . import tools
from .tools import REGISTRY, Helper, shout


class Agent:
    def __init__(self, mode: str, episodes: int = 3):
        self.mode, self.episodes = mode, episodes
        self.helper = Helper.make("fixture-model")

    async def run(self) -> int:
        for episode in range(self.episodes):
            set_episode(episode)
            await self.step(episode)
        return self.episodes

    async def step(self, episode: int) -> str:
        reply = await self.helper.call([{"role": "user", "content": f"episode {episode}"}])
        await self.helper.call([], n=3, temperature=0.8)
        text = shout(reply.text)  # name bound by `from .tools import shout`
        REGISTRY["shout"]("registry")
        tools.shout("attribute")
        Helper.double(episode)
        self.helper.describe()
        async with asyncio.TaskGroup() as tg:  # children in other tasks keep their parent
            tg.create_task(tools.fetch("a"))
            tg.create_task(tools.fetch("bb"))
        if self.mode == "secret":
            tools.shout("key=" + os.environ.get("FIXTURE_API_KEY", "") + " auth Bearer abcdefghijklmnop")
        if self.mode == "boom" and episode == 1:
            tools.explode("on purpose")
        if self.mode == "hang" and episode == 1:
            await asyncio.sleep(3600)
        return text
