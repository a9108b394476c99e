"""Load a workflow folder (`workflow.yaml` + one markdown file per stage) and check it all.

Every problem is reported at once, each with its file, field and fix, so an author fixes a
definition in one pass (`turnstream workflow validate DIR`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, cast

import jsonschema

from turnstream.core.toolnames import completion_tool_clash
from turnstream.core.workflow.definition import (
    RESOLUTION_POLICIES,
    ResolutionPolicy,
    RetryPolicy,
    StageDef,
    Step,
    WorkflowDef,
)
from turnstream.core.workflow.template import check as check_template
from turnstream.workflows.files import Problem, read_budget, read_frontmatter, read_yaml

KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
REQUIRED = (
    "id",
    "name",
    "allowedTools",
    "completionTool",
    "completionSchema",
    "retryPolicy",
    "turnCap",
    "resolutionPolicy",
)


class WorkflowInvalid(ValueError):
    def __init__(self, folder: Path, problems: list[Problem]) -> None:
        self.folder = folder
        self.problems = problems
        self.errors = [str(p) for p in problems]
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"workflow {folder} has {len(problems)} problem(s):\n{lines}")


WORKFLOW_NAME = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


def find(workflows_dir: Path, name: str) -> Path:
    """The folder of workflow `name` in the workflows directory (a name, never a path:
    a sender must not make the gateway load a folder from elsewhere)."""
    if not WORKFLOW_NAME.match(name):
        raise ValueError(
            f"workflow name {name!r} must be a folder name in TURNSTREAM_WORKFLOWS "
            "(letters, digits, '-', '_'), not a path"
        )
    folder = workflows_dir / name
    if not (folder / "workflow.yaml").exists():
        known = sorted(p.parent.name for p in workflows_dir.glob("*/workflow.yaml"))
        raise FileNotFoundError(
            f"no workflow {name!r} in {workflows_dir} (TURNSTREAM_WORKFLOWS); "
            f"known: {', '.join(known) or 'none'}"
        )
    return folder


def load(folder: Path, live_tools: Iterable[str], mcp_servers: Iterable[str] = ()) -> WorkflowDef:
    """The definition in `folder`, or `WorkflowInvalid` listing every problem. `live_tools`
    are the registered tools' names; `mcp_servers` the configured MCP servers' names (their
    `<server>__*` namespaces are taken whatever tools they list now)."""
    problems: list[Problem] = []
    live, servers = set(live_tools), tuple(mcp_servers)
    spec_file = folder / "workflow.yaml"
    raw = read_yaml(spec_file, spec_file.read_text() if spec_file.exists() else None, problems)
    if raw is None:
        raise WorkflowInvalid(folder, problems)
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        problems.append(Problem(spec_file.name, "name", "missing", "add `name: <workflow>`"))
    steps = _steps(spec_file.name, raw.get("steps"), problems)
    wanted = [s for step in steps for s in (*step.stages, *([step.join] if step.join else []))]
    on_fail = _on_fail(spec_file.name, raw.get("onFail"), set(wanted), problems)
    stages: dict[str, StageDef] = {}
    for stage_id in dict.fromkeys([*wanted, *on_fail.values()]):
        path = folder / f"{stage_id}.md"
        if not path.exists():
            problems.append(
                Problem(
                    spec_file.name,
                    "steps",
                    f"stage {stage_id!r} has no file {path.name}",
                    f"create {path.name} or fix the name",
                    "StageJoinDangling" if any(s.join == stage_id for s in steps) else "Validation",
                )
            )
            continue
        stage = _stage(path, live, servers, problems)
        if stage is not None:
            stages[stage_id] = stage
    if problems:
        raise WorkflowInvalid(folder, problems)
    assert isinstance(name, str)
    return WorkflowDef(name, tuple(steps), stages, on_fail)


def _steps(file: str, raw: Any, problems: list[Problem]) -> list[Step]:
    if not isinstance(raw, list) or not raw:
        problems.append(Problem(file, "steps", "missing or empty", "list the stage ids in order"))
        return []
    steps: list[Step] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        where = f"steps[{i}]"
        if isinstance(item, str):
            step = Step((item,))
        elif isinstance(item, dict) and isinstance(item.get("parallel"), list):
            group = item["parallel"]
            join = item.get("join")
            if len(group) < 2 or not all(isinstance(s, str) for s in group):
                problems.append(
                    Problem(file, where, "a parallel group needs two or more stage ids", "")
                )
                continue
            if join is not None and (not isinstance(join, str) or join in group):
                problems.append(
                    Problem(
                        file,
                        f"{where}.join",
                        f"join {join!r} must be one stage outside the siblings {group}",
                        "name the stage that runs after every sibling succeeded",
                        "StageJoinDangling",
                    )
                )
                join = None
            step = Step(tuple(group), join)
        else:
            problems.append(Problem(file, where, f"not a stage id or parallel group: {item!r}", ""))
            continue
        for stage_id in (*step.stages, *([step.join] if step.join else [])):
            if not KEBAB.match(stage_id):
                problems.append(
                    Problem(file, where, f"stage id {stage_id!r} is not kebab-case", "rename it")
                )
            if stage_id in seen:
                problems.append(
                    Problem(
                        file,
                        where,
                        f"stage {stage_id!r} appears twice",
                        "a stage runs once per workflow; copy it under another id",
                        "StageJoinDangling" if stage_id == step.join else "Validation",
                    )
                )
            seen.add(stage_id)
        steps.append(step)
    return steps


def _on_fail(file: str, raw: Any, in_steps: set[str], problems: list[Problem]) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        problems.append(Problem(file, "onFail", "must map a stage to its recover stage", ""))
        return {}
    out: dict[str, str] = {}
    for failed, recover in raw.items():
        if failed not in in_steps:
            problems.append(
                Problem(file, f"onFail.{failed}", "not a stage of `steps`", "fix the stage id")
            )
        elif not isinstance(recover, str) or not KEBAB.match(recover) or recover in in_steps:
            problems.append(
                Problem(
                    file,
                    f"onFail.{failed}",
                    f"recover stage {recover!r} must be a kebab-case id outside `steps`",
                    "add a stage file used only as the recover branch",
                )
            )
        else:
            out[str(failed)] = recover
    return out


def _stage(
    path: Path, live: set[str], mcp_servers: tuple[str, ...], problems: list[Problem]
) -> StageDef | None:
    found = read_frontmatter(path, problems)
    if found is None:
        return None
    raw, body = found
    before = len(problems)

    def bad(field: str, message: str, fix: str) -> None:
        problems.append(Problem(path.name, field, message, fix))

    for key in REQUIRED:
        if key not in raw:
            bad(key, "required field missing", f"add `{key}:` to the frontmatter")
    stage_id = raw.get("id")
    if "id" in raw and (not isinstance(stage_id, str) or stage_id != path.stem):
        bad("id", f"{stage_id!r} must equal the file name {path.stem!r}", "rename one of them")
    if "name" in raw and not (isinstance(raw["name"], str) and raw["name"]):
        bad("name", "must be a non-empty string", "give the stage a label")
    tools = _allowed_tools(raw, live, bad)
    completion = raw.get("completionTool")
    if "completionTool" in raw:
        if not isinstance(completion, str) or not TOOL_NAME.match(completion):
            bad("completionTool", f"{completion!r} is not a tool name", "e.g. submit_plan")
        elif clash := completion_tool_clash(completion, live, mcp_servers):
            bad("completionTool", clash, "pick a name no tool has, e.g. submit_<stage>")
    _check_schemas(raw, bad)
    retry = _retry(raw.get("retryPolicy"), bad) if "retryPolicy" in raw else None
    cap = raw.get("turnCap")
    if "turnCap" in raw and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
        bad("turnCap", f"{cap!r} must be an integer ≥ 1", "e.g. turnCap: 10")
    policy = raw.get("resolutionPolicy")
    if "resolutionPolicy" in raw and policy not in RESOLUTION_POLICIES:
        bad("resolutionPolicy", f"{policy!r} is not one of {RESOLUTION_POLICIES}", "pick one")
    limits = read_budget(raw.get("budget"), bad)
    budget = limits.model_dump(exclude_none=True) if limits is not None else None
    tags = raw.get("tags", [])
    if not isinstance(tags, list):
        bad("tags", "must be a list of strings", "e.g. tags: [review]")
    for error in check_template(body):
        bad("body", error, "use only the allowed placeholders")
    if len(problems) > before or retry is None:
        return None
    return StageDef(
        id=str(stage_id),
        name=str(raw["name"]),
        allowed_tools=tuple(tools or ()),
        completion_tool=str(completion),
        completion_schema=raw["completionSchema"],
        retry_policy=retry,
        turn_cap=cast(int, cap),  # checked above: an int >= 1
        resolution_policy=cast(ResolutionPolicy, policy),  # checked above
        body=body,
        description=raw.get("description"),
        inputs_schema=raw.get("inputsSchema"),
        tags=tuple(str(t) for t in tags),
        file=path.name,
        budget=budget,
    )


Bad = Callable[[str, str, str], None]
"""Notes a problem of a stage file's field: (field, message, fix)."""


