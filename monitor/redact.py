"""Secret redaction for everything the monitor records (and a leak scan for a finished trial folder).

Two sources of secrets: the VALUES of environment variables whose names look like keys/tokens/secrets
(snapshotted when the redactor is built, plus the endpoint's ``api_key_env`` whatever its name), and textual
patterns (``sk-…``, ``Bearer …``, ``api_key=…``, GitHub/AWS/HF tokens, and the config's own patterns).

Each rule has cheap substring triggers so the regex only runs on text that might hold a secret; captured
arguments are redacted on every span, so this is on the hot path.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

REDACTED = "[REDACTED]"
MIN_SECRET_LEN = 8  # shorter env values ("1", "true") would redact half of every text

# (triggers, pattern, replacement). A rule runs only when one of its triggers occurs in the text.
_BUILTIN: list[tuple[tuple[str, ...], str, str]] = [
    (("sk-",), r"sk-[A-Za-z0-9_\-]{16,}", REDACTED),
    (("Bearer", "bearer"), r"(?i)(bearer\s+)[A-Za-z0-9._~+/=\-]{8,}", r"\1" + REDACTED),
    (("gh",), r"gh[pousr]_[A-Za-z0-9]{20,}", REDACTED),
    (("github_pat_",), r"github_pat_[A-Za-z0-9_]{20,}", REDACTED),
    (("AKIA", "ASIA"), r"(?:AKIA|ASIA)[0-9A-Z]{16}", REDACTED),
    (("hf_",), r"hf_[A-Za-z0-9]{20,}", REDACTED),
    (("xox",), r"xox[abprs]-[A-Za-z0-9\-]{10,}", REDACTED),
    (
        ("key", "KEY", "Key", "token", "TOKEN", "Token", "secret", "SECRET", "Secret", "passw", "PASSW"),
        (r"(?i)((?:api[_-]?key|access[_-]?key|token|secret|passw(?:or)?d)[\"']?\s*[:=]\s*[\"']?)"
         r"(?!\[REDACTED\])[^\s\"',;}{]{6,}"),
        r"\1" + REDACTED,
    ),
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
        self._values_re = (
            re.compile("|".join(re.escape(v) for v in self.secret_values)) if self.secret_values else None
        )
        self._rules = [(trig, re.compile(p), repl) for trig, p, repl in _BUILTIN]
        self._always = [re.compile(p) for p in patterns]

    def __call__(self, text: str) -> str:
        return self.redact(text)

    def redact(self, text: str) -> str:
        """The text with every known secret replaced."""
        if len(text) < MIN_SECRET_LEN:
            return text
        if self._values_re is not None:
            for value in self.secret_values:
                if value in text:
                    text = self._values_re.sub(REDACTED, text)
                    break
        for triggers, rx, repl in self._rules:
            for t in triggers:
                if t in text:
                    text = rx.sub(repl, text)
                    break
        for rx in self._always:
            text = rx.sub(REDACTED, text)
        return text

    def leaks(self, text: str) -> list[str]:
        """Names of the secret kinds still present in ``text`` (for checks and tests)."""
        found = [f"env value {v[:3]}…" for v in self.secret_values if v in text]
        found += [rx.pattern for _, rx, _ in self._rules if rx.search(text)]
        return found


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
