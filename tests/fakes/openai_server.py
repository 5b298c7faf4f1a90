"""The scripted OpenAI-compatible server lives in ``trials.endpoints.scripted`` (behavioural contracts use it at
run time); this name stays for the tests. ``python -m tests.fakes.openai_server --port P`` still works."""

from trials.endpoints.scripted import *
from trials.endpoints.scripted import RawReply, ScriptedError, ScriptedServer, estimate_tokens, main  # noqa: F401

if __name__ == "__main__":
    raise SystemExit(main())
