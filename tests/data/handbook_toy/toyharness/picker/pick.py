class Picker:
    def __init__(self, caller, parse_fn, n: int = 1):
        self.caller, self.parse_fn, self.n = caller, parse_fn, n

    async def pick(self, messages: list) -> str:
        if self.n == 1:
            return await self.caller.call(messages)
        replies = await self.caller.sample(messages, self.n)
        return max(replies, key=_score)


def _score(reply: str) -> int:
    return len(reply)


def build_picker(caller, parse_fn, n: int = 1) -> Picker:
    return Picker(caller, parse_fn, n)
