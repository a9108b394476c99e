"""The channel tests: a real nats-server per module, as the integration tests have it."""

from __future__ import annotations

from tests.integration.conftest import bus, log_partitions, nats_server

__all__ = ["bus", "log_partitions", "nats_server"]
