"""Chat channels: a chat platform (Telegram, Slack, …) as a gateway to turnstream's
sessions, one module per platform on this shared core (docs/channels.md).

A channel is its own process (`python -m turnstream.channels.<platform>`) with its own NATS
user (`channel-<platform>` in ops/accounts.conf). Inbound, a platform message becomes a
command on `<prefix>.in.<session>` whose idempotencyKey is the platform's message identity,
and the platform is acknowledged only after the command is stored. Outbound, the channel
follows its sessions' log through its own durable (`bus.durables.channel`) and the live
tokens, and posts each reply, prompt and final message once (`channels.posting`).

The core, platform-agnostic:

    platform.py  the `Platform` protocol and the values that cross it (`Chat`, `Incoming`,
                 `Press`, `Delivery`, `Button`, `Limits`, `RateLimited`, `PlatformError`)
    inbound.py   pure: message/press → command, refusal, pairing code, `/new`, or nothing
                 (DM policy, pairing, groups and mention gating, bot loops, `/stop`, `/new`)
    outbound.py  pure: log events, tokens, ticks → effects (typing, stream, final reply
                 split to the limit, approval prompt with buttons, tool status line)
    text.py      pure: splitting, status lines, prompt and failure texts
    pairing.py   pure: the book of one-time pairing codes
    records.py   the channel's KV bucket: what was posted, pairing, `/new` generations
    posting.py   exactly-once posting over the records (replies, prompts, notices); 429s
                 waited out
    files.py     the files a message carries, fetched and attached (inline or stored)
    service.py   the shell: `ChannelService`, `serve_channel(platform, settings, stop)`

To add a platform (Discord, Matrix, …), write one module `channels/<platform>.py` that:

1. implements `Platform` with the platform's official SDK: `receive()` yields `Delivery`s
   of `Incoming` messages (with `key` = the platform's message identity, `mentions_bot`,
   `from_bot`/`from_self` set, `files` it carries) and `Press`es of approval buttons, and
   acknowledges them to the platform only in `Delivery.ack`; `typing`, `draft` (False if no
   native streaming), `post` (returns a reference), `edit`, `answer_press`, `download`,
   `aclose`; Markdown converted to the
   platform's markup inside `post`/`edit`; a 429 raised as `RateLimited(retry_after)`, an
   API error as `PlatformError(method, code, transient=…)` (never with a token); where
   the platform can find a posted message again, also `FindsPosts` (`post_tagged`,
   `find_tagged`), which closes the window between a post and its record;
2. has `main()` reading its token with `Settings.secret(...)` and calling
   `runtime.process.run_service(f"channel-{name}", ...)` over `serve_channel`;
3. is added to `bus.streams.CHANNEL_PLATFORMS` (its bucket and durable), given a
   `ChannelSettings` field and URL in `settings/__init__.py`, a NATS user `channel-<name>` in
   ops/accounts.conf (copy `channel-telegram`'s), and a line in `cli/up.py`.
"""
