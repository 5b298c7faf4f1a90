from . import parsing
from .model_call import ModelCaller
from .picker import build_picker


class BaseAgent:
    def log(self, text: str) -> None:
        print(text)


class Agent(BaseAgent):
    def __init__(self, caller: ModelCaller, max_episodes: int):
        self.caller = caller
        self.max_episodes = max_episodes
        self.picker = build_picker(caller, parse_fn=parsing.parse_response)

    async def run(self) -> None:
        for episode in range(self.max_episodes):
            if await self.step(episode):
                break

    async def step(self, episode: int) -> bool:
        reply = await self.picker.pick([])
        parsed = parsing.parse_response(reply)
        self.execute_commands(parsed["commands"])
        self.log(f"episode {episode}")
        return parsed["done"]

    def execute_commands(self, commands: list) -> None:
        for command in commands:
            _cap_duration(command)


def _cap_duration(command: dict) -> float:
    return min(command.get("duration", 1.0), 60.0)
