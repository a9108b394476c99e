"""Secret redaction, one rule for events and log lines alike: configured secret values
(`Settings.secret_values`) become `[redacted]`. A tool's result and error are redacted
before they are appended; every log line of a process, its traceback included, is
redacted as it is formatted (`redact_logs`, called where the process configures logging)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

REDACTED = "[redacted]"


class Redactor:
    """Replaces configured secret values in text (longest first, so a secret that contains
    another is replaced whole)."""

    def __init__(self, secrets: Sequence[str] = ()) -> None:
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text


class RedactingFormatter(logging.Formatter):
    """Formats a record as `inner` does (message, traceback, stack), then redacts it."""

    def __init__(self, inner: logging.Formatter, redact: Redactor) -> None:
        super().__init__()
        self.inner, self.redact = inner, redact

    def format(self, record: logging.LogRecord) -> str:
        return self.redact(self.inner.format(record))


def redact_logs(secrets: Sequence[str]) -> None:
    """Redact `secrets` from every line the root logger's handlers write."""
    redact = Redactor(secrets)
    if not redact.secrets:
        return
    for handler in logging.getLogger().handlers:
        inner = handler.formatter or logging.Formatter()
        if not isinstance(inner, RedactingFormatter):
            handler.setFormatter(RedactingFormatter(inner, redact))
