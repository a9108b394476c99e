"""Push events: what the HTTP face's A2A push-notification delivery records in the log (it
never changes a turn)."""

from __future__ import annotations

from typing import Literal

from turnstream.core.events.base import EventBase, WireModel


class PushNotificationAbandonedData(WireModel):
    task_id: str
    """The A2A task (the turn) the update was about."""
    config_id: str
    """The task's push-notification config whose webhook did not take it."""
    webhook: str
    """The webhook's scheme, host and path (its query, where a secret may ride, left out)."""
    update_seq: int
    """The log sequence of the update (its id, with the task's)."""
    attempts: int
    """How many POSTs were tried."""
    error: str
    """What the last one got: an HTTP status or a connection error, in one line."""


class PushNotificationAbandoned(EventBase):
    type: Literal["PushNotificationAbandoned"] = "PushNotificationAbandoned"
    data: PushNotificationAbandonedData
