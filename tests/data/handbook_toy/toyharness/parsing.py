import json


def parse_response(text: str) -> dict:
    body = _find_json(text)
    return json.loads(body) if body else {"commands": [], "done": False}


def _find_json(text: str) -> str:
    start = text.find("{")
    return text[start:] if start >= 0 else ""
