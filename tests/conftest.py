"""Shared fixtures. Real model calls are impossible here: provider keys are removed and
the deployment provider is `scripted`."""

from __future__ import annotations

import os

import pytest

for key in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
    os.environ.pop(key, None)
for key in [k for k in os.environ if k.startswith("TURNSTREAM_")]:
    del os.environ[key]
os.environ["TURNSTREAM_CONFIG"] = os.devnull + ".absent.yaml"


@pytest.fixture(autouse=True)
def _no_real_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNSTREAM_PROVIDER", "scripted")
