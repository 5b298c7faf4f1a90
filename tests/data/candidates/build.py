"""Rebuild the candidate patches in this folder from the current ``harness_seed/``.

Each candidate is a set of edits (anchored text insertions, new files, a re-rendered HANDBOOK.md) applied to a
throw-away git copy of the seed; the staged diff becomes ``<name>.patch`` (paths relative to the harness root,
ready for ``git apply`` in a candidate worktree). Run ``python tests/data/candidates/build.py`` after the seed
changed under the patches (the tests say so when a patch no longer applies); ``--check`` only reports.

Candidates:
- ``verify-completion``: executable completion verification. On the first completion claim of a run the claim
  is withheld once and the model is asked to run a command that verifies the result and show its output
  (setting ``completion.verify_before_complete``, on in the candidate).
- ``keystroke-trim``: a harmful one. Strips trailing whitespace from every command's keystrokes "to keep the
  pane tidy", which also drops the Enter: commands are typed and never run (setting ``tmux.trim_keystrokes``,
  on in the candidate). It does exactly what its contract says and passes it; evaluation rejects it.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
SEED = REPO / "harness_seed"
CONTRACTS = HERE / "contracts"  # the candidates' contract files, copied into contracts/ of the harness


class AnchorError(RuntimeError):
    pass


def insert(path: Path, anchor: str, text: str, *, after: bool = True, start_at: str | None = None) -> None:
    """Insert ``text`` right after (or before) the first line that starts with ``anchor`` (searching from the
    first line starting with ``start_at`` when given)."""
    lines = path.read_text().splitlines(keepends=True)
    begin = 0
    if start_at is not None:
        begin = next((i for i, ln in enumerate(lines) if ln.startswith(start_at)), None)
        if begin is None:
            raise AnchorError(f"{path.name}: no line starts with {start_at!r}")
    for i in range(begin, len(lines)):
        if lines[i].startswith(anchor):
            at = i + 1 if after else i
            lines[at:at] = [text if text.endswith("\n") else text + "\n"]
            path.write_text("".join(lines))
            return
    raise AnchorError(f"{path.name}: no line starts with {anchor!r}" + (f" after {start_at!r}" if start_at else ""))


def replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    if text.count(old) != 1:
        raise AnchorError(f"{path.name}: expected exactly one {old!r}, found {text.count(old)}")
    path.write_text(text.replace(old, new))


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text().rstrip("\n") + "\n" + text)


# ---------------------------------------------------------------------------------------------- candidates
def verify_completion(h: Path) -> None:
    append(h / "settings.toml", """
[completion]
verify_before_complete = true  # withhold the first completion claim once: the model must verify the result first
""")
    insert(h / "settings.py", "class Settings(_Section):", '''class CompletionSettings(_Section):
    verify_before_complete: bool = True


''', after=False)
    insert(h / "settings.py", "    terminus: TerminusSettings", "    completion: CompletionSettings = "
           "Field(default_factory=CompletionSettings)")
    insert(h / "completion.py", '    DONE = "done"', '    VERIFY = "verify"  # a claim withheld once: verify first')
    append(h / "completion.py", '''

class VerificationGate:
    """Executable completion verification: the first claim of a run (whether the handshake would ask or end)
    is withheld once; the loop then asks the model to run a command that verifies the result and show its
    output, and the handshake starts afresh. Later claims pass through: it withholds at most once per run."""

    def __init__(self, enabled: bool = False):
        self.enabled = bool(enabled)
        self.withheld = False

    def review(self, verdict: Verdict, handshake: CompletionHandshake) -> Verdict:
        """The verdict the loop acts on; ``VERIFY`` (and a reset handshake) the one time a claim is withheld."""
        if not self.enabled or self.withheld or verdict is Verdict.CONTINUE:
            return verdict
        self.withheld = True
        handshake.streak = 0
        return Verdict.VERIFY
''')
    insert(h / "loop.py", "        self.handshake = completion.CompletionHandshake(",
           "        self.verification = completion.VerificationGate(settings.completion.verify_before_complete)")
    replace(h / "loop.py", "        verdict = self.handshake.on_reply(parsed)\n",
            "        verdict = self.verification.review(self.handshake.on_reply(parsed), self.handshake)\n")
    replace(h / "loop.py", "        if verdict is completion.Verdict.CONFIRM:\n",
            "        if verdict is completion.Verdict.VERIFY:\n"
            '            self.prompt = templates.render("verify_completion", terminal_output=output, fmt=self.fmt)\n'
            "        elif verdict is completion.Verdict.CONFIRM:\n")
    (h / "prompts" / "verify_completion.j2").write_text("""Current terminal state:
{{ terminal_output }}

