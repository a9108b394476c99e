"""Free memory given back once a burst of work is over."""

from __future__ import annotations

import asyncio
import platform

import pytest

from tests.unit.mailboxes import Forgetful, running
from turnstream.runtime import memory
from turnstream.runtime.mailbox import Mailboxes
from turnstream.runtime.memory import QuietTrim


async def test_memory_is_given_back_once_after_work_pauses_not_while_it_goes_on() -> None:
    # the quiet period is long against the pauses between touches, so a loaded machine
    # (a 0.02 s sleep taking ten times that) does not let it pass between two of them
    released: list[float] = []
    quiet = QuietTrim(0.5, lambda: released.append(asyncio.get_running_loop().time()))
    for _ in range(4):  # work keeps coming, each time within the quiet period
        quiet.touch()
        await asyncio.sleep(0.02)
    assert released == []
    last = quiet.last
    await asyncio.sleep(0.8)
    assert len(released) == 1 and released[0] >= last + 0.5
    await asyncio.sleep(0.6)
    assert len(released) == 1  # nothing new: nothing more to give back
    quiet.touch()
    quiet.cancel()  # shutting down
    await asyncio.sleep(0.6)
    assert len(released) == 1


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_trim_calls_glibc() -> None:
    assert memory.trim()


async def test_mailboxes_give_memory_back_once_their_items_pause() -> None:
    released: list[int] = []
    boxes: Mailboxes[int] = Mailboxes(
        lambda key: Forgetful(), quiet=QuietTrim(0.5, lambda: released.append(1))
    )  # quiet for 0.5 s: long next to a slow machine's pause between the steps below
    async with running(boxes):
        for n in range(100):
            boxes.deliver(f"s{n % 7}", n)
        await asyncio.sleep(0.02)
        assert released == []
        await asyncio.sleep(0.8)
        assert released == [1]
