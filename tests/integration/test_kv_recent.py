"""The sessions listed as people look at them (issue 42): the ones changed last, read from
the bucket's tail, with how many there are, not every key of 100,000 (`bus/kv.py`)."""

from __future__ import annotations

import pytest

from turnstream.bus import Bus
from turnstream.bus.kv import recent_values

pytestmark = pytest.mark.integration


async def test_the_keys_changed_last_come_first_with_the_count_of_all(bus: Bus) -> None:
    bucket = bus.subjects.sessions_bucket
    kv = await bus.js.key_value(bucket)
    keys = [f"recent-{n}" for n in range(300)]
    for key in keys:
        await kv.put(key, f"{key}:v1".encode())
    for key in ("recent-3", "recent-150"):  # changed again: now the newest
        await kv.put(key, f"{key}:v2".encode())
    await kv.delete("recent-299")  # no value now: never listed
    total_before = len(keys)

    found, total = await recent_values(bus.nc, bucket, lambda _k, _v: True, 5)
    assert [k for k, _ in found] == [
        "recent-150",
        "recent-3",
        "recent-298",
        "recent-297",
        "recent-296",
    ]
    assert found[0][1] == b"recent-150:v2"
    assert total >= total_before  # every key the bucket has (this test's and any other's)

    odd, _ = await recent_values(
        bus.nc, bucket, lambda key, _v: key.startswith("recent-") and int(key[7:]) % 2 == 1, 3
    )
    assert [k for k, _ in odd] == ["recent-3", "recent-297", "recent-295"]
    few, _ = await recent_values(bus.nc, bucket, lambda key, _v: key == "recent-0", 10)
    assert [k for k, _ in few] == ["recent-0"]  # read back to the first: all there is
