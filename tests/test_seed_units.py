"""Seed harness rooms in isolation: truncation format, incremental observation, handshake, settings, send-keys
chunking and quoting, the retry schedule, the trajectory's message deltas."""

from __future__ import annotations

import shlex

import pydantic
import pytest

from harness_seed import observation, trajectory
from harness_seed.completion import CompletionHandshake, Verdict
from harness_seed.model_call import ModelCaller
from harness_seed.parsing import ParseResult
from harness_seed.settings import load_settings
from harness_seed.tmux import is_executing, split_for_send, tmux_arg
from trials.harness_api import CostLedger

# -- limit_output ------------------------------------------------------------------------------------


def test_limit_output_short_text_unchanged():
    assert observation.limit_output("x" * 10000) == "x" * 10000


def test_limit_output_exact_head_tail_format():
    text = "".join(chr(ord("a") + i % 26) for i in range(25000))
    out = observation.limit_output(text)
    head, marker, tail = out.split("\n")
    assert head == text[:5000] and tail == text[-5000:]
    assert marker == "[... output limited to 10000 bytes; 15000 interior bytes omitted ...]"


def test_limit_output_counts_bytes_and_never_splits_characters():
    text = "é" * 6000  # 12000 bytes
    out = observation.limit_output(text, limit=1000)
    head, marker, tail = out.split("\n")
    assert head == "é" * 250 and tail == "é" * 250
    assert marker == "[... output limited to 1000 bytes; 11000 interior bytes omitted ...]"


# -- incremental observation -------------------------------------------------------------------------


def test_first_observation_is_the_current_screen():
    obs = observation.build_observation("$ \n\n", "$ ", None)
    assert obs.text == "Current Terminal Screen:\n$ " and not obs.incremental


def test_new_output_starts_at_the_previous_last_line():
    prev = "welcome\nroot@sb:/app# \n\n\n"
    cur = "welcome\nroot@sb:/app# ls\na.txt\nroot@sb:/app# \n\n"
    obs = observation.build_observation(cur, "screen", prev)
    assert obs.incremental and obs.text == "New Terminal Output:\nroot@sb:/app# ls\na.txt\nroot@sb:/app#\n"


def test_lost_previous_falls_back_to_the_screen():
    obs = observation.build_observation("cleared\n$ ", "cleared\n$ ", "old stuff\n$ ")
    assert obs.text == "Current Terminal Screen:\ncleared\n$ "


def test_nothing_new_repeats_the_last_line():
    # As in the reference: the diff starts at the previous capture's last line, so an idle terminal shows
    # its prompt line as the (only) new output.
    obs = observation.build_observation("x\n$ \n", "x\n$ ", "x\n$ \n")
    assert obs.text == "New Terminal Output:\n$\n"


def test_blank_terminal_shows_the_screen():
    obs = observation.build_observation("\n\n", "", "\n")
    assert obs.text == "Current Terminal Screen:\n"


def test_non_incremental_setting_always_shows_the_screen():
    obs = observation.build_observation("a\nb\n", "b", "a\n", incremental=False)
    assert obs.text == "Current Terminal Screen:\nb"


# -- completion handshake ----------------------------------------------------------------------------


def claim(flag: bool = True, error: str | None = None) -> ParseResult:
    return ParseResult(task_complete=flag, error=error)


def test_handshake_first_claim_asks_second_ends():
    h = CompletionHandshake()
    assert h.on_reply(claim()) is Verdict.CONFIRM and h.pending
    assert h.on_reply(claim()) is Verdict.DONE


def test_handshake_any_other_reply_resets():
    h = CompletionHandshake()
    assert h.on_reply(claim()) is Verdict.CONFIRM
    assert h.on_reply(claim(False)) is Verdict.CONTINUE and not h.pending
    assert h.on_reply(claim()) is Verdict.CONFIRM
    assert h.on_reply(claim(True, error="bad")) is Verdict.CONTINUE and not h.pending
    assert h.on_reply(claim()) is Verdict.CONFIRM
    assert h.on_reply(None) is Verdict.CONTINUE
    assert h.on_reply(claim()) is Verdict.CONFIRM


def test_handshake_single_confirmation_setting():
    assert CompletionHandshake(confirmations=1).on_reply(claim()) is Verdict.DONE


# -- settings ----------------------------------------------------------------------------------------


