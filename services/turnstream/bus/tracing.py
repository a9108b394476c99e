"""The headers an event is appended with, and the slot tracing plugs into.

Without tracing an event goes out with its `Nats-Msg-Id` alone. When telemetry is set
up (`turnstream.runtime.telemetry`), it installs a hook that adds the W3C `traceparent`
of the work that appended the event, so whoever the event sets to work continues the
same trace. The bus knows nothing of OpenTelemetry: it only calls the hook.
"""

from __future__ import annotations

from collections.abc import Callable

from turnstream.core.events import EventBase

HeaderHook = Callable[[EventBase], dict[str, str]]
"""An event → the extra headers to append it with (e.g. `traceparent`)."""

_hook: HeaderHook | None = None


def set_header_hook(hook: HeaderHook | None) -> None:
    """Add `hook`'s headers to every event appended from now on (None: stop)."""
    global _hook
    _hook = hook


def msg_headers(event: EventBase) -> dict[str, str]:
    """The headers `event` is appended with: its id for dedup, and the hook's."""
    if _hook is None:
        return {"Nats-Msg-Id": event.id}
    return {**_hook(event), "Nats-Msg-Id": event.id}
