"""Secret redaction: env values whose names look secret, textual patterns, logs, leak scan."""

from __future__ import annotations

import logging

from monitor.redact import REDACTED, Redactor, install_log_redaction, scan_for_leaks

KEY = "sk-proj-PLANTEDplanted1234567890"


def test_env_values_and_patterns():
    r = Redactor({"OPENAI_API_KEY": KEY, "MY_TOKEN": "tok_0123456789", "HOME": "/root/somewhere",
                  "SHORT_KEY": "1"}, patterns=[r"corp-[0-9a-f]{8}"])
    text = (f"key {KEY} tok_0123456789 /root/somewhere 1 Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.abc "
            "ghp_abcdefghijklmnopqrstuvwxyz012345 AKIAABCDEFGHIJKLMNOP api_key=hunter2hunter2 corp-deadbeef "
            "hf_abcdefghijklmnopqrstuvwx sk-ant-api03-abcdefghijklmnopqrstu")
    out = r.redact(text)
    for secret in [KEY, "tok_0123456789", "eyJhbGciOiJIUzI1NiJ9", "ghp_abc", "AKIAABCD", "hunter2",
                   "corp-deadbeef", "hf_abc", "sk-ant-api03"]:
        assert secret not in out, (secret, out)
    assert "/root/somewhere" in out and "Bearer " + REDACTED in out and "api_key=" + REDACTED in out
    assert " 1 " in out  # short values are not treated as secrets
    assert r.leaks(out) == []


def test_endpoint_key_env_is_redacted_whatever_its_name():
    r = Redactor({"LLM_CRED_X": "abcdefgh12345678"}, env_names="NOTHING", extra_env_vars=["LLM_CRED_X"])
    assert r.redact("x abcdefgh12345678 y") == f"x {REDACTED} y"


def test_plain_text_is_untouched():
    r = Redactor({})
    text = "ls -la /app && cat notes.txt | grep token_count\nkeyboard layout: us"
    assert r.redact(text) == text


def test_log_records_are_redacted(caplog):
    old = logging.getLogRecordFactory()
    try:
        install_log_redaction(Redactor({"SERVICE_SECRET": KEY}))
        with caplog.at_level(logging.INFO):
            logging.getLogger("harness").info("calling with %s", KEY)
    finally:
        logging.setLogRecordFactory(old)
    assert KEY not in caplog.text and REDACTED in caplog.text


def test_scan_for_leaks(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.json").write_text(f'{{"k": "{KEY}"}}')
    (tmp_path / "clean.txt").write_text("nothing")
    assert scan_for_leaks(tmp_path, [KEY]) == {"a/x.json": ["sk-p…"]}


def test_key_value_forms_and_no_false_positives():
    r = Redactor({})
    for text, secret in [("aws_access_key_id=AKIAABCDEFGHIJKLMNOP", "AKIAABCD"),
                         ("ASIAABCDEFGHIJKLMNOP", "ASIAABCD"), ("apikey: zzzzzzzzzz", "zzzzzz"),
                         ('"access-key": "qqqqqqqqqq"', "qqqqqq"), ("password=correcthorse", "correcthorse"),
                         ("client_secret: s3cr3tvalue", "s3cr3tvalue"), ("xoxb-1234567890-abcdef", "xoxb-123")]:
        assert secret not in r.redact(text), text
    reply = '{"commands": [{"keystrokes": "printf hello > /app/x\\n"}], "max_tokens=100": 1, "token_count": 5}'
    assert r.redact(reply) == reply


def test_a_secret_cut_at_the_end_of_a_capture_is_not_shown():
    r = Redactor({"MY_TOKEN": "tok-abcdefghijklmnopqrstuvwxyz"})
    assert r.redact("header tok-abcdefghij") == "header [REDACTED]"


def test_redact_many_equals_redacting_each_text():
    r = Redactor({"MY_TOKEN": "tok-abcdefghijklmnopqrstuvwxyz", "OPENAI_API_KEY": KEY}, patterns=[r"corp-\d{4}"])
    texts = [f"key {KEY} here", "plain text, nothing", "header tok-abcdefghij",  # a value cut at the end
             "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.abc", "api_key=hunter2hunter2", "corp-1234 x",
             "short", "", "tok-abcdefghijklmnopqrstuvwxyz at the start"]
    assert r.redact_many(texts) == [r.redact(t) for t in texts]
    for t in r.redact_many(texts):
        assert r.leaks(t) == []


def test_redact_many_falls_back_when_a_text_holds_the_separator_or_a_match_would_cross_texts():
    r = Redactor({}, patterns=[r"(?s)BEGIN.*?END"])
    texts = ["a BEGIN secret", "more END b", "with \n\x00\n inside api_key=zzzzzzzzzz"]
    assert r.redact_many(texts) == [r.redact(t) for t in texts]
    assert r.redact_many(texts[:2]) == ["a BEGIN secret", "more END b"]
