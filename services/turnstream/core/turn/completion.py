"""The completion channel of a stage: how one model response is judged (seed 004).

one call, the completion tool, valid payload    → accepted: Act ends
one call, the completion tool, invalid payload  → invalid: the schema error is that
                                                  call's result; Act goes on
the completion tool with siblings, or twice     → batch_rejected: every call gets the
                                                  sole-call rule as its result, none runs
no tool call (plain text)                       → no_call: a steering message
other tools only                                → None: the normal TOOL_CALL gates
"""

from __future__ import annotations

from typing import Any

import jsonschema

from turnstream.core.events import StageCompletionCheckedData
from turnstream.core.turn.state import StageSpec, ToolCall, ToolInfo


def completion_tool(spec: StageSpec) -> ToolInfo:
    """The synthesized completion tool offered to the model (never a registered tool)."""
    return ToolInfo(
        name=spec.completion_tool,
        description=(
            f"Call this, alone, when the stage is done: its arguments are the stage's result "
            f"(JSON Schema enforced). Stage: {spec.stage_id}."
        ),
        parameters=spec.completion_schema,
        read_only=True,
        idempotent=True,
        timeout_s=0,
    )


def steering_text(spec: StageSpec) -> str:
    return f"Call {spec.completion_tool} when you are done."


def schema_errors(schema: dict[str, Any], payload: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema)
    found = sorted(validator.iter_errors(payload), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in found]


def check_response(
    spec: StageSpec, calls: tuple[ToolCall, ...], iteration: int
) -> StageCompletionCheckedData | None:
    """What the channel makes of one response; None when the calls go the normal way."""
    base = {"stage": spec.stage_id, "stage_execution_id": spec.execution_id, "iteration": iteration}
    completions = [c for c in calls if c.name == spec.completion_tool]
    if not calls:
        return StageCompletionCheckedData(**base, outcome="no_call", detail=steering_text(spec))
    if not completions:
        return None
    if len(calls) > 1:
        rule = (
            f"rejected: {spec.completion_tool} must be the sole tool call in its response; "
            "no call of this response was run. Make the other calls first, then call "
            f"{spec.completion_tool} alone."
        )
        return StageCompletionCheckedData(
            **base, outcome="batch_rejected", call_ids=[c.id for c in calls], detail=rule
        )
    call = completions[0]
    errors = schema_errors(spec.completion_schema, call.arguments)
    if errors:
        detail = (
            f"{spec.completion_tool} payload does not match its schema: "
            + "; ".join(errors)
            + ". Call it again with a valid payload."
        )
        return StageCompletionCheckedData(
            **base, outcome="invalid", call_ids=[call.id], detail=detail
        )
    return StageCompletionCheckedData(
        **base,
        outcome="accepted",
        call_ids=[call.id],
        detail="accepted",
        parsed=call.arguments,
    )
