"""Ledger durability: replay, torn tails after kill -9, refusal to double an event."""

import os
import subprocess
import sys

import pytest

from evolve.experiment.ledger import CheckResult, Ledger, LedgerError, RoundStart, TrialDone


def test_append_and_replay(tmp_path):
    p = tmp_path / "ledger.jsonl"
    led = Ledger(p)
    led.append(RoundStart(key="r01:start", round=1, incumbent="v0"))
    led.append(CheckResult(key="abc:smoke", commit="abc", stage="smoke", passed=True))
    again = Ledger(p)
    assert [e.kind for e in again.events] == ["round_start", "check_result"]
    assert again.done("abc:smoke") and not again.done("abc:contracts")
    with pytest.raises(LedgerError, match="already recorded"):
        again.append(CheckResult(key="abc:smoke", commit="abc", stage="smoke", passed=False))


def test_torn_tail_is_dropped_and_repaired(tmp_path):
    p = tmp_path / "ledger.jsonl"
    Ledger(p).append(RoundStart(key="r01:start", round=1, incumbent="v0"))
    with p.open("ab") as fh:
        fh.write(b'{"kind": "trial_done", "key": "abc:t:0", "com')  # cut mid-write
    led = Ledger(p)
    assert len(led.events) == 1 and not led.done("abc:t:0")
    led.append(TrialDone(key="abc:t:0", commit="abc", purpose="evaluation", task="t", rep=0, status="passed",
                         trial_dir="x"))
    assert [e.key for e in Ledger(p).events] == ["r01:start", "abc:t:0"]


def test_corrupt_middle_line_names_file_and_line(tmp_path):
    p = tmp_path / "ledger.jsonl"
    p.write_text('{"kind": "round_start", "key": "k", "round": 1, "incumbent": "v0"}\nnot json\n'
                 '{"kind": "round_start", "key": "k2", "round": 2, "incumbent": "v0"}\n')
    with pytest.raises(LedgerError, match=r"ledger.jsonl:2"):
        Ledger(p)


def test_survives_sigkill_between_appends(tmp_path):
    """A writer killed with SIGKILL loses nothing it had appended."""
    p = tmp_path / "ledger.jsonl"
    code = (
        "import os, signal, sys\n"
        "from evolve.experiment.ledger import Ledger, RoundStart\n"
        f"led = Ledger({str(p)!r})\n"
        "for i in range(5):\n"
        "    led.append(RoundStart(key=f'r{i}', round=i, incumbent='v0'))\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], check=False, cwd=os.getcwd())
    assert proc.returncode == -9
    assert [e.key for e in Ledger(p).events] == [f"r{i}" for i in range(5)]


def test_valid_last_event_without_newline_is_kept(tmp_path):
    """Issue 15 item 1: a last event that parses but lost its newline is complete; the next append keeps it."""
    p = tmp_path / "ledger.jsonl"
    Ledger(p).append(RoundStart(key="r01:start", round=1, incumbent="v0"))
    done = TrialDone(key="abc:t:0", commit="abc", purpose="evaluation", task="t", rep=0, status="passed",
                     trial_dir="x")
    with p.open("ab") as fh:
        fh.write(done.model_dump_json().encode())  # the event, but the crash came before its newline
    led = Ledger(p)
    assert led.done("abc:t:0")
    led.append(CheckResult(key="abc:smoke", commit="abc", stage="smoke", passed=True))
    assert [e.key for e in Ledger(p).events] == ["r01:start", "abc:t:0", "abc:smoke"]
    assert p.read_bytes().endswith(b"\n") and p.read_bytes().count(b"\n") == 3
