"""The exported schemas work in strict validators, not only in pydantic.

An outside client (Node.js with ajv, Go, …) validates what it sends and receives against
`schemas/`: plain JSON Schema 2020-12, no `discriminator` extension, each kind picked by
a required `type` const; `format` checked.

ajv's strict mode runs when `node` and ajv are present (nothing is installed by the
test): `npm install --prefix ~/.cache/turnstream/ajv ajv ajv-formats`, or point
`TURNSTREAM_AJV_DIR` at a folder whose `node_modules` holds them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest

from tests.unit.test_contract import ENVELOPE, SAMPLE_DATA
from turnstream.core.commands import COMMAND_ADAPTER
from turnstream.core.events import EVENT_TYPES, decode, encode
from turnstream.core.schemas import LIVE_TOKEN_ADAPTER, exported_schemas

SCHEMAS = {name: orjson.loads(content) for name, content in exported_schemas().items()}
EVENTS = [
    orjson.loads(encode(decode(orjson.dumps({**ENVELOPE, "type": kind, "data": data}))))
    for kind, data in sorted(SAMPLE_DATA.items())
]
COMMANDS = [
    {
        "type": "message",
        "sessionId": "s1",
        "chatId": "c1",
        "sender": {"kind": "human", "id": "u1"},
        "text": "hello",
        "idempotencyKey": "k1",
        "replyTo": None,
    },
    {
        "type": "answer",
        "sessionId": "s1",
        "chatId": "c1",
        "sender": {"kind": "agent", "id": "a"},
        "idempotencyKey": "k2",
        "interactionId": "i1",
        "decision": "approve",
    },
]
LIVE = [{"turnId": "t1", "iteration": 1, "index": 0, "delta": "Hel"}]
BAD_EVENTS = [
    {k: v for k, v in EVENTS[0].items() if k != "type"},  # no type: no kind matches
    {**EVENTS[0], "type": "Nope"},
    {**EVENTS[0], "time": "yesterday"},  # format: date-time
]


def validator(name: str) -> jsonschema.Draft202012Validator:
    schema = SCHEMAS[name]
    jsonschema.Draft202012Validator.check_schema(schema)
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    assert "date-time" in checker.checkers, "install rfc3339-validator (a dev dependency)"
    return jsonschema.Draft202012Validator(schema, format_checker=checker)


def walk(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, list):
        return [d for item in node for d in walk(item)]
    if isinstance(node, dict):
        return [node] + [d for value in node.values() for d in walk(value)]
    return []


def test_no_schema_uses_the_discriminator_extension() -> None:
    for name, schema in SCHEMAS.items():
        assert not [d for d in walk(schema) if "discriminator" in d], name


def test_every_event_kind_requires_its_type_const() -> None:
    schema = SCHEMAS["event.schema.json"]
    kinds = [ref["$ref"].rsplit("/", 1)[-1] for ref in schema["oneOf"]]
    assert sorted(kinds) == sorted(EVENT_TYPES)
    for kind in kinds:
        definition = schema["$defs"][kind]
        assert "type" in definition["required"], kind
        assert definition["properties"]["type"]["const"] == kind


def test_events_commands_and_live_tokens_validate_with_format_checking() -> None:
    for name, samples in (
        ("event.schema.json", EVENTS),
        ("inbound-command.schema.json", COMMANDS),
        ("live-token.schema.json", LIVE),
    ):
        check = validator(name)
        for sample in samples:
            check.validate(sample)
    for command in COMMANDS:
        COMMAND_ADAPTER.validate_python(command)
    LIVE_TOKEN_ADAPTER.validate_python(LIVE[0])


@pytest.mark.parametrize("bad", BAD_EVENTS, ids=["no-type", "unknown-type", "bad-time"])
def test_a_strict_validator_refuses_a_bad_event(bad: dict[str, Any]) -> None:
    assert not validator("event.schema.json").is_valid(bad)


AJV_SCRIPT = r"""
const Ajv2020 = require("ajv/dist/2020");
const addFormats = require("ajv-formats");
const input = JSON.parse(require("fs").readFileSync(0, "utf8"));
const out = {};
for (const [name, {schema, good, bad}] of Object.entries(input)) {
  const ajv = new Ajv2020({strict: true, allErrors: true});
  addFormats(ajv);
  const validate = ajv.compile(schema);
  out[name] = {
    good: good.map((x) => validate(x) || validate.errors),
    bad: bad.map((x) => validate(x)),
  };
}
console.log(JSON.stringify(out));
"""


def ajv_dir() -> Path | None:
    folder = Path(os.environ.get("TURNSTREAM_AJV_DIR", Path.home() / ".cache/turnstream/ajv"))
    modules = folder / "node_modules"
    if shutil.which("node") and (modules / "ajv").is_dir() and (modules / "ajv-formats").is_dir():
        return folder
    return None


@pytest.mark.skipif(ajv_dir() is None, reason="node with ajv + ajv-formats not installed")
def test_ajv_strict_mode_compiles_every_schema_and_agrees() -> None:
    folder = ajv_dir()
    assert folder is not None
    cases = {
        "event.schema.json": {"good": EVENTS, "bad": BAD_EVENTS},
        "inbound-command.schema.json": {
            "good": COMMANDS,
            "bad": [{**COMMANDS[0], "sessionId": "_rejected"}, {**COMMANDS[0], "type": "x"}],
        },
        "live-token.schema.json": {"good": LIVE, "bad": [{"turnId": "t1", "delta": "x"}]},
    }
    payload = {name: {"schema": SCHEMAS[name], **case} for name, case in cases.items()}
    result = subprocess.run(
        ["node", "-e", AJV_SCRIPT],
        input=orjson.dumps(payload),
        capture_output=True,
        cwd=folder,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()  # strict mode throws at compile
    verdicts = orjson.loads(result.stdout)
    for name, verdict in verdicts.items():
        assert verdict["good"] == [True] * len(cases[name]["good"]), (name, verdict["good"])
        assert verdict["bad"] == [False] * len(cases[name]["bad"]), name
