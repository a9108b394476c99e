"""`bus.retry`: what is asked again (a NATS hiccup), how long, and what ends the wait."""

from __future__ import annotations

import asyncio

import pytest
from nats import errors
from nats.js.errors import BadRequestError, NotFoundError, ServiceUnavailableError

from turnstream.bus import retry
from turnstream.bus.durables import DurableMissing


@pytest.fixture(autouse=True)
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retry, "FIRST_S", 0.01)
    monkeypatch.setattr(retry, "MAX_S", 0.04)


def failing(*raised: BaseException) -> tuple[list[int], object]:
    tries: list[int] = []

    async def step() -> str:
        tries.append(1)
        if len(tries) <= len(raised):
            raise raised[len(tries) - 1]
        return "answered"

    return tries, step


@pytest.mark.parametrize(
    "hiccup",
    [
        errors.TimeoutError(),
        TimeoutError("log scan stalled"),
        errors.ConnectionClosedError(),
        errors.NoRespondersError(),
        ConnectionResetError(),
        ServiceUnavailableError(code=503),
        BadRequestError(code=400, err_code=10005, description="no suitable peers"),
    ],
)
async def test_a_hiccup_is_asked_again_until_answered(hiccup: BaseException, caplog) -> None:
    tries, step = failing(hiccup, hiccup, hiccup)
    assert await retry.retried("consumer x", step) == "answered"  # type: ignore[arg-type]
    assert len(tries) == 4
    warned = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 3 and "consumer x" in warned[0].getMessage()


@pytest.mark.parametrize(
    "answer", [NotFoundError(code=404), DurableMissing("run the setup step"), ValueError()]
)
async def test_an_answer_is_raised_at_once(answer: BaseException) -> None:
    tries, step = failing(answer)
    with pytest.raises(type(answer)):
        await retry.retried("consumer x", step)  # type: ignore[arg-type]
    assert len(tries) == 1


async def test_within_bounds_the_wait() -> None:
    tries, step = failing(*[errors.TimeoutError()] * 100)
    with pytest.raises(errors.TimeoutError):
        await retry.retried("streams", step, within=0.1)  # type: ignore[arg-type]
    assert 2 <= len(tries) < 100


async def test_the_waits_double_up_to_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(retry.asyncio, "sleep", sleep)
    _, step = failing(*[errors.TimeoutError()] * 5)
    await retry.retried("x", step)  # type: ignore[arg-type]
    assert waits == [0.01, 0.02, 0.04, 0.04, 0.04]


async def test_stoppable_ends_a_wait_at_stop() -> None:
    _, step = failing(*[errors.TimeoutError()] * 1000)
    stop = asyncio.Event()
    asked = asyncio.ensure_future(retry.stoppable(retry.retried("x", step), stop))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    stop.set()
    assert await asyncio.wait_for(asked, 1) is None


async def test_stoppable_gives_the_answer() -> None:
    _, step = failing(errors.TimeoutError())
    got = await retry.stoppable(retry.retried("x", step), asyncio.Event())  # type: ignore[arg-type]
    assert got == "answered"
