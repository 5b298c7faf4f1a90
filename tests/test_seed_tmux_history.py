"""The agent's pane really gets the large history (DIFFERENCES.md, known reference defects): set globally after
``new-session``, as the reference does, the option misses the first pane, which keeps tmux's 2,000 lines;
the seed sets it before creating the session. Real tmux, private sockets."""

from __future__ import annotations

import subprocess

import pytest

from harness_seed import tmux
from tests.test_seed_support import HAVE_TMUX, HostEnv, fast_settings

pytestmark = [pytest.mark.tmux, pytest.mark.skipif(not HAVE_TMUX, reason="tmux is not installed")]

SHOW = "tmux display-message -p -t {target} '#{{history_limit}}'"


async def test_seed_pane_has_the_configured_history(tmp_path):
    env = HostEnv(tmp_path / "host")
    settings = fast_settings(tmp_path)
    session = tmux.TmuxSession(env, settings.tmux)
    try:
        await session.start()
        shown = await env.exec(SHOW.format(target=session.target))
    finally:
        await env.stop()
    assert shown.stdout.strip() == str(settings.tmux.history_limit)


def test_reference_order_leaves_the_first_pane_at_the_default(tmp_path):
    """Evidence: the reference's order (session first, then the global option) gives the pane 2,000 lines."""
    sock = ["tmux", "-L", f"rise-hist-{tmp_path.name[-12:]}"]
    try:
        subprocess.run([*sock, "-f", "/dev/null", "new-session", "-d", "-s", "ref", "-x", "80", "-y", "20"],
                       check=True, timeout=30)
        subprocess.run([*sock, "set-option", "-g", "history-limit", "10000000"], check=True, timeout=30)
        shown = subprocess.run([*sock, "display-message", "-p", "-t", "ref", "#{history_limit}"],
                               capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    finally:
        subprocess.run([*sock, "kill-server"], check=False, timeout=30, capture_output=True)
    assert shown == "2000"
