"""The log full, decided and classified: `StorageRefused` ends each live turn once
(`storage_full`, with what to do), queued input still runs; JetStream's answers that mean
"no storage" are told from the others. No I/O."""

from __future__ import annotations

from tests.unit.factories import Ids, accepted, ctx
from turnstream.bus.appender import AppendError, LogFull, refused
from turnstream.bus.full import Alarm, backoff_s, full_code, full_parts, is_log_full
from turnstream.core.events import TurnEnded
from turnstream.core.inputs import Fact, Tick
from turnstream.core.session import SessionState, fold
from turnstream.core.session.decider import Providers, StorageRefused, decide_session
from turnstream.core.turn import TurnConfig

CONFIG = TurnConfig()


def test_a_refused_turn_ends_once_failed_storage_full_and_the_next_input_runs() -> None:
    state = fold(SessionState.of("s1"), [accepted(1, "first")])
    started = decide_session(state, Tick(), CONFIG, ctx(Ids()))
    assert started.state.chat.active is not None  # waiting on the model
    queued = decide_session(started.state, Fact(accepted(2, "second")), CONFIG, ctx(Ids("q")))
    ended = decide_session(
        queued.state, StorageRefused("maximum bytes exceeded"), CONFIG, ctx(Ids("e"))
    )
    [end] = [e for e in ended if isinstance(e, TurnEnded)]
    assert end.turn_id == started.state.chat.active.turn_id
    assert (end.data.status, end.data.failure_class) == ("failed", "storage_full")
    assert "maximum bytes exceeded" in (end.data.reason or "")
    assert "turnstream archive" in (end.data.next_action or "")
    assert ended[-1].type != "TurnEnded"  # the queued input's turn started after it
    second = ended.state.chat.active
    assert second is not None and second.turn_id != end.turn_id
    [providers] = [e for e in ended.effects if isinstance(e, Providers)]
    assert providers.live == {second.turn_id}  # the ended turn's model call is cancelled
    # decided again (a retry), nothing more ends
    again = decide_session(ended.state, StorageRefused("x"), CONFIG, ctx(Ids("f")))
    assert [e for e in again if isinstance(e, TurnEnded) and e.turn_id == end.turn_id] == []


def test_a_quiet_session_decides_nothing_when_refused() -> None:
    assert list(decide_session(SessionState.of("s1"), StorageRefused("x"), CONFIG, ctx())) == []


def test_jetstreams_no_storage_answers_are_told_from_the_others() -> None:
    assert full_code(10023, "insufficient resources")
    assert full_code(10047, "insufficient storage resources available")
    assert full_code(10077, "maximum bytes exceeded")
    assert full_code(10077, "maximum messages exceeded")
    assert not full_code(10077, "message size exceeds maximum allowed")
    assert not full_code(10071, "wrong last sequence: 4")
    assert isinstance(refused(10023, "insufficient resources"), LogFull)
    assert type(refused(10071, "wrong last sequence")) is AppendError
    assert is_log_full(LogFull(10077, "maximum bytes exceeded"))
    assert not is_log_full(TimeoutError())
    assert [backoff_s(n) for n in (1, 2, 3, 99)] == [1.0, 2.0, 4.0, 30.0]


def test_the_alarm_speaks_once_per_run_of_refusals_and_per_kind() -> None:
    told: list[tuple[bool, str]] = []
    alarm = Alarm(hook=lambda on, kind: told.append((on, kind)))
    error = LogFull(10077, "maximum bytes exceeded")
    alarm.refusal(error, "ts.log.s1.TurnEnded")
    alarm.refusal(error, "ts.log.s2.StagePreFired")
    alarm.stored("$KV.ts_leases.session.s1")  # another kind going through ends nothing
    assert alarm.full and list(alarm.runs) == ["ts.log"] and alarm.refused == 2
    alarm.stored("ts.log.s1.TurnEnded")
    assert not alarm.full
    assert told == [(True, "ts.log"), (True, "ts.log"), (False, "ts.log")]

    assert alarm.refusing("ts.log.s1.*") is None


def test_the_alarm_says_what_refused_a_kind_while_its_run_lasts() -> None:
    alarm = Alarm()
    alarm.refusal(LogFull(10077, "maximum bytes exceeded"), "ts.log.s1.TurnEnded")
    assert alarm.refusing("ts.log.s2.*") == "JetStream error 10077: maximum bytes exceeded"
    assert alarm.refusing("$KV.ts_leases.session.s2") is None  # another kind: taken


def test_the_parts_at_their_limit_are_named() -> None:
    def stream(name: str, used: int, limit: int) -> dict[str, object]:
        return {"stream": name, "bytes": used, "messages": 1, "maxBytes": limit, "maxMsgs": -1}

    usage = {
        "streams": [
            stream("TS_INBOUND", 10, -1),  # no limit
            stream("TS_LOG", 1_000_000, 1_000_000),  # at it
            stream("TS_DEAD", 100, 1_000_000),  # far from it
        ],
        "account": {"bytes": 5_000, "maxBytes": -1},
    }
    assert full_parts(usage) == ["TS_LOG"]
    usage["account"] = {"bytes": 9_990, "maxBytes": 10_000}
    assert full_parts(usage) == ["TS_LOG", "account"]
