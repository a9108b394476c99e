"""kill -9 the turn-runner with 1,500 turns open, start it again: every turn ends exactly
once (issue 19, item 1). Reloading each session used to open a consumer per session; the
server refused the stream's consumers past its cap and the refused wake-ups were dropped,
leaving turns that never ended."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from tests.recovery.harness import deployment
from turnstream.bus import Bus
from turnstream.bus.scan import subject_counts
from turnstream.client import message_command, publish_command

pytestmark = pytest.mark.e2e
OPEN_TURNS = int(os.environ.get("TS_TEST_OPEN_TURNS", "1500"))
SCRIPT = """
replies:
  - text: "done"
    delay_ms: 20000
    chunks: whole
"""
"""The model takes 20 s, so that nearly every turn is open at the kill even on a busy
machine (1,500 turns take many seconds to start; a few of the first may have ended)."""


async def counts(bus: Bus, kind: str) -> dict[str, int]:
    subjects = bus.subjects
    by_subject = await subject_counts(bus.nc, subjects.log_stream, subjects.log_kind(kind))
    return {subjects.session_from_log(s): n for s, n in by_subject.items()}


async def until(bus: Bus, kind: str, n: int, timeout: float) -> dict[str, int]:
    async with asyncio.timeout(timeout):
        while True:
            found = await counts(bus, kind)
            if len(found) >= n:
                return found
            await asyncio.sleep(0.5)


@pytest.mark.timeout(240)
async def test_every_open_turn_ends_once_after_a_runner_kill(tmp_path: Path) -> None:
    sessions = [f"many-{i}" for i in range(OPEN_TURNS)]
    async with deployment(tmp_path, SCRIPT) as (d, bus):
        for chunk in range(0, len(sessions), 100):
            await asyncio.gather(
                *(
                    publish_command(bus, s, message_command(s, "hi"))
                    for s in sessions[chunk : chunk + 100]
                )
            )
        await until(bus, "ProviderRequestStarted", OPEN_TURNS, timeout=100)
        open_at_kill = OPEN_TURNS - len(await counts(bus, "TurnEnded"))
        # past the server's 1,000 consumers a stream, which is what reloads used to hit
        assert open_at_kill > min(1000, OPEN_TURNS - 1), (
            f"only {open_at_kill} open: slow the script"
        )
        d.kill9("turn_runner")
        killed = time.monotonic()
        d.start("turn_runner")
        ended = await until(bus, "TurnEnded", OPEN_TURNS, timeout=100)
        print(f"{open_at_kill} open turns ended {time.monotonic() - killed:.1f} s after the kill")
        await asyncio.sleep(2)  # anything late (a second end) would be in by now
        ended = await counts(bus, "TurnEnded")
        assert set(ended) == set(sessions)
        assert all(n == 1 for n in ended.values()), {s: n for s, n in ended.items() if n != 1}
