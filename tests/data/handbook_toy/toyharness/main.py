import asyncio

from . import loop
from .model_call import ModelCaller


def main(argv=None) -> int:
    agent = loop.Agent(ModelCaller(), max_episodes=3)
    asyncio.run(agent.run())
    return 0
