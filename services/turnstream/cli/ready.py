"""`turnstream up` says it is up only once every service serves and the HTTP face answers.

A service serves once it is bound to its durable consumer: the push consumers of the
gateway, turn-runner, approval and tool-executor have a subscriber (`push_bound`), the
audit's pull consumer a waiting request; on a partitioned log, on every partition's stream.
The HTTP face answers `/readyz` with 200. The server tells, no service is changed for it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection

from rich.console import Console

from turnstream.bus.port import Bus
from turnstream.core.subjects import Subjects

DURABLES = {
    "gateway": "gateway",
    "turn_runner": "turn-runner",
    "approval": "approval",
    "tool_executor": "tool-executor",
    "audit": "audit",
}
"""Each service's durable consumer (on the inbound stream for the gateway, else the log)."""
SLOW_S = 15.0
"""After this long, `up` names the services it still waits for (it keeps waiting)."""


async def waiting_for(bus: Bus, services: Collection[str], http_base: str | None) -> list[str]:
    """The services of `services` that do not serve yet."""
    waiting = []
    for service in services:
        durable = DURABLES.get(service)
        if durable is None:
            continue
        subjects = bus.subjects
        streams = [subjects.inbound_stream] if service == "gateway" else subjects.log_streams
        for stream in streams:
            try:
                info = await bus.consumer_info(stream, durable, timeout=2)
            except Exception:  # not made yet, or the server is busy: ask again
                waiting.append(service)
                break
            if not (info.num_waiting if service == "audit" else info.push_bound):
                waiting.append(service)
                break
    if http_base is not None and "http" in services and not await _answers(http_base):
        waiting.append("http")
    return waiting


async def _answers(base: str) -> bool:
    import httpx

    try:
        async with httpx.AsyncClient(timeout=2) as client:
            return (await client.get(f"{base}/readyz")).status_code == 200
    except httpx.HTTPError:
        return False


async def wait_until_serving(
    url: str,
    subjects: Subjects,
    services: Callable[[], Collection[str]],
    http_base: str,
    check: Callable[[], None],
    console: Console,
) -> None:
    """Until every service of `services()` serves (asked again as it changes: the HTTP face
    may give up its address); `check()` between looks restarts a service that died (and
    raises when one keeps dying)."""
    from turnstream.bus import connect

    bus = await connect(url, subjects, name="turnstream-up")
    started, named = time.monotonic(), False
    try:
        while True:
            check()
            waiting = await waiting_for(bus, services(), http_base)
            if not waiting:
                return
            if not named and time.monotonic() - started > SLOW_S:
                named = True
                console.print(
                    f"[yellow]still waiting for:[/] {', '.join(waiting)} (see their logs)"
                )
            await asyncio.sleep(0.2)
    finally:
        await bus.close()
