"""The agent card: this server as one A2A agent, each agent profile (DESIGN §11) a skill,
served to each protocol version in its own form (`card_body`)."""

from __future__ import annotations

from typing import Any

from a2a.compat.v0_3.conversions import to_compat_agent_card
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0, TransportProtocol
from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]

from turnstream.agents import load_all
from turnstream.settings import Settings

DEFAULT_SKILL = AgentSkill(
    id="default",
    name="default agent",
    description="The deployment's default agent (its configured provider, model and tools). "
    "A message starts a turn in the session named by contextId; a tool call that needs "
    "approval pauses the task in input-required until a reply approves or denies it.",
    tags=["turnstream"],
)
BINDINGS = (
    (TransportProtocol.JSONRPC.value, "/a2a"),
    (TransportProtocol.HTTP_JSON.value, "/a2a/rest"),
)
"""Each binding and where it is served, JSON-RPC first (a v0.3 client's main `url`)."""
INPUT_MODES = ["text/plain", "application/json"]
"""What a message may carry besides files: text parts, and data parts (a prompt's
decision, or an attachment)."""


def input_modes(settings: Settings) -> list[str]:
    """The card's `defaultInputModes`: text and data parts, and the files taken
    (`TURNSTREAM_ATTACHMENT_TYPES`)."""
    return list(dict.fromkeys([*INPUT_MODES, *settings.attachment_types]))


def agent_card(settings: Settings, base: str, *, secured: bool) -> AgentCard:
    """The card served at `/.well-known/agent-card.json`; `base` is this server's URL as the
    caller reached it (so the card is right behind a proxy that sets the Host)."""
    profiles, _ = load_all(settings.agents)
    skills = [DEFAULT_SKILL] + [
        AgentSkill(
            id=p.name,
            name=p.name,
            description=p.description,
            tags=["turnstream", "agent-profile"],
        )
        for p in sorted(profiles.values(), key=lambda p: p.name)
    ]
    card = AgentCard(
        name="turnstream",
        description="LLM agent turns as event-sourced services on NATS JetStream: every "
        "stage of a turn is an event in a durable log.",
        version="0.1.0",
        supported_interfaces=[
            AgentInterface(url=base + path, protocol_binding=binding, protocol_version=version)
            for version in (PROTOCOL_VERSION_1_0, PROTOCOL_VERSION_0_3)
            for binding, path in BINDINGS
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
        default_input_modes=input_modes(settings),
        default_output_modes=["text/plain", "application/json"],
        skills=skills,
    )
    if secured:
        card.security_schemes["bearer"].CopyFrom(
            SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="Bearer",
                    description="An API key from TURNSTREAM_HTTP_KEYS_FILE",
                )
            )
        )
        card.security_requirements.append(
            SecurityRequirement(schemes={"bearer": StringList(list=[])})
        )
    return card


CACHE_CONTROL = "public, max-age=300"
"""A card changes when the agent profiles do: a client may keep it 5 minutes, then asks
again with its `ETag` (a `304` when nothing changed)."""


def card_version(header: str | None) -> str:
    """The card's form for a client's `A2A-Version` header: none or `0.x` is a v0.3
    client (the spec: a request without the header is v0.3), any other the v1.0 form."""
    major = (header or PROTOCOL_VERSION_0_3).strip().lstrip("vV").split(".")[0]
    return PROTOCOL_VERSION_0_3 if major in ("", "0") else PROTOCOL_VERSION_1_0


def card_body(card: AgentCard, version: str) -> dict[str, Any]:
    """`card` as JSON in the form `version` defines, and only that form: v1.0 with its
    `supportedInterfaces` (no v0.3 top-level `url`, `preferredTransport`,
    `protocolVersion`); v0.3 with those (its interface first, the rest as
    `additionalInterfaces`)."""
    if version == PROTOCOL_VERSION_0_3:
        body: dict[str, Any] = to_compat_agent_card(card).model_dump(
            exclude_none=True, by_alias=True
        )
        return body
    return dict(MessageToDict(card))
