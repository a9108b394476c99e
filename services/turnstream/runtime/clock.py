"""The real clock and event ids (the pure core takes both as arguments)."""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime

import uuid_utils


def now() -> datetime:
    return datetime.now(UTC)


def new_event_id() -> str:
    return str(uuid_utils.uuid7())


def source_name(service: str) -> str:
    return f"{service}/{socket.gethostname()}-{os.getpid()}"
