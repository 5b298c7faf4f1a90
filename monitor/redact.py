"""Secret redaction for everything the monitor records (and a leak scan for a finished trial folder).

Two sources of secrets: the VALUES of environment variables whose names look like keys/tokens/secrets
(snapshotted when the redactor is built, plus the endpoint's ``api_key_env`` whatever its name), and textual
patterns (``sk-…``, ``Bearer …``, ``api_key=…``, GitHub/AWS/HF/Slack tokens, and the config's own patterns).

Every captured argument passes through here, so the built-in patterns are found by plain substring search
for a literal anchor (``str.find``, about 1 ns per character) and the regex is only *matched at* each anchor;
a regex alternation scanning the whole text is ~100× slower on text with no secret in it.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

REDACTED = "[REDACTED]"
MIN_SECRET_LEN = 8  # shorter env values ("1", "true") would redact half of every text
# Between the captures of one span when they are redacted together: no built-in pattern matches across it
# (each stops at whitespace or NUL); a replacement that crosses it anyway is detected by counting.
_SEP = "\n\x00\n"

_KV = (r"(?i)(?:api[_-]?key|access[_-]?key|token|secret|passw(?:or)?d)[\"']?\s*[:=]\s*[\"']?"
       r"(?!\[REDACTED\])([^\s\"',;}{]{6,})")
# (anchor, search the lower-cased text?, regex, group to replace (0 = all), where the regex may start relative
# to the anchor). Few anchors on purpose: each one is a pass over the text.
_BUILTIN: list[tuple[str, bool, str, int, tuple[int, ...]]] = [
    ("sk-", False, r"sk-[A-Za-z0-9_\-]{16,}", 0, (0,)),
    ("bearer", True, r"(?i)bearer\s+([A-Za-z0-9._~+/=\-]{8,})", 1, (0,)),
    ("gh", False, r"gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}", 0, (0,)),
    ("IA", False, r"A[KS]IA[0-9A-Z]{16}", 0, (-2,)),  # AWS access key ids (AKIA…, ASIA…)
    ("hf_", False, r"hf_[A-Za-z0-9]{20,}", 0, (0,)),
    ("xox", False, r"xox[abprs]-[A-Za-z0-9\-]{10,}", 0, (0,)),
    ("key", True, _KV, 1, (-7, -6, -4, -3)),  # access_key, accesskey, api_key, apikey
    ("token", True, _KV, 1, (0,)),
    ("secret", True, _KV, 1, (0,)),
    ("passw", True, _KV, 1, (0,)),
]


class Redactor:
    """Replace secrets in text by ``[REDACTED]``."""

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        *,
        env_names: str = r"(?i)(KEY|TOKEN|SECRET|PASSW|CREDENTIAL)",
        extra_env_vars: Iterable[str] = (),
        patterns: Iterable[str] = (),
    ):
        env = os.environ if env is None else env
        name_re = re.compile(env_names)
        wanted = set(extra_env_vars)
        values = {v for k, v in env.items() if (name_re.search(k) or k in wanted) and len(v) >= MIN_SECRET_LEN}
        self.secret_values: tuple[str, ...] = tuple(sorted(values, key=len, reverse=True))
        self._rules = [(anchor, low, re.compile(p), group, starts) for anchor, low, p, group, starts in _BUILTIN]
        self._always = [re.compile(p) for p in patterns]

    def __call__(self, text: str) -> str:
        return self.redact(text)

    def _cuts(self, text: str, tails: bool = True) -> list[tuple[int, int]]:
        """(start, end) of every secret in ``text`` (with ``tails``: also a value's prefix ending it)."""
        cuts: list[tuple[int, int]] = []
        for value in self.secret_values:
            i = text.find(value)
            while i >= 0:
                cuts.append((i, i + len(value)))
                i = text.find(value, i + len(value))
        if tails and self.secret_values:
            cuts += self._tail_cuts(text, 0, len(text))
        lower = None
        for anchor, low, rx, group, starts in self._rules:
            if low:
                if lower is None:
                    lower = text.lower()
                hay = lower
            else:
                hay = text
            i = hay.find(anchor)
            while i >= 0:
                m = None
                for d in starts:
                    if i + d >= 0 and (m := rx.match(text, i + d)) is not None:
                        break
                if m is not None:
                    cuts.append(m.span(group))
                    i = hay.find(anchor, max(m.end(), i + 1))
                else:
                    i = hay.find(anchor, i + 1)
        return cuts

    def _tail_cuts(self, text: str, start: int, end: int) -> list[tuple[int, int]]:
        """A secret value cut by the capture limit at ``end`` (the end of a captured piece) must not show its
        prefix either: the longest prefix (at least MIN_SECRET_LEN chars) of a value that ends the piece."""
        cuts = []
        if end - start < MIN_SECRET_LEN:
            return cuts
        lo = max(start, end - 64)
        for value in self.secret_values:
            head = value[:MIN_SECRET_LEN]
            i = text.find(head, lo, end)  # a prefix ending the piece starts with the value's first chars
            while i >= 0:
                if end - i < len(value) and value.startswith(text[i:end]):
                    cuts.append((i, end))
                    break
                i = text.find(head, i + 1, end)
        return cuts

    def redact_many(self, texts: list[str]) -> list[str]:
        """``[redact(t) for t in texts]`` in one pass over their concatenation (one call per span, not per
        captured value); falls back to one call each if a replacement would cross two texts."""
        if len(texts) < 2:
            return [self.redact(t) for t in texts]
        joined = _SEP.join(texts)
        if joined.count(_SEP) != len(texts) - 1:  # a text holds the separator itself
            return [self.redact(t) for t in texts]
        extra: list[tuple[int, int]] = []
        if self.secret_values:
            pos = 0
            for t in texts:
                extra += self._tail_cuts(joined, pos, pos + len(t))
                pos += len(t) + len(_SEP)
        out = self._apply(joined, self._cuts(joined, tails=False) + extra).split(_SEP)
        if len(out) != len(texts):
            return [self.redact(t) for t in texts]
        return out

    def redact(self, text: str) -> str:
        """The text with every known secret replaced."""
        if len(text) < MIN_SECRET_LEN:
            return text
        return self._apply(text, self._cuts(text))

    def _apply(self, text: str, cuts: list[tuple[int, int]]) -> str:
        if cuts:
            cuts.sort()
            out, pos = [], 0
            for start, end in cuts:
                if end <= pos:
                    continue
                start = max(start, pos)
                out.append(text[pos:start])
                out.append(REDACTED)
                pos = end
            out.append(text[pos:])
            text = "".join(out)
        for rx in self._always:
            text = rx.sub(REDACTED, text)
        return text

    def leaks(self, text: str) -> list[str]:
        """Short prefixes of the secrets still present in ``text`` (for checks and tests)."""
        return sorted({text[a:b][:4] + "…" for a, b in self._cuts(text)})


class RedactingFilter(logging.Filter):
    """A logging filter that redacts each record's final message (installed by ``monitor.host``)."""

    def __init__(self, redactor: Redactor):
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken format string is the logger's problem, not ours
            return True
        clean = self.redactor.redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


def install_log_redaction(redactor: Redactor) -> RedactingFilter:
    """Redact every log record this process creates, whatever handler later writes it.

    A record factory rather than a handler filter: the harness may call ``logging.basicConfig`` or add
    handlers after we start, and loggers only create records for enabled levels, so the cost stays small.
    """
    filt = RedactingFilter(redactor)
    old_factory = logging.getLogRecordFactory()

    def factory(*args, **kwargs):
        record = old_factory(*args, **kwargs)
        filt.filter(record)
        return record

    logging.setLogRecordFactory(factory)
    return filt


def scan_for_leaks(folder: str | Path, secrets: Iterable[str]) -> dict[str, list[str]]:
    """Files under ``folder`` that contain any of ``secrets`` verbatim: {relative path: [secret prefixes]}."""
    folder = Path(folder)
    secrets = [s for s in secrets if s]
    hits: dict[str, list[str]] = {}
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        found = [s[:4] + "…" for s in secrets if s.encode() in data]
        if found:
            hits[str(path.relative_to(folder))] = found
    return hits
