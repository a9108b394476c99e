from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from turnstream.settings import Settings


def test_defaults_match_the_design(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TURNSTREAM_PROVIDER", raising=False)
    s = Settings()
    assert (s.prefix, s.provider, s.security_mode, s.max_iterations) == (
        "ts",
        "scripted",
        "ask",
        50,
    )
    assert s.nats_url is None and s.data_dir == Path(".turnstream")
    assert s.workspace == Path("workspace") and s.workflows == Path("workflows")


def test_yaml_file_is_read_and_env_overrides_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "turnstream.yaml"
    config.write_text("prefix: acme\nmax_iterations: 7\nsecurity_mode: deny\n")
    monkeypatch.setenv("TURNSTREAM_CONFIG", str(config))
    monkeypatch.setenv("TURNSTREAM_MAX_ITERATIONS", "9")
    s = Settings()
    assert s.prefix == "acme" and s.security_mode == "deny"
    assert s.max_iterations == 9
    assert s.subjects.inbound("x") == "acme.in.x"
    assert s.turn_config().max_iterations == 9


def test_bad_values_name_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNSTREAM_MAX_ITERATIONS", "0")
    with pytest.raises(ValidationError, match="max_iterations"):
        Settings()


def test_a_bad_prefix_says_how_to_fix_it() -> None:
    with pytest.raises(ValueError, match="TURNSTREAM_PREFIX"):
        _ = Settings(prefix="a.b").subjects


def test_nats_url_comes_from_the_running_up(tmp_path: Path) -> None:
    s = Settings(data_dir=tmp_path)
    with pytest.raises(RuntimeError, match="turnstream up"):
        s.resolved_nats_url()
    s.url_file.write_text("nats://127.0.0.1:4999\n")
    assert s.resolved_nats_url() == "nats://127.0.0.1:4999"
    assert Settings(data_dir=tmp_path, nats_url="nats://x:1").resolved_nats_url() == "nats://x:1"


def test_session_overrides_match_by_glob_first_match_wins() -> None:
    s = Settings(
        provider="scripted",
        sessions={
            "support-*": {"model": "small", "max_tokens": 100},
            "*": {"temperature": 0.5},
        },
    )
    pattern, support = s.session_override("support-7")
    assert pattern == "support-*" and support.model_name == "small" and support.max_tokens == 100
    assert s.session_override("other")[1].temperature == 0.5
    assert Settings().session_override("x") == ("", Settings())


def test_a_missing_provider_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from turnstream.providers import api_key

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ValueError, match="ANTHROPIC_API_KEY"):
        api_key(Settings(provider="anthropic"))
    with pytest.raises(ValueError, match="TURNSTREAM_BASE_URL"):
        api_key(Settings(provider="openai"))
    assert api_key(Settings(provider="openai", base_url="http://localhost:11434/v1")) is None


def test_a_secrets_file_supplies_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from turnstream.providers import api_key

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    secrets = tmp_path / "secrets.env"
    secrets.write_text("# keys\nANTHROPIC_API_KEY='sk-from-file'\n")
    assert api_key(Settings(provider="anthropic", secrets_file=secrets)) == "sk-from-file"
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-from-env")
    assert api_key(Settings(provider="anthropic", secrets_file=secrets)) == "sk-from-env"


def test_a_lease_renewal_must_come_well_within_its_ttl(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNSTREAM_LEASE_TTL_S", "4")
    monkeypatch.setenv("TURNSTREAM_LEASE_RENEW_S", "3")
    with pytest.raises(ValidationError, match="lease_renew_s"):
        Settings()
    monkeypatch.setenv("TURNSTREAM_LEASE_RENEW_S", "2")
    assert (Settings().lease_ttl_s, Settings().lease_renew_s) == (4, 2)
