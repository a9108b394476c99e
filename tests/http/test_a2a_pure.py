"""The A2A edge's pure parts: the card's form per protocol version, what a webhook is sent
and to whom, what the log keeps of its URL, and which tasks' events the push delivery
acts on (no I/O)."""

from __future__ import annotations

import orjson
import pytest
from a2a.types.a2a_pb2 import AuthenticationInfo, TaskPushNotificationConfig

from tests.unit.factories import T0, fact
from turnstream.core.events import (
    InteractionAnswered,
    InteractionAnsweredData,
    InteractionRequested,
    InteractionRequestedData,
    Sender,
    SessionTurnStart,
    SessionTurnStartData,
    encode,
)
from turnstream.http.a2a.card import agent_card, card_body, card_version
from turnstream.http.a2a.mapping import status_update
from turnstream.http.a2a.push import PushEntry, due, headers_for, merged_sent, webhook_of
from turnstream.http.a2a.push_index import PushIndex, interaction_key, wanted
from turnstream.http.a2a.view import TurnView
from turnstream.settings import Settings


@pytest.mark.parametrize(
    ("header", "version"),
    [(None, "0.3"), ("", "0.3"), ("0.3", "0.3"), ("0.3.0", "0.3"), ("1.0", "1.0"), ("1", "1.0"),
     ("v1.0", "1.0"), ("2.0", "1.0")],
)  # fmt: skip
def test_the_card_form_follows_the_version_header(header: str | None, version: str) -> None:
    assert card_version(header) == version


def test_each_form_has_only_its_own_fields() -> None:
    card = agent_card(Settings(), "http://h", secured=False)
    v10, v03 = card_body(card, "1.0"), card_body(card, "0.3")
    assert "supportedInterfaces" in v10 and "url" not in v10 and "protocolVersion" not in v10
    assert v03["url"] == "http://h/a2a" and "supportedInterfaces" not in v03
    assert [i["transport"] for i in v03["additionalInterfaces"]] == ["HTTP+JSON"]


def test_the_log_keeps_a_webhook_without_its_secrets() -> None:
    assert webhook_of("https://u:p@hooks.example.com/a/b?token=s3#x") == (
        "https://hooks.example.com/a/b"
    )


def test_a_webhook_gets_the_clients_token_and_credentials_back() -> None:
    config = TaskPushNotificationConfig(
        url="https://x",
        token="t1",
        authentication=AuthenticationInfo(scheme="Bearer", credentials="c"),
    )
    assert headers_for(config) == {"X-A2A-Notification-Token": "t1", "Authorization": "Bearer c"}
    assert headers_for(TaskPushNotificationConfig(url="https://x")) == {}


def test_an_update_names_itself_and_goes_to_the_configs_not_sent_it() -> None:
    view = TurnView("t1", "s1", state="completed", last_seq=40, reply="hi")
    update = status_update(view, 40)
    assert update.task_id == "t1" and update.metadata["updateId"] == "t1:40"
    entry = PushEntry(view, configs={"a": {}, "b": {}, "c": {}}, sent={"a": 40, "b": 39})
    assert due(entry, 40) == ["b", "c"]


def _entry(configs: dict[str, object]) -> bytes:
    return orjson.dumps({"view": {}, "configs": configs, "sent": {}})


def test_the_index_holds_the_tasks_with_configs_as_the_watch_hands_them_on() -> None:
    index = PushIndex()
    index.apply("t1", _entry({"c1": {"url": "https://x"}}), None, 3)
    index.apply("t2", _entry({}), None, 4)  # an entry whose configs were all deleted
    assert index.tasks == {"t1"} and index.applied == 4
    index.apply("t1", _entry({}), None, 5)
    index.apply("t2", _entry({"c": {}}), None, 6)
    assert index.tasks == {"t2"}
    index.apply("t2", b"", "DEL", 7)
    assert index.tasks == set() and index.applied == 7


def test_the_index_is_trusted_only_up_to_what_it_applied() -> None:
    index = PushIndex()
    assert not index.current(1) and index.current(0)
    index.caught_up(10)  # the watch's first values cover the bucket as of sequence 10
    assert index.current(10) and not index.current(11)
    index.apply("t1", _entry({"c": {}}), None, 11)
    assert index.current(11)
    index.caught_up(5)  # never backwards
    assert index.applied == 11


def test_only_events_of_tasks_with_configs_are_anyones_and_an_answer_finds_its_task() -> None:
    index = PushIndex()
    asked = fact(
        InteractionRequested,
        InteractionRequestedData,
        turn="t1",
        interaction_id="i1",
        invocation_id="v1",
        tool="write_file",
        args={},
        deadline=T0,
        prompt="ok?",
    )
    answer = fact(
        InteractionAnswered,
        InteractionAnsweredData,
        turn="",
        interaction_id="i1",
        decision="approve",
        sender=Sender(kind="human", id="ana"),
        idempotency_key="k",
        inbound_seq=1,
    )
    assert index.task_of(asked) is None and index.task_of(answer) is None  # no configs
    index.apply("t1", _entry({"c": {}}), None, 1)
    assert index.task_of(asked) == "t1"
    assert index.task_of(answer) == "t1"  # remembered when its prompt was seen
    other = PushIndex()
    other.apply(interaction_key("i1"), b"t1", None, 2)  # another replica wrote it
    assert other.task_of(answer) == "t1"
    other.apply(interaction_key("i1"), b"", "PURGE", 3)
    assert other.task_of(answer) is None


def test_an_event_is_wanted_as_its_json_says_as_task_of_would_name_its_task() -> None:
    index = PushIndex()
    index.apply("t1", _entry({"c": {}}), None, 1)
    index.apply(interaction_key("i1"), b"t1", None, 2)
    mine = fact(
        SessionTurnStart,
        SessionTurnStartData,
        turn="t1",
        input_id="x",
        text="hi",
        sender=Sender(kind="human", id="ana"),
    )
    other = fact(
        SessionTurnStart,
        SessionTurnStartData,
        turn="t2",
        input_id="y",
        text="hi",
        sender=Sender(kind="human", id="ana"),
    )
    answer = fact(
        InteractionAnswered,
        InteractionAnsweredData,
        turn="",
        interaction_id="i1",
        decision="approve",
        sender=Sender(kind="human", id="ana"),
        idempotency_key="k",
        inbound_seq=1,
    )
    elsewhere = answer.model_copy(
        update={"data": answer.data.model_copy(update={"interaction_id": "i9"})}
    )
    for event in (mine, other, answer, elsewhere):
        assert wanted(index, orjson.loads(encode(event))) == (index.task_of(event) is not None)
    assert wanted(index, {"turnId": "t2"})  # no type: not read this way, decoded


def test_two_deliveries_of_a_task_keep_the_later_sent_per_config() -> None:
    assert merged_sent({"a": 5, "b": 9}, {"a": 7, "c": 2}) == {"a": 7, "b": 9, "c": 2}
