"""Run a test module on one log stream and on a partitioned log: import
`log_partitions_1_and_4` into it (it overrides the `log_partitions` fixture of
tests/integration/conftest.py, so the module's server, bus and settings are made twice)."""

from __future__ import annotations

import pytest


@pytest.fixture(
    scope="module", params=[1, 4], ids=["one-log", "4-partitions"], name="log_partitions"
)
def log_partitions_1_and_4(request: pytest.FixtureRequest) -> int:
    return int(request.param)
