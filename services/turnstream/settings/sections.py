"""The settings' sections: the nested models `Settings` holds (MCP servers, context
providers, chat channels, per-session overrides)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class AllowRuleSetting(BaseModel):
    tool: str
    args: dict[str, str] = Field(default_factory=dict)


class SessionOverride(BaseModel):
    """Provider settings for the sessions whose id matches a pattern (deployment config:
    a sender cannot choose where model calls go, or with which key)."""

    provider: Literal["scripted", "anthropic", "openai"] | None = None
    model: str | None = None
    base_url: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    tool_calling: Literal["hard", "soft", "none"] | None = None
    followup_policy: Literal["collect", "steer"] | None = None


class McpStdioServer(BaseModel):
    """An MCP server run as a subprocess, spoken to over its stdin/stdout."""

    model_config = {"extra": "forbid"}
    command: str
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    """Added to a minimal environment; values may be `${secret:NAME}` or `${env:NAME}`."""
    timeout_s: float = Field(default=30, gt=0)
    """Connecting, and each call, give up after this long (the call fails, then reconnects)."""


class McpHttpServer(BaseModel):
    """An MCP server over streamable HTTP."""

    model_config = {"extra": "forbid"}
    url: str
    headers: dict[str, str] = Field(default_factory=dict)
    """Values may be `${secret:NAME}` or `${env:NAME}` (e.g. `Bearer ${secret:API_TOKEN}`)."""
    timeout_s: float = Field(default=30, gt=0)


class McpSettings(BaseModel):
    servers: dict[str, McpStdioServer | McpHttpServer] = Field(default_factory=dict)
    """`{<name>: {command, args, env} | {url, headers}}`; tools appear as `<name>__<tool>`."""


class ContextProviderSetting(BaseModel):
    """One context provider: a built-in (`agents_md`, `datetime`, `summary`), an installed
    one (entry point) to adjust, or a remote one (`subject`)."""

    model_config = {"extra": "forbid"}
    subject: str | None = None
    """Remote: the NATS subject that answers `{sessionId, turnId, input, summary, …}` with
    `{"content": "<text>" | null}`."""
    priority: int = 100
    """Lower comes first in the system prompt."""
    timeout_ms: int = Field(default=1000, ge=1, le=60_000)
    max_tokens: int = Field(default=1000, ge=1)
    """Token budget (characters / 4): a longer answer is cut to it."""
    volatile: bool | None = None
    """Its answer changes from turn to turn, so it goes after the prompt-cache prefix (at the
    end of the request) instead of in the system prompt; unset: true for `datetime` only."""


class ContextSettings(BaseModel):
    providers: dict[str, ContextProviderSetting] = Field(default_factory=dict)
    """`{agents_md: {}, datetime: {priority: 10}, team: {subject: ctx.team}}`: each turn's
    requests carry what they say (`ContextProvided` in the log)."""


DmPolicy = Literal["pairing", "allowlist", "open", "disabled"]
SessionScope = Literal["thread", "chat", "user"]
CHANNEL_TOKENS = (
    "TURNSTREAM_TELEGRAM_BOT_TOKEN",
    "TURNSTREAM_TELEGRAM_WEBHOOK_SECRET",
    "TURNSTREAM_SLACK_BOT_TOKEN",
    "TURNSTREAM_SLACK_APP_TOKEN",
    "TURNSTREAM_SLACK_SIGNING_SECRET",
)
"""The chat platforms' tokens (docs/channels.md): secrets, read with `Settings.secret` (the
environment, else the secrets file), redacted from every log line and tool result."""


class ChannelSettings(BaseModel):
    """Who may talk to the agent on one chat platform, and how its chats map to sessions
    (`turnstream.channels`; env `TURNSTREAM_TELEGRAM__DM_POLICY=open`, or YAML
    `telegram: {dm_policy: open}`)."""

    model_config = {"extra": "forbid"}
    dm_policy: DmPolicy = "pairing"
    """Direct messages from a sender not in `allow_from`: `pairing` answers with a one-time
    code the owner approves (`turnstream channels pairing approve CODE`), `allowlist`
    refuses, `open` takes them, `disabled` refuses every direct message."""
    allow_from: list[str] = Field(default_factory=list)
    """Platform user ids that may always talk to the agent (in direct messages and in
    allowed groups)."""
    groups: list[str] = Field(default_factory=list)
    """Group chats (Telegram chat ids, Slack channel ids) the agent answers in; `*`: any."""
    require_mention: bool = True
    """In a group, only a message that mentions the bot (or replies to it) is taken."""
    session_scope: SessionScope | None = None
    """One session per `thread`, per `chat` (or forum topic), or per `user`; unset: the
    platform's default (Telegram `chat`, Slack `thread`)."""
    approvers: list[str] = Field(default_factory=list)
    """User ids that may answer any approval prompt, beside the turn's own sender."""
    bot_chats: list[str] = Field(default_factory=list)
    """Chats where messages from other bots are taken (bot-loop protection ignores them
    elsewhere; the channel's own are always ignored)."""
    pairing_ttl_s: float = Field(default=3600, gt=0)
    """How long a pairing code can be approved."""
    stream_interval_s: float = Field(default=1.0, ge=0.05)
    """The least time between two updates of a reply being streamed (platform rate limits)."""
