"""The Slack channel: `python -m turnstream.channels.slack` (docs/channels.md): the
channel core's service with Slack as its platform (`channels.slack_platform`) and Slack's
poster (`channels.slack_posting`)."""

from __future__ import annotations

import asyncio
from functools import partial

from turnstream.bus import Bus
from turnstream.channels.service import serve_channel
from turnstream.channels.slack_platform import SlackPlatform
from turnstream.channels.slack_posting import SlackPoster
from turnstream.runtime.process import run_service
from turnstream.settings import Settings

__all__ = ["SlackPlatform", "main", "serve"]


async def serve(settings: Settings, stop: asyncio.Event, bus: Bus | None = None) -> None:
    """Run the Slack channel until `stop` is set (its own NATS connection unless a test
    gives one): the core's `ChannelService` with Slack's poster (`channels.slack_posting`)."""
    bot_token = settings.secret("TURNSTREAM_SLACK_BOT_TOKEN")
    app_token = settings.secret("TURNSTREAM_SLACK_APP_TOKEN")
    signing_secret = settings.secret("TURNSTREAM_SLACK_SIGNING_SECRET")
    if not bot_token or not (app_token or signing_secret):
        raise SystemExit(
            "the Slack channel needs TURNSTREAM_SLACK_BOT_TOKEN (xoxb-…) and either "
            "TURNSTREAM_SLACK_APP_TOKEN (xapp-…, Socket Mode) or "
            "TURNSTREAM_SLACK_SIGNING_SECRET (the Events API over HTTP), in the environment "
            "or the secrets file (docs/channels.md)"
        )
    host, _, port = settings.slack_http_addr.rpartition(":")
    platform = SlackPlatform(
        bot_token,
        app_token,
        settings.slack_api_url,
        signing_secret=signing_secret,
        listen=(host or "127.0.0.1", int(port)),
    )
    poster = partial(SlackPoster, platform)
    await serve_channel(platform, settings, stop, bus, poster=poster)


def main() -> None:
    run_service("channel-slack", serve)


if __name__ == "__main__":
    main()
