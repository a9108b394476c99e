"""The one settings model: `turnstream.yaml` (optional), overridden by `TURNSTREAM_*` env vars.

Its nested sections are `settings.sections`'; reading secrets and putting NATS credentials
in a URL is `settings.credentials`'.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from turnstream.core.approval import AllowRule, ApprovalConfig
from turnstream.core.commands import ATTACHMENT_TYPES, AttachmentPolicy
from turnstream.core.costs import Budget, Price
from turnstream.core.subjects import Subjects
from turnstream.core.turn import TurnConfig
from turnstream.settings.credentials import (
    DEV_SECRETS,
    SECURE_MARK,
    dev_password_variable,
    nats_url,
    read_secret,
    redacted_values,
)
from turnstream.settings.sections import (
    CHANNEL_TOKENS,
    AllowRuleSetting,
    ChannelSettings,
    ContextProviderSetting,
    ContextSettings,
    DmPolicy,
    McpHttpServer,
    McpSettings,
    McpStdioServer,
    SessionOverride,
    SessionScope,
)

CONFIG_FILE_ENV = "TURNSTREAM_CONFIG"


class Settings(BaseSettings):
    """Deployment settings. Env var = `TURNSTREAM_` + the field name in upper case."""

    model_config = SettingsConfigDict(
        env_prefix="TURNSTREAM_",
        extra="ignore",
        use_attribute_docstrings=True,
        env_nested_delimiter="__",
    )

    nats_url: str | None = None
    """Connect to this server instead of the embedded one (`up`) or the one `up` started."""
    nats_user: str | None = None
    """The NATS user this process connects as (ops/accounts.conf: one per service); its
    password is the secret `TURNSTREAM_NATS_PASSWORD` (environment, else the secrets file)."""
    nats_inbox_prefix: str | None = None
    """The subject prefix of this process's replies; default `_INBOX.<user>` (`_INBOX`
    without a user), the one ops/accounts.conf lets this user alone subscribe to."""
    nats_port: int | None = None
    """Port for the embedded server; a free one when unset."""
    data_dir: Path = Path(".turnstream")
    """Embedded server store and local files."""
    prefix: str = "ts"
    """Subject prefix, so several deployments can share an account."""
    provider: Literal["scripted", "anthropic", "openai"] = "scripted"
    script: Path | None = None
    """Script file for the scripted provider; the built-in demo when unset."""
    model: str | None = None
    base_url: str | None = None
    """Provider endpoint: e.g. a local OpenAI-compatible server (`http://localhost:11434/v1`)."""
    max_tokens: int = Field(default=4096, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    prices: Path | None = None
    """A YAML price table `{provider: {model: {input, output, cache_write, cache_read}}}`
    in dollars per million tokens, over the shipped defaults (docs/costs.md)."""
    budget: Budget = Field(default_factory=Budget)
    """What a turn and its session may spend on the model, checked before each call:
    `TURNSTREAM_BUDGET='{"turn_tokens": 200000, "session_usd": 5}'` (also `turn_usd`,
    `session_tokens`); over it, the turn ends `budget_exceeded` (docs/costs.md)."""
    prompt_cache: Literal["5m", "1h", "off"] = "5m"
    """The model's prompt cache: Anthropic keeps the tools, system prompt and history a call
    resends for `5m` or `1h` (cache breakpoints); OpenAI's own API is given the session as
    `prompt_cache_key`. `off`: neither (docs/costs.md)."""
    followup_policy: Literal["collect", "steer"] = "collect"
    """A message that arrives while its session has a turn running: `collect` queues it as
    the next turn (FollowUpQueued), `steer` injects it before the next model call."""
    tool_calling: Literal["hard", "soft", "none"] = "hard"
    """What the model can do with tools: `hard` (native tool calls), `soft` (unreliable),
    `none` (no tools are offered; e.g. a local model without function calling)."""
    provider_max_retries: int = Field(default=3, ge=0, le=10)
    """Retries of a rate-limited, overloaded or dropped model call (each one a ProviderRetry)."""
    provider_retry_base_s: float = Field(default=0.5, gt=0)
    fallback_model: str | None = None
    """A model to continue on when the primary keeps failing with overloaded, a 5xx, a
    timeout or a dropped connection after its retries (`ProviderFallback` in the log)."""
    fallback_provider: Literal["scripted", "anthropic", "openai"] | None = None
    """The fallback model's provider; the primary's when unset."""
    fallback_base_url: str | None = None
    """The fallback provider's endpoint; when unset, the primary's `base_url` if the
    fallback has the same provider, else that provider's default."""
    sessions: dict[str, SessionOverride] = Field(default_factory=dict)
    """Per-session provider settings by session-id glob, first match wins:
    `{"support-*": {model: claude-haiku-4-5, max_tokens: 1024}}`."""
    secrets_file: Path | None = None
    """`KEY=value` lines (e.g. ANTHROPIC_API_KEY); the environment wins over the file."""
    redact: list[str] = Field(default_factory=list)
    """Secret values replaced by `[redacted]` in tool results before they are appended
    (with every value of `secrets_file`, and `redact_env` variables' values)."""
    redact_env: list[str] = Field(default_factory=list)
    """Names of environment variables whose values are redacted from tool results."""
    workspace: Path = Path("workspace")
    security_mode: Literal["auto", "ask", "allowlist", "deny"] = "ask"
    """Security mode of new sessions (fixed for a session at its first tool call)."""
    allowlist: list[AllowRuleSetting] = Field(default_factory=list)
    """`allowlist` mode: `[{tool: "read_*"}, {tool: write_file, args: {path: "notes/*"}}]`."""
    answer_timeout_s: float = Field(default=300, gt=0)
    """An approval prompt unanswered this long is denied."""
    max_tool_calls_per_turn: int = Field(default=64, ge=1)
    max_turn_seconds: float = Field(default=600, gt=0)
    """Wall-time bound of one turn."""
    tool_result_budget: int = Field(default=16_000, ge=256)
    """Characters of a tool result the model sees; the full result goes to the object store."""
    tool_concurrency: int = Field(default=32, ge=1)
    """Invocations one tool-executor runs at once."""
    max_iterations: int = Field(default=50, ge=1)
    """Model calls per turn before it ends with `limit_exceeded`."""
    max_output_continuations: int = Field(default=1, ge=0)
    max_hops: int = Field(default=8, ge=0)
    """Agent-to-agent deliveries one chain may take (a reply, a send_message, a sub-turn's
    input each count one); the next is not sent: `MessageDropped{hop_limit}`."""
    max_subturn_depth: int = Field(default=3, ge=0)
    """How deep sub-turns may nest (a child of a root turn is depth 1)."""
    max_subturns: int = Field(default=5, ge=0)
    """Sub-turns one turn may have running at once; past it `spawn` fails `limit_exceeded`."""
    max_subturns_per_root: int = Field(default=25, ge=0)
    """Sub-turns a root turn's whole tree may start (each child gets a share of it)."""
    subturn_deadline_s: float = Field(default=300, gt=0)
    """A sub-turn that has not ended by then ends `failed/timeout` for its parent."""
    workflows: Path = Path("workflows")
    agents: Path = Path("agents")
    """Agent profiles, `<name>.md` each (TURNSTREAM_AGENTS; DESIGN §11)."""
    max_input_bytes: int = Field(default=256 * 1024, ge=1024)
    """Inbound commands larger than this are rejected (`oversize`)."""
    attachment_max_bytes: int = Field(default=20 * 1024 * 1024, ge=1)
    """The largest attachment a message may carry (`InputRejected{attachment}` over it)."""
    attachment_types: list[str] = Field(default_factory=lambda: list(ATTACHMENT_TYPES))
    """The media types a message's attachments may have."""
    log_max_age_days: float = Field(default=0, ge=0)
    """Age limit of the event log; 0 keeps it forever."""
    inbound_max_age_days: float = Field(default=7, ge=0)
    """How long raw inbound commands stay (rejected ones are referenced by sequence)."""
    invocation_max_age_days: float = Field(default=1, ge=0)
    """How long a tool invocation's at-most-once claim is kept (`ts_invocations`; 0: for
    ever). The executor does not run a request older than half of it (its claim may be
    gone): it fails it `expired`."""
    duplicate_window_s: float = Field(default=120, gt=0)
    """JetStream dedup window for `Nats-Msg-Id` (retried publishes and appends)."""
    system_prompt: str | None = None
    mcp: McpSettings = Field(default_factory=McpSettings)
    """MCP servers whose tools the tool-executor offers (issue 16)."""
    context: ContextSettings = Field(default_factory=ContextSettings)
    """Context providers asked at each turn's first COMPOSE_REQUEST (issue 16)."""
    log_partitions: int = Field(default=1, ge=1, le=1024)
    """How many streams the event log is split over (docs/scaling.md): 1 keeps one
    `TS_LOG`; more needs the same value in every service, the setup step and the server's
    subject mapping (`turnstream streams mapping`). Chosen once per deployment."""
    replicas: int = Field(default=1, ge=1, le=5)
    """Stream replicas (3 on a cluster: an append is acked once a quorum has it)."""
    lease_ttl_s: float = Field(default=10, ge=1)
    """A turn-runner's lease on a session lasts this long unless renewed; a runner that dies
    (or is paused) holding leases delays its sessions by up to this much."""
    lease_renew_s: float = Field(default=3, gt=0)
    """How often a runner renews the leases of sessions with open work (and lets idle ones go)."""
    lease_retry_s: float = Field(default=0.2, gt=0)
    """A fact for a session another runner holds is redelivered after this delay."""
    http_addr: str = "127.0.0.1:8750"
    """Where `turnstream http` (and `up`) serves the HTTP face: `host:port`."""
    http_keys_file: Path | None = None
    """API keys of the HTTP face (YAML); without one it serves on loopback only."""
    a2a_push_allow_private: bool = False
    """Let A2A push-notification webhooks be on loopback, private, link-local or other
    non-public addresses (refused by default: a client could make this server call its
    internal services)."""
    a2a_file_hosts: list[str] = Field(default_factory=list)
    """Hosts an A2A file part's URI may be fetched from (exact names, lower case); a URI
    elsewhere is refused. None by default."""
    a2a_file_allow_private: bool = False
    """Let A2A file URIs be fetched from loopback, private or link-local peers (refused by
    default, at connect: `http.egress`)."""
    a2a_file_timeout_s: float = Field(default=30.0, gt=0)
    """How long an A2A file URI's fetch may take to connect and between reads."""
    a2a_push_attempts: int = Field(default=5, ge=1)
    """A webhook POST that fails is tried this many times in all, then given up (a
    `PushNotificationAbandoned` event in the log)."""
    a2a_push_backoff_s: float = Field(default=1.0, gt=0)
    """The wait before a failed webhook POST is tried again, doubled after each failure."""
    a2a_push_timeout_s: float = Field(default=10.0, gt=0)
    """How long one webhook POST may take before it counts as failed."""
    instance_id: str | None = None
    """This process's stable name among the live instances of its service (e.g. a pod or
    host name) for the leases it writes: the turn-runner's, approval's and audit's.
    Restarted under the same name, an instance takes its sessions (or partitions) back at
    once instead of after the lease TTL. The services' leases are apart (`session.`,
    `approval.`, `audit.`), so one name may serve every service of a host."""
    runner_id: str | None = None
    """The turn-runner's stable name, as `instance_id` (which it overrides for the runner)."""
    telegram: ChannelSettings = Field(default_factory=ChannelSettings)
    """The Telegram channel's policies (its token: the secret TURNSTREAM_TELEGRAM_BOT_TOKEN)."""
    telegram_api_url: str = "https://api.telegram.org"
    """The Bot API server the Telegram channel talks to (a local Bot API server, a test fake)."""
    telegram_webhook_url: str | None = None
    """Set: Telegram POSTs updates to this public URL (webhook mode) instead of the channel
    polling; its secret is TURNSTREAM_TELEGRAM_WEBHOOK_SECRET."""
    telegram_webhook_addr: str = "127.0.0.1:8443"
    """`host:port` the webhook's server listens on (behind the URL's HTTPS endpoint)."""
    slack: ChannelSettings = Field(default_factory=ChannelSettings)
    """The Slack channel's policies (its tokens: the secrets TURNSTREAM_SLACK_BOT_TOKEN and
    TURNSTREAM_SLACK_APP_TOKEN)."""
    slack_api_url: str = "https://slack.com/api/"
    """The Slack Web API the Slack channel talks to (a test fake)."""
    slack_http_addr: str = "127.0.0.1:3000"
    """`host:port` the Slack channel's Events API server listens on (without an app token)."""

    @model_validator(mode="after")
    def _renew_well_within_ttl(self) -> Settings:
        if self.lease_renew_s * 2 > self.lease_ttl_s:
            raise ValueError(
                f"lease_renew_s ({self.lease_renew_s}) must be at most half of lease_ttl_s "
                f"({self.lease_ttl_s}): a lease must survive a late renewal"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        yaml_file = Path(os.environ.get(CONFIG_FILE_ENV, "turnstream.yaml"))
        return (
            init_settings,
            env_settings,
            YamlConfigSettingsSource(settings_cls, yaml_file=yaml_file),
        )

    def session_pattern(self, session_id: str) -> str:
        """The first `sessions:` pattern a session matches ('' for none)."""
        return next((p for p in self.sessions if fnmatch.fnmatchcase(session_id, p)), "")

    def session_override(self, session_id: str) -> tuple[str, Settings]:
        """The pattern that applies to a session ('' for none) and the settings it gets."""
        pattern = self.session_pattern(session_id)
        if not pattern:
            return "", self
        changes = self.sessions[pattern].model_dump(exclude_none=True)
        if "provider" in changes and "model" not in changes:
            changes["model"] = None  # the other provider's default model
        return pattern, self.model_copy(update=changes)

    def attachment_policy(self) -> AttachmentPolicy:
        """Which files a message may carry (every door checks them with it)."""
        return AttachmentPolicy(self.attachment_max_bytes, tuple(self.attachment_types))

    def secret(self, name: str) -> str | None:
        """A secret from the environment, else from the secrets file."""
        return read_secret(name, self.secrets_file)

    def secret_values(self) -> list[str]:
        """Values to redact from tool results: `redact`, the values of `redact_env`'s
        variables (and the channels' tokens), and every value of the secrets file (values
        under 4 characters are left, they would blank out ordinary text)."""
        variables = [*self.redact_env, *CHANNEL_TOKENS]
        return redacted_values(self.redact, variables, self.secrets_file)

    def log_secrets(self) -> list[str]:
        """Values no log line may show: `secret_values`, and this process's NATS password."""
        password = self.secret("TURNSTREAM_NATS_PASSWORD") if self.nats_user else None
        return [*self.secret_values(), *([password] if password else [])]

    def channel(self, platform: str) -> ChannelSettings:
        """The policies of the channel of `platform` (`telegram`, `slack`)."""
        found = getattr(self, platform, None)
        if not isinstance(found, ChannelSettings):
            raise ValueError(f"no channel settings for platform {platform!r}")
        return found

    @property
    def subjects(self) -> Subjects:
        return Subjects(self.prefix, self.log_partitions)

    @property
    def model_name(self) -> str:
        # the one place for default models; TURNSTREAM_MODEL picks another
        defaults = {"scripted": "demo", "anthropic": "claude-sonnet-4-6", "openai": "gpt-4o-mini"}
        return self.model or defaults[self.provider]

    def fallback_settings(self) -> Settings | None:
        """The settings the fallback model is called with; None without a fallback model."""
        if not self.fallback_model:
            return None
        provider = self.fallback_provider or self.provider
        same = provider == self.provider
        base_url = self.fallback_base_url or (self.base_url if same else None)
        return self.model_copy(
            update={
                "provider": provider,
                "model": self.fallback_model,
                "base_url": base_url,
                "fallback_model": None,
            }
        )

    def turn_config(self) -> TurnConfig:
        fallback = self.fallback_settings()
        return TurnConfig(
            provider=self.provider,
            model=self.model_name,
            max_iterations=self.max_iterations,
            max_output_continuations=self.max_output_continuations,
            system_prompt=self.system_prompt,
            max_tool_calls_per_turn=self.max_tool_calls_per_turn,
            max_turn_seconds=self.max_turn_seconds,
            offer_tools=self.tool_calling != "none",
            followup_policy=self.followup_policy,
            max_hops=self.max_hops,
            max_subturn_depth=self.max_subturn_depth,
            max_subturns=self.max_subturns,
            max_subturns_per_root=self.max_subturns_per_root,
            subturn_deadline_s=self.subturn_deadline_s,
            fallback=(fallback.provider, fallback.model_name) if fallback else None,
            approval=self.approval_config(),
            budget=self.budget,
            # always: an agent profile or a stage may budget in dollars where this does not
            prices=self.price_pairs(),
        )

    def price_pairs(self) -> tuple[tuple[str, Price], ...]:
        """The price table (the shipped defaults, `prices` over them) as pairs."""
        from turnstream.prices import load_prices

        table = load_prices(self.prices)
        return tuple(
            (f"{p}/{m}", price) for p, models in table.items() for m, price in models.items()
        )

    def approval_config(self) -> ApprovalConfig:
        return ApprovalConfig(
            default_mode=self.security_mode,
            allowlist=tuple(AllowRule(r.tool, dict(r.args)) for r in self.allowlist),
            answer_timeout_s=self.answer_timeout_s,
        )

    @property
    def url_file(self) -> Path:
        """Where `turnstream up` writes the URL of its embedded server for other commands."""
        return self.data_dir / "nats.url"

    def resolved_nats_url(self) -> str:
        """The server to talk to: explicit, else the one a running `turnstream up` started;
        with `nats_user`, its credentials are put in each server URL that has none."""
        return nats_url(self.nats_url, self.url_file, self.nats_user, self.secret)


__all__ = [
    "CHANNEL_TOKENS",
    "CONFIG_FILE_ENV",
    "DEV_SECRETS",
    "SECURE_MARK",
    "AllowRuleSetting",
    "ChannelSettings",
    "ContextProviderSetting",
    "ContextSettings",
    "DmPolicy",
    "McpHttpServer",
    "McpSettings",
    "McpStdioServer",
    "SessionOverride",
    "SessionScope",
    "Settings",
    "dev_password_variable",
]
