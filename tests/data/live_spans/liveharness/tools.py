"""One instrumented function: its span ends at once, long before the harness does."""


def tick(n: int) -> int:
    return n + 1