def test_settings_defaults_are_the_reference_numbers():
    s = load_settings()
    assert (s.tmux.width, s.tmux.height, s.tmux.max_send_bytes, s.tmux.blocking_timeout_sec) == (160, 40, 16000, 180)
    assert (s.observation.limit_bytes, s.terminus.max_command_duration_sec) == (10000, 60)
    assert (s.context.proactive_free_tokens, s.context.unwind_target_free_tokens) == (8000, 4000)
    assert (s.model.max_attempts, s.model.retry_wait_min_sec, s.model.retry_wait_max_sec) == (3, 4, 15)
    assert s.model.temperature is None
    assert s.midharness == {"n": 1, "temperature": 0.8, "verifier": "pairwise", "decision_only": True,
                            "pivots": 4, "max_concurrency": 8, "verifier_model": ""}


def test_settings_overrides_dotted_and_nested():
    s = load_settings({"terminus.max_episodes": 7, "tmux": {"width": 100}, "midharness.n": 4})
    assert (s.terminus.max_episodes, s.tmux.width, s.tmux.height, s.midharness["n"]) == (7, 100, 40, 4)
    assert s.midharness["verifier"] == "pairwise"


def test_settings_typo_is_an_error():
    with pytest.raises(pydantic.ValidationError, match="max_episode"):
        load_settings({"terminus.max_episode": 7})


# -- send-keys chunking and quoting ------------------------------------------------------------------


def test_40kb_command_is_split_into_send_keys_under_16000_bytes():
    keys = ("echo '" + "abc'def\"ghi;" * 3400 + "'\n")[:40_000]
    prefix = "tmux send-keys -t terminus-2 -- "
    pieces = split_for_send(keys, prefix, 16000)
    assert len(pieces) >= 3 and "".join(pieces) == keys
    for piece in pieces:
        assert len((prefix + tmux_arg(piece)).encode()) < 16000
        assert shlex.split(tmux_arg(piece)) == [piece[:-1] + "\\;" if piece.endswith(";") else piece]


def test_trailing_semicolon_is_escaped_for_tmux():
    assert tmux_arg("echo a;") == shlex.quote("echo a\\;")
    assert tmux_arg("ls\n") == shlex.quote("ls\n")


def test_is_executing():
    assert is_executing("ls\n") and is_executing("ls Enter") and not is_executing("C-c")


# -- retry schedule ----------------------------------------------------------------------------------


def test_retry_wait_is_exponential_and_clamped():
    caller = ModelCaller(None, load_settings().model, CostLedger())
    assert [caller.retry_wait(k) for k in (1, 2, 3, 4, 5)] == [4, 4, 4, 8, 15]


# -- trajectory message deltas -----------------------------------------------------------------------


def test_messages_sent_are_stored_as_deltas_and_rebuilt(tmp_path):
    from harness_seed.model_call import ModelReply

    t = trajectory.Trajectory(tmp_path / "t.json", "trial", {"name": "x"})
    t.add_prompt("hello")
    chats = [
        [{"role": "user", "content": "u0"}],
        [{"role": "user", "content": "u0"}, {"role": "assistant", "content": "a0"}, {"role": "user", "content": "u1"}],
        [{"role": "user", "content": "u0"}, {"role": "user", "content": "summary"}],  # after a summarization
    ]
    for i, sent in enumerate(chats):
        t.add_episode(episode=i, model_name="m", sent=sent, reply=ModelReply(text="r"), parsed=None,
                      observation="o", timings={}, extra={})
    t.write()
    import json

    data = json.loads((tmp_path / "t.json").read_text())
    assert data["steps"][2]["extra"]["messages_sent"]["append"] == [chats[1][1], chats[1][2]]
    for step_id, sent in zip((2, 3, 4), chats):
        assert trajectory.messages_sent(data, step_id) == sent
        assert data["steps"][step_id - 1]["extra"]["messages_sent"]["sha256"] == trajectory.prompt_hash(sent)


# -- context-overflow wordings -----------------------------------------------------------------------


@pytest.mark.parametrize("wording", [
    ("Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 4000 `inputs` tokens "
    "and 512 `max_new_tokens`"),  # TGI
    "This model's maximum input exceeds the model's context length (8192)",  # vLLM 0.16
    "Input is too long for requested model.",  # Bedrock through a proxy
    "Context length exceeded: 9000 > 8192",
])
def test_overflow_wordings_become_context_errors(wording):
    from harness_seed.model_call import as_overflow
    from trials.endpoints.client import BadResponse, ContextLengthExceeded

    assert isinstance(as_overflow(BadResponse(wording, status_code=400)), ContextLengthExceeded)
    assert not isinstance(as_overflow(BadResponse(wording, status_code=500)), ContextLengthExceeded)
    assert not isinstance(as_overflow(BadResponse("bad request: unknown field", status_code=400)),
                          ContextLengthExceeded)
