"""JSON Schema exported from the contract models, for gateways in any language.

`turnstream schemas export` writes these to `schemas/`; a test fails when the committed
files differ from a fresh export.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import TypeAdapter

from turnstream.core.commands import COMMAND_ADAPTER
from turnstream.core.events import EVENT_ADAPTER

BASE_ID = "https://turnstream.dev/schemas/"


def _schema(adapter: TypeAdapter[Any], name: str, title: str) -> dict[str, Any]:
    schema = adapter.json_schema(by_alias=True, mode="validation")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": BASE_ID + name,
        "title": title,
        **schema,
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
    }
    options = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE
    return {name: orjson.dumps(schema, option=options) for name, schema in files.items()}
