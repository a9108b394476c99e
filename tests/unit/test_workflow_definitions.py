"""Workflow definitions: the loader's checks (every problem at once) and the narrow template."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnstream.core.workflow.definition import WorkflowDef
from turnstream.core.workflow.template import TemplateError, check, render
from turnstream.workflows.loader import WorkflowInvalid, attachable, load

LIVE = ["read_file", "grep", "write_file"]
EXAMPLE = Path(__file__).resolve().parents[2] / "workflows" / "review-and-implement"

GOOD = {
    "id": "plan",
    "name": "Plan",
    "allowedTools": "[read_file]",
    "completionTool": "submit_plan",
    "completionSchema": "{type: object, required: [summary]}",
    "retryPolicy": "{maxAttempts: 2, backoff: none}",
    "turnCap": "5",
    "resolutionPolicy": "retry-later",
}


def stage_file(folder: Path, stage_id: str, body: str = "Task: {{ctx.task}}", **fields: str):
    values = {**GOOD, "id": stage_id, **fields}
    head = "".join(f"{k}: {v}\n" for k, v in values.items() if v != "DROP")
    (folder / f"{stage_id}.md").write_text(f"---\n{head}---\n{body}\n")


def workflow(tmp_path: Path, steps: str = "[plan]", extra: str = "") -> Path:
    folder = tmp_path / "wf"
    folder.mkdir(exist_ok=True)
    (folder / "workflow.yaml").write_text(f"name: wf\nsteps: {steps}\n{extra}")
    return folder


def problems(folder: Path) -> list[str]:
    with pytest.raises(WorkflowInvalid) as caught:
        load(folder, LIVE)
    return [f"{p.file}|{p.field}|{p.code}|{p.message}" for p in caught.value.problems]


def test_the_example_workflow_loads_and_round_trips_through_its_event_form() -> None:
    definition = load(EXAMPLE, [*LIVE, "list_dir"])
    assert definition.steps[1].stages == ("review-risks", "review-tests")
    assert definition.steps[1].join == "summarize"
    assert definition.on_fail == {"implement": "recover"}
    assert WorkflowDef.from_dict(definition.to_dict()) == definition


def test_unknown_keys_and_optional_fields_load(tmp_path: Path) -> None:
    folder = workflow(tmp_path)
    stage_file(
        folder,
        "plan",
        description="plans",
        tags="[a, b]",
        inputsSchema="{type: object}",
        ownerTeam="platform",
    )
    stage = load(folder, LIVE).stages["plan"]
    assert stage.tags == ("a", "b") and stage.inputs_schema == {"type": "object"}


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"turnCap": "DROP"}, "plan.md|turnCap|Validation|required field missing"),
        ({"name": "DROP"}, "plan.md|name|Validation|required field missing"),
        ({"resolutionPolicy": "DROP"}, "plan.md|resolutionPolicy|Validation|required"),
        ({"turnCap": "0"}, "plan.md|turnCap|Validation|0 must be an integer ≥ 1"),
        ({"turnCap": "many"}, "plan.md|turnCap|Validation|'many' must be an integer"),
        ({"allowedTools": "read_file"}, "plan.md|allowedTools|Validation|must be a list"),
        ({"allowedTools": "[rm_rf]"}, "plan.md|allowedTools|Validation|'rm_rf' is not a live"),
        ({"completionTool": "grep"}, "plan.md|completionTool|Validation|'grep' collides"),
        ({"completionSchema": "{type: objekt}"}, "plan.md|completionSchema|Validation|invalid"),
        ({"completionSchema": "null"}, "plan.md|completionSchema|Validation|must be a JSON"),
        ({"completionSchema": "{type: array}"}, "plan.md|completionSchema|Validation|type is"),
        ({"inputsSchema": "{minItems: -1}"}, "plan.md|inputsSchema|Validation|invalid"),
        ({"retryPolicy": "{maxAttempts: 0}"}, "plan.md|retryPolicy.maxAttempts|Validation|"),
        ({"retryPolicy": "{maxAttempts: 1, backoff: soon}"}, "plan.md|retryPolicy.backoff|"),
        ({"resolutionPolicy": "maybe"}, "plan.md|resolutionPolicy|Validation|'maybe'"),
        ({"id": "Plan"}, "plan.md|id|Validation|'Plan' must equal the file name"),
    ],
)
def test_each_frontmatter_problem_names_file_field_and_fix(
    tmp_path: Path, fields: dict[str, str], expected: str
) -> None:
    folder = workflow(tmp_path)
    stage_file(folder, "plan", **fields)
    found = problems(folder)
    assert any(p.startswith(expected) for p in found), found


def test_a_join_naming_one_of_its_own_siblings_is_dangling(tmp_path: Path) -> None:
    folder = workflow(tmp_path, "\n  - parallel: [a, b]\n    join: a")
    for name in ("a", "b"):
        stage_file(folder, name)
    assert any("StageJoinDangling" in p for p in problems(folder))


def test_a_join_without_a_stage_file_is_dangling(tmp_path: Path) -> None:
    folder = workflow(tmp_path, "\n  - parallel: [a, b]\n    join: merge")
    for name in ("a", "b"):
        stage_file(folder, name)
    [problem] = problems(folder)
    assert "|StageJoinDangling|stage 'merge' has no file merge.md" in problem


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    folder = workflow(tmp_path, "[plan, build]", "onFail: {plan: build}\n")
    stage_file(folder, "plan", turnCap="0", completionTool="grep", body="{{env.HOME}}")
    found = problems(folder)
    assert len(found) == 5, found  # turnCap, completionTool, body, build.md, onFail


def test_bad_workflow_yaml_and_a_body_without_frontmatter(tmp_path: Path) -> None:
    folder = workflow(tmp_path, "[plan")
    assert "not valid YAML" in problems(folder)[0]
    folder = workflow(tmp_path, "[plan]")
    (folder / "plan.md").write_text("just text\n")
    assert "no YAML frontmatter" in problems(folder)[0]


def test_attach_needs_strict_tool_calling(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="toolCalling: hard"):
        attachable(tmp_path, "wf", LIVE, "soft")
    with pytest.raises(FileNotFoundError, match="no workflow 'wf'"):
        attachable(tmp_path, "wf", LIVE, "hard")


@pytest.mark.parametrize("name", ["../elsewhere", "/tmp/evil", "a/b", ""])
def test_attach_takes_a_workflow_name_never_a_path(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="not a path"):
        attachable(tmp_path / "flows", name, LIVE, "hard")


CTX = {
    "task": "fix it",
    "files": ["a.py"],
    "upstream": [{"stage": "plan", "verdict": "ok", "output": {"summary": "S"}}],
    "workflowRunId": "run1",
    "stageExecutionId": "ex1",
}
STAGE = {"id": "build", "name": "Build"}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("{{ctx.task}}", "fix it"),
        ("{{ ctx.task }}", "fix it"),
        ("{{ctx.files}}", '["a.py"]'),
        ("{{ctx.upstream[0].output.summary}}", "S"),
        ("{{ctx.upstream[0].verdict}}", "ok"),
        ("{{ctx.workflowRunId}}/{{ctx.stageExecutionId}}", "run1/ex1"),
        ("{{stage.id}}: {{stage.name}}", "build: Build"),
    ],
)
def test_each_allowed_placeholder_renders(body: str, expected: str) -> None:
    assert check(body) == []
    assert render(body, CTX, STAGE) == expected


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{{env.HOME}}", "never reach the prompt"),
        ("{{ctx.attempts.count}}", "not template-addressable"),
        ("{{ctx.host.cwd}}", "not template-addressable"),
        ("{{ctx.task | upper}}", "no expressions, filters or conditionals"),
        ("{{ctx.task if ctx.files}}", "no expressions"),
        ("{% for f in ctx.files %}x{% endfor %}", "template blocks are not supported"),
        ("{{stage.allowedTools}}", "only {{stage.id}} and {{stage.name}}"),
        ("{{ctx.upstream.output}}", "index upstream"),
        ("{{settings.model}}", "only {{ctx.<field>}}"),
    ],
)
def test_each_forbidden_placeholder_is_an_error(body: str, message: str) -> None:
    errors = check(body)
    assert errors and all(message in error for error in errors), errors
    with pytest.raises(TemplateError):
        render(body, CTX, STAGE)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{{ctx.missing}}", "ctx has no field 'missing'"),
        ("{{ctx.upstream[1].output}}", "has no element [1]"),
        ("{{ctx.upstream[0].output.steps}}", "has no field 'steps'"),
    ],
)
def test_a_placeholder_the_context_lacks_is_an_error_not_empty(body: str, message: str) -> None:
    assert check(body) == []  # well-formed: only rendering knows
    with pytest.raises(TemplateError, match=message.replace("[", r"\[").replace("]", r"\]")):
        render(body, CTX, STAGE)


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("docs__search", "'docs__search' collides with a registered tool (MCP server 'docs')"),
        ("docs__submit", "'docs__submit' is in MCP server 'docs''s namespace (docs__*)"),
        ("grep", "'grep' collides with a registered tool"),
    ],
)
def test_a_completion_tool_may_not_take_an_mcp_name_or_namespace(
    tmp_path: Path, completion: str, expected: str
) -> None:
    folder = workflow(tmp_path)
    stage_file(folder, "plan", completionTool=completion)
    with pytest.raises(WorkflowInvalid) as caught:
        load(folder, [*LIVE, "docs__search"], mcp_servers=["docs"])
    (problem,) = caught.value.problems
    assert (problem.file, problem.field) == ("plan.md", "completionTool")
    assert problem.message.startswith(expected), problem.message
    assert "submit_<stage>" in problem.fix
    # another server's namespace, or a name that merely contains the separator, is free
    stage_file(folder, "plan", completionTool="submit__docs")
    assert load(folder, LIVE, mcp_servers=["docs"]).stages["plan"].completion_tool == "submit__docs"


@pytest.mark.parametrize("name", ["spawn", "send_message"])
def test_the_runtimes_own_tool_names_are_reserved(tmp_path: Path, name: str) -> None:
    folder = workflow(tmp_path)
    stage_file(folder, "plan", completionTool=name)
    with pytest.raises(WorkflowInvalid) as caught:
        load(folder, LIVE)  # not registered: the runtime offers them itself
    assert f"{name!r} is reserved" in caught.value.problems[0].message
