from __future__ import annotations

from pathlib import Path

import orjson

from turnstream.bus.streams import StreamLimits, describe
from turnstream.core.subjects import Subjects

ROOT = Path(__file__).parents[2]


def test_ops_streams_json_is_what_the_services_create() -> None:
    committed = orjson.loads((ROOT / "ops" / "streams.json").read_bytes())
    assert committed == describe(Subjects("ts"), StreamLimits(replicas=3)), (
        "ops/streams.json drifted: run `turnstream streams --replicas 3 > ops/streams.json`"
    )


def test_prefix_renames_streams_and_subjects() -> None:
    names = {c["name"]: c["subjects"] for c in describe(Subjects("acme"), StreamLimits())}
    assert names == {
        "ACME_INBOUND": ["acme.in.>"],
        "ACME_LOG": ["acme.log.>"],
        "ACME_DEAD": ["acme.dead.>"],
    }


def test_services_never_use_asyncio_wait_for() -> None:
    """On Python 3.11 `asyncio.wait_for` swallows a cancellation that races its inner
    future; the cancelled task then waits forever (it hung service shutdown here).
    `async with asyncio.timeout(...)` is correct; this keeps it that way."""
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in (ROOT / "services").rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "wait_for(" in line and not line.lstrip().startswith("#")
    ]
    assert offenders == []