Before completing, run a command that verifies the result and show its output: run the program or its tests, \
or print the files you were asked to create, and compare what you see with the task. Your completion claim \
was not accepted yet. When the verification shows that the task is done, claim completion again \
({{ '"task_complete": true' if fmt == "json" else '<task_complete>true</task_complete>' }}); otherwise fix \
what it shows first.
""")
    insert(h / "recording.toml", 'target = "completion:CompletionHandshake.on_reply"', '''
[[boundary]]
target = "completion:VerificationGate.review"''')
    insert(h / "HANDBOOK.toml", "spans = ", '''
[[stages.behaviours]]
id = "completion.verify"
name = "Executable completion verification"
responsibility = """The first completion claim of a run is withheld once: the next prompt (verify_completion.j2) \\
shows the terminal and asks the model to run a command that verifies the result and show its output before \\
claiming again; the handshake starts afresh. Later claims pass through, so it withholds at most once per run."""
triggers = ["the first reply of the run that claims task_complete (when completion.verify_before_complete)"]
functions = [
  "completion:VerificationGate.__init__", "completion:VerificationGate.review", "loop:Agent.step",
]
state_read = ["the handshake verdict", "VerificationGate.withheld"]
state_written = ["VerificationGate.withheld", "CompletionHandshake.streak (reset)",
                 "Agent.prompt (verify_completion.j2)", "step extra completion = verify"]
exit_conditions = ["Verdict.VERIFY: the claim is withheld, the run goes on", "any later claim: unchanged verdict"]
settings = ["completion.verify_before_complete"]
spans = ["completion:VerificationGate.review"]''', start_at='id = "completion.handshake"')


def keystroke_trim(h: Path) -> None:
    insert(h / "settings.toml", "startup_timeout_sec", "trim_keystrokes = true             # strip trailing "
           "whitespace from each command's keystrokes before sending")
    insert(h / "settings.py", "    startup_timeout_sec: float", "    trim_keystrokes: bool = True")
    append(h / "tmux.py", '''

def trim_keystrokes(keys: str) -> str:
    """Keystrokes without trailing whitespace (blank lines in the pane are noise)."""
    return keys.rstrip()
''')
    replace(h / "loop.py", "                await self.session.send_keys(cmd.keystrokes, block=",
            "                keys = tmux.trim_keystrokes(cmd.keystrokes) if self.s.tmux.trim_keystrokes else "
            "cmd.keystrokes\n"
            "                await self.session.send_keys(keys, block=")
    insert(h / "recording.toml", 'target = "tmux:TmuxSession.send_keys"', '''
[[boundary]]
target = "tmux:trim_keystrokes"''')
    insert(h / "HANDBOOK.toml", "spans = ", '''
[[stages.behaviours]]
id = "dispatch.trim"
name = "Keystroke trimming"
responsibility = """Strip trailing whitespace (newlines included) from each command's keystrokes before they \\
are sent, so the pane shows no blank lines."""
triggers = ["every command sent (when tmux.trim_keystrokes)"]
functions = ["tmux:trim_keystrokes", "loop:Agent.execute_commands"]
state_read = ["Command.keystrokes"]
state_written = ["the keystrokes sent"]
exit_conditions = ["the trimmed keystrokes are sent"]
settings = ["tmux.trim_keystrokes"]
spans = ["tmux:trim_keystrokes"]''', start_at='id = "dispatch.commands"')


CANDIDATES: dict[str, Callable[[Path], None]] = {
    "verify-completion": verify_completion,
    "keystroke-trim": keystroke_trim,
}


# ---------------------------------------------------------------------------------------------- building
def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def build(name: str, seed: Path = SEED) -> str:
    """The patch text of candidate ``name`` against ``seed``."""
    with tempfile.TemporaryDirectory(prefix=f"cand-{name}-") as tmp:
        h = Path(tmp) / "harness"
        shutil.copytree(seed, h, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        _git(h, "init", "-q")
        _git(h, "add", "-A")
        _git(h, "-c", "user.name=build", "-c", "user.email=build@localhost", "commit", "-qm", "seed")
        CANDIDATES[name](h)
        (h / "contracts").mkdir(exist_ok=True)
        shutil.copy(CONTRACTS / f"{name}.toml", h / "contracts" / f"{name}.toml")
        sys.path.insert(0, str(REPO))
        from handbook.render import write_rendered

        write_rendered(h)
        _git(h, "add", "-A")
        return _git(h, "diff", "--cached", "--binary")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=list(CANDIDATES))
    parser.add_argument("--check", action="store_true", help="only say which patches are out of date")
    args = parser.parse_args(argv)
    stale = 0
    for name in args.names:
        text = build(name)
        path = HERE / f"{name}.patch"
        if args.check:
            current = path.read_text() if path.is_file() else ""
            status = "up to date" if current == text else "OUT OF DATE"
            stale += current != text
            print(f"{path.name}: {status}")
        else:
            path.write_text(text)
            print(f"wrote {path.relative_to(REPO)} ({len(text.splitlines())} lines)")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
