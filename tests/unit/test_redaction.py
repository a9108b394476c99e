"""Redaction of secret values from tool results (issue 19, item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnstream.runtime.redaction import REDACTED, Redactor
from turnstream.settings import Settings


def test_the_redactor_replaces_every_occurrence_longest_first() -> None:
    redact = Redactor(["abcd", "abcdefgh", ""])
    assert redact("x abcdefgh y abcd z abcdefgh") == f"x {REDACTED} y {REDACTED} z {REDACTED}"
    assert redact("nothing here") == "nothing here"
    assert Redactor()("abcd") == "abcd"


def test_secret_values_come_from_the_list_the_env_and_the_secrets_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = tmp_path / "secrets.env"
    secrets.write_text("# a comment=not-a-secret\nAPI_KEY='sk-file-123456'\nSHORT=abc\n\n")
    monkeypatch.setenv("DB_PASSWORD", "pw-from-env-99")
    s = Settings(
        secrets_file=secrets, redact=["literal-token-1"], redact_env=["DB_PASSWORD", "UNSET_X"]
    )
    assert set(s.secret_values()) == {"sk-file-123456", "literal-token-1", "pw-from-env-99"}
    assert Settings(secrets_file=tmp_path / "missing.env").secret_values() == []