def _allowed_tools(raw: dict[str, Any], live: set[str], bad: Bad) -> Any:
    """The stage's `allowedTools` as written (none when it is not a list of names)."""
    tools = raw.get("allowedTools")
    if "allowedTools" in raw:
        if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
            bad("allowedTools", "must be a list of tool names", "e.g. [read_file, grep]")
            tools = []
        for tool in tools:
            if tool not in live:
                bad(
                    "allowedTools",
                    f"{tool!r} is not a live tool (known: {', '.join(sorted(live)) or 'none'})",
                    "fix the name or install the package that provides it",
                )
    return tools


def _check_schemas(raw: dict[str, Any], bad: Bad) -> None:
    for key in ("completionSchema", "inputsSchema"):
        schema = raw.get(key)
        if key not in raw or (schema is None and key == "inputsSchema"):
            continue
        if not isinstance(schema, dict):
            bad(key, "must be a JSON Schema object", "e.g. {type: object, required: [summary]}")
            continue
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            bad(key, f"invalid JSON Schema: {exc.message}", "fix the schema")
            continue
        if key == "completionSchema" and schema.get("type") != "object":
            bad(
                key,
                f"type is {schema.get('type')!r}: tool arguments are always an object",
                "use type: object with the result's fields as properties",
            )


def _retry(raw: Any, bad: Any) -> RetryPolicy | None:
    if not isinstance(raw, dict):
        bad("retryPolicy", "must be {maxAttempts, backoff}", "e.g. {maxAttempts: 2, backoff: none}")
        return None
    attempts = raw.get("maxAttempts")
    if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 1:
        bad("retryPolicy.maxAttempts", f"{attempts!r} must be an integer ≥ 1", "e.g. 2")
        return None
    backoff = raw.get("backoff", "none")
    if backoff in ("none", None, 0):
        return RetryPolicy(attempts)
    if isinstance(backoff, int | float) and not isinstance(backoff, bool) and backoff > 0:
        return RetryPolicy(attempts, float(backoff))
    if isinstance(backoff, str):
        kind, _, seconds = backoff.partition(":")
        try:
            value = float(seconds.removesuffix("s")) if seconds else 1.0
        except ValueError:
            value = -1.0
        if kind in ("fixed", "exponential") and value > 0:
            return RetryPolicy(attempts, value, kind == "exponential")
    bad(
        "retryPolicy.backoff",
        f"{backoff!r} is not a backoff",
        "use none, a number of seconds, fixed:<s> or exponential:<s>",
    )
    return None


def attachable(
    workflows_dir: Path,
    name: str,
    live_tools: Iterable[str],
    tool_calling: str,
    mcp_servers: Iterable[str] = (),
) -> WorkflowDef:
    """The definition to attach, after the capability check (`toolCalling: hard`)."""
    if tool_calling != "hard":
        raise ValueError(
            f"workflows need a provider with strict tool calling (toolCalling: hard); this "
            f"session's provider is configured with toolCalling: {tool_calling}. Use the "
            "scripted, anthropic or openai provider with tool_calling: hard"
        )
    return load(find(workflows_dir, name), live_tools, mcp_servers)
