class ModelCaller:
    async def call(self, messages: list) -> str:
        return '{"commands": [], "done": true}'

    async def sample(self, messages: list, n: int) -> list:
        return [await self.call(messages) for _ in range(n)]
