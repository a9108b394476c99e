"""JSON Schema exported from the contract models, for gateways in any language.

`turnstream schemas export` writes these to `schemas/`; a test fails when the committed
files differ from a fresh export.

The files are plain JSON Schema 2020-12, usable by strict validators (ajv's strict mode,
`jsonschema` with format checking): pydantic's OpenAPI `discriminator` keyword is taken
out, each union is a `oneOf` whose members are told apart by a required `type` with a
`const` value.
"""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from pydantic import Field, TypeAdapter

from turnstream.core.commands import COMMAND_ADAPTER
from turnstream.core.events import EVENT_ADAPTER, WireModel

BASE_ID = "https://turnstream.dev/schemas/"


class LiveToken(WireModel):
    """A token delta on `<prefix>.live.<sessionId>.<turnId>` (core NATS, not stored): for
    UIs only; the log's `ProviderRequestCompleted` holds the whole message."""

    turn_id: str
    """The turn whose model call streams it (also the subject's last token)."""
    iteration: Annotated[int, Field(ge=1)]
    """Which model call of the turn (1 for the first)."""
    index: Annotated[int, Field(ge=0)]
    """Position of this delta within its model call, from 0: a gap means one was lost."""
    delta: str
    """The text to append."""


LIVE_TOKEN_ADAPTER: TypeAdapter[LiveToken] = TypeAdapter(LiveToken)


def _unions(node: Any) -> list[dict[str, Any]]:
    """Every schema in `node` that carries a `discriminator`."""
    if isinstance(node, list):
        return [union for item in node for union in _unions(item)]
    if not isinstance(node, dict):
        return []
    own = [node] if "discriminator" in node else []
    return own + [union for value in node.values() for union in _unions(value)]


def _strict(node: Any) -> Any:
    """`node` without its `discriminator` keywords (an OpenAPI extension strict JSON Schema
    validators refuse)."""
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {key: _strict(value) for key, value in node.items() if key != "discriminator"}


def _require_kind(defs: dict[str, Any], union: dict[str, Any]) -> None:
    """Every member of `union` (a `oneOf` of `$ref`s) requires the discriminating property,
    which has a `const`: a validator finds the one member by it, with no extension keyword."""
    kind = union["discriminator"]["propertyName"]
    for member in union["oneOf"]:
        target = defs[member["$ref"].rsplit("/", 1)[-1]]
        assert "const" in target["properties"][kind], target.get("title")
        required = target.setdefault("required", [])
        if kind not in required:
            required.insert(0, kind)


def _schema(adapter: TypeAdapter[Any], name: str, title: str) -> dict[str, Any]:
    schema = adapter.json_schema(by_alias=True, mode="validation")
    for union in _unions(schema):
        _require_kind(schema["$defs"], union)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": BASE_ID + name,
        "title": title,
        **_strict(schema),
    }


def exported_schemas() -> dict[str, bytes]:
    """File name → file content, deterministic."""
    files = {
        "inbound-command.schema.json": _schema(
            COMMAND_ADAPTER,
            "inbound-command.schema.json",
            "turnstream inbound command (publish to <prefix>.in.<sessionId>)",
        ),
        "event.schema.json": _schema(
            EVENT_ADAPTER,
            "event.schema.json",
            "turnstream log event (<prefix>.log.<sessionId>.<type>)",
        ),
        "live-token.schema.json": _schema(
            LIVE_TOKEN_ADAPTER,
            "live-token.schema.json",
            "turnstream live token delta (<prefix>.live.<sessionId>.<turnId>, not stored)",
        ),
    }
    options = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE
    return {name: orjson.dumps(schema, option=options) for name, schema in files.items()}
