"""The A2A edge's pure parts: the card's form per protocol version, what a webhook is sent
and to whom, and what the log keeps of its URL (no I/O)."""

from __future__ import annotations

import pytest
from a2a.types.a2a_pb2 import AuthenticationInfo, TaskPushNotificationConfig

from turnstream.http.a2a.card import agent_card, card_body, card_version
from turnstream.http.a2a.push import PushEntry, webhook_of
from turnstream.http.a2a.pusher import due, headers_for, status_update
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
