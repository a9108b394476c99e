from __future__ import annotations

import pickle
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from turnstream.tools import (
    ToolContext,
    ToolError,
    ToolLoadError,
    ToolRegistry,
    ToolSpec,
    builtin_tools,
)
from turnstream.tools import registry as registry_module
from turnstream.tools.builtin import MAX_READ_BYTES
from turnstream.tools.workspace import resolve_in_workspace

BUILTIN_NAMES = ["grep", "list_dir", "read_attachment", "read_file", "write_file"]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace.resolve()


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the workspace holding a secret the tools must never reach."""
    directory = tmp_path / "outside"
    directory.mkdir()
    (directory / "secret.txt").write_text("TOP SECRET\n")
    return directory.resolve()


async def call(ws: Path, name: str, **args: Any) -> str:
    registry = ToolRegistry(builtin_tools())
    assert registry.validate_args(name, args) == []
    tool = registry.get(name)
    assert tool is not None
    return await tool.run(args, ToolContext(workspace=ws, session_id="s", invocation_id="i"))


async def fails(ws: Path, name: str, **args: Any) -> ToolError:
    with pytest.raises(ToolError) as info:
        await call(ws, name, **args)
    return info.value


def names_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# --- contract ---------------------------------------------------------------------------------


def test_tool_spec_rejects_names_providers_would_refuse() -> None:
    for bad in ("", "has space", "dot.name", "x" * 65):
        with pytest.raises(ValueError, match="must match"):
            ToolSpec(name=bad, description="", parameters={}, read_only=True, idempotent=True)
    ToolSpec(name="ok-name_1", description="", parameters={}, read_only=True, idempotent=True)


def test_tool_error_keeps_kind_and_detail_and_pickles() -> None:
    err = ToolError("not_found", "'x' does not exist")
    assert (err.kind, err.detail) == ("not_found", "'x' does not exist")
    assert str(err) == "not_found: 'x' does not exist"
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.kind, copy.detail) == (err.kind, err.detail)


def test_builtin_specs_are_strict_schemas() -> None:
    specs = {s.name: s for s in ToolRegistry(builtin_tools()).specs()}
    assert list(specs) == BUILTIN_NAMES
    for spec in specs.values():
        assert spec.parameters["type"] == "object"
        assert spec.parameters["additionalProperties"] is False
    assert specs["read_file"].parameters["required"] == ["path"]
    assert specs["write_file"].parameters["required"] == ["path", "content"]
    assert specs["grep"].parameters["required"] == ["pattern"]
    assert [s.name for s in specs.values() if not s.read_only] == ["write_file"]
    assert [s.name for s in specs.values() if not s.idempotent] == ["write_file"]


# --- read_file --------------------------------------------------------------------------------


async def test_read_file_returns_text_and_line_ranges(ws: Path) -> None:
    (ws / "a.txt").write_text("zero\none\ntwo\nthree\n")
    assert await call(ws, "read_file", path="a.txt") == "zero\none\ntwo\nthree\n"
    assert await call(ws, "read_file", path="a.txt", offset=1, limit=2) == "one\ntwo\n"
    assert await call(ws, "read_file", path="a.txt", offset=3) == "three\n"
    assert await call(ws, "read_file", path="a.txt", offset=9, limit=1) == ""


async def test_read_file_accepts_integral_floats_that_json_schema_calls_integers(ws: Path) -> None:
    (ws / "a.txt").write_text("zero\none\ntwo\n")
    assert await call(ws, "read_file", path="a.txt", offset=1.0, limit=1.0) == "one\n"


async def test_read_file_replaces_invalid_utf8(ws: Path) -> None:
    (ws / "b.bin").write_bytes(b"ok \xff\xfe end")
    assert await call(ws, "read_file", path="b.bin") == "ok \ufffd\ufffd end"


async def test_read_file_refuses_large_files_unless_limited(ws: Path) -> None:
    big = ws / "big.txt"
    big.write_bytes(b"line\n" * (MAX_READ_BYTES // 5 + 1))
    err = await fails(ws, "read_file", path="big.txt")
    assert err.kind == "too_large" and "limit" in err.detail
    assert await call(ws, "read_file", path="big.txt", offset=10, limit=2) == "line\nline\n"


async def test_read_file_refuses_an_enormous_single_line_even_with_limit(ws: Path) -> None:
    (ws / "min.js").write_bytes(b"x" * (MAX_READ_BYTES + 10))
    err = await fails(ws, "read_file", path="min.js", limit=1)
    assert err.kind == "too_large" and "smaller limit" in err.detail


async def test_read_file_missing_and_directory(ws: Path) -> None:
    (ws / "d").mkdir()
    assert (await fails(ws, "read_file", path="nope.txt")).kind == "not_found"
    assert (await fails(ws, "read_file", path="d")).kind == "not_a_file"


# --- list_dir ---------------------------------------------------------------------------------


async def test_list_dir_sorts_and_marks_directories(ws: Path) -> None:
    (ws / "b.txt").write_text("")
    (ws / "a").mkdir()
    (ws / "a" / "inner.txt").write_text("")
    (ws / "C.md").write_text("")
    assert await call(ws, "list_dir") == "C.md\na/\nb.txt"
    assert await call(ws, "list_dir", path="a") == "inner.txt"


async def test_list_dir_says_when_a_directory_is_empty(ws: Path) -> None:
    (ws / "nothing").mkdir()
    assert await call(ws, "list_dir", path="nothing") == "(empty directory)"


async def test_list_dir_errors(ws: Path) -> None:
    (ws / "f.txt").write_text("")
    assert (await fails(ws, "list_dir", path="f.txt")).kind == "not_a_directory"
    assert (await fails(ws, "list_dir", path="missing")).kind == "not_found"


# --- grep -------------------------------------------------------------------------------------


async def test_grep_prints_relpath_lineno_line_and_filters_by_glob(ws: Path) -> None:
    (ws / "src").mkdir()
    (ws / "src" / "m.py").write_text("import os\ndef main():\n    return os.sep\n")
    (ws / "notes.txt").write_text("os is here too\n")
    assert await call(ws, "grep", pattern=r"\bos\b", glob="*.py") == (
        "src/m.py:1:import os\nsrc/m.py:3:    return os.sep"
    )
    everywhere = await call(ws, "grep", pattern=r"\bos\b")
    assert everywhere.splitlines()[0] == "notes.txt:1:os is here too"
    assert await call(ws, "grep", pattern="main", path="src/m.py") == "src/m.py:2:def main():"


async def test_grep_skips_vcs_venv_node_modules_and_binary_files(ws: Path) -> None:
    for skipped in (".git", ".venv", "node_modules"):
        (ws / skipped).mkdir()
        (ws / skipped / "x.txt").write_text("needle\n")
    (ws / "blob.bin").write_bytes(b"needle\0\n")
    (ws / "keep.txt").write_text("needle\n")
    assert await call(ws, "grep", pattern="needle") == "keep.txt:1:needle"
    # An explicit path into a skipped directory is still searched.
    assert await call(ws, "grep", pattern="needle", path=".git") == ".git/x.txt:1:needle"


async def test_grep_says_when_max_matches_was_hit(ws: Path) -> None:
    (ws / "many.txt").write_text("hit\n" * 5)
    capped = (await call(ws, "grep", pattern="hit", max_matches=3)).splitlines()
    assert capped[:3] == ["many.txt:1:hit", "many.txt:2:hit", "many.txt:3:hit"]
    assert len(capped) == 4 and "max_matches=3" in capped[3]
    exact = await call(ws, "grep", pattern="hit", max_matches=5)
    assert "max_matches" not in exact and len(exact.splitlines()) == 5


async def test_grep_no_matches_and_bad_regex(ws: Path) -> None:
    (ws / "a.txt").write_text("abc\n")
    assert "no matches" in await call(ws, "grep", pattern="zzz")
    err = await fails(ws, "grep", pattern="(unclosed")
    assert err.kind == "invalid_arguments" and "(unclosed" in err.detail


async def test_grep_never_follows_symlinks_out_of_the_workspace(ws: Path, outside: Path) -> None:
    (ws / "linkdir").symlink_to(outside, target_is_directory=True)
    (ws / "linkfile").symlink_to(outside / "secret.txt")
    (ws / "loop").symlink_to(ws, target_is_directory=True)
    (ws / "plain.txt").write_text("SECRET is a word\n")
    # Reached only by walking outside the workspace and back in through another link.
    (outside / "back.txt").symlink_to(ws / "plain.txt")
    assert await call(ws, "grep", pattern="SECRET") == "plain.txt:1:SECRET is a word"
    assert (await fails(ws, "grep", pattern="SECRET", path="linkdir")).kind == "path_escape"


# --- write_file -------------------------------------------------------------------------------


async def test_write_file_creates_parents_overwrites_and_appends(ws: Path) -> None:
    assert await call(ws, "write_file", path="new/dir/f.txt", content="héllo") == (
        "wrote 6 bytes to new/dir/f.txt"
    )
    assert (ws / "new/dir/f.txt").read_text(encoding="utf-8") == "héllo"
    await call(ws, "write_file", path="new/dir/f.txt", content="a\n")
    await call(ws, "write_file", path="new/dir/f.txt", content="b\n", append=True)
    assert (ws / "new/dir/f.txt").read_text() == "a\nb\n"


async def test_write_file_errors(ws: Path) -> None:
    (ws / "d").mkdir()
    (ws / "file").write_text("")
    assert (await fails(ws, "write_file", path="d", content="x")).kind == "not_a_file"
    assert (await fails(ws, "write_file", path="file/x", content="x")).kind == "not_a_directory"
    bad_text = await fails(ws, "write_file", path="s.txt", content="\ud800")
    assert bad_text.kind == "invalid_arguments" and not (ws / "s.txt").exists()


# --- confinement ------------------------------------------------------------------------------


@pytest.mark.parametrize("user_path", ["../x", "a/../../x", "..", "/etc/passwd"])
def test_resolve_refuses_paths_outside(ws: Path, user_path: str) -> None:
    with pytest.raises(ToolError) as info:
        resolve_in_workspace(ws, user_path)
    assert info.value.kind == "path_escape"
    assert repr(user_path) in info.value.detail
    assert "TURNSTREAM_WORKSPACE" in info.value.detail


def test_resolve_allows_inside_paths_absolute_or_relative(ws: Path) -> None:
    assert resolve_in_workspace(ws, "a/../b.txt") == ws / "b.txt"
    assert resolve_in_workspace(ws, str(ws / "c" / "d.txt")) == ws / "c" / "d.txt"
    assert resolve_in_workspace(ws, ".") == ws


def test_resolve_rejects_nul_bytes_as_invalid_arguments(ws: Path) -> None:
    with pytest.raises(ToolError) as info:
        resolve_in_workspace(ws, "a\0b")
    assert info.value.kind == "invalid_arguments"


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("read_file", {"path": "../outside/secret.txt"}),
        ("read_file", {"path": "/etc/passwd"}),
        ("list_dir", {"path": ".."}),
        ("grep", {"pattern": "SECRET", "path": "../outside"}),
        ("write_file", {"path": "../outside/new.txt", "content": "x"}),
    ],
)
async def test_every_tool_refuses_escapes(
    ws: Path, outside: Path, name: str, args: dict[str, Any]
) -> None:
    assert (await fails(ws, name, **args)).kind == "path_escape"
    assert names_in(outside) == ["secret.txt"]


async def test_symlink_inside_pointing_outside_is_refused_for_read(ws: Path, outside: Path) -> None:
    (ws / "innocent.txt").symlink_to(outside / "secret.txt")
    (ws / "sub").symlink_to(outside, target_is_directory=True)
    assert (await fails(ws, "read_file", path="innocent.txt")).kind == "path_escape"
    assert (await fails(ws, "read_file", path="sub/secret.txt")).kind == "path_escape"
    assert (await fails(ws, "list_dir", path="sub")).kind == "path_escape"


async def test_symlinked_dir_pointing_outside_is_refused_for_new_file_write(
    ws: Path, outside: Path
) -> None:
    (ws / "sub").symlink_to(outside, target_is_directory=True)
    err = await fails(ws, "write_file", path="sub/deeper/new.txt", content="pwned")
    assert err.kind == "path_escape"
    assert names_in(outside) == ["secret.txt"]


async def test_dangling_symlink_pointing_outside_is_refused_for_write(
    ws: Path, outside: Path
) -> None:
    (ws / "trap.txt").symlink_to(outside / "created.txt")
    assert (await fails(ws, "write_file", path="trap.txt", content="x")).kind == "path_escape"
    assert not (outside / "created.txt").exists()


async def test_symlink_staying_inside_is_followed(ws: Path) -> None:
    (ws / "real.txt").write_text("inside\n")
    (ws / "alias.txt").symlink_to(ws / "real.txt")
    assert await call(ws, "read_file", path="alias.txt") == "inside\n"


# --- registry ---------------------------------------------------------------------------------


class EchoTool:
    spec = ToolSpec(
        name="echo",
        description="Echo the text.",
        parameters={
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
            "additionalProperties": False,
        },
        read_only=True,
        idempotent=True,
    )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        return str(args["text"])


class ReadFileImpostor(EchoTool):
    spec = ToolSpec(
        name="read_file",
        description="",
        parameters={"type": "object"},
        read_only=True,
        idempotent=True,
    )


class NamedTool(EchoTool):
    def __init__(self, name: str) -> None:
        self.spec = ToolSpec(
            name=name,
            description="",
            parameters={"type": "object"},
            read_only=True,
            idempotent=True,
        )


ECHO = EchoTool()
NOT_A_TOOL = 42


def make_tools() -> list[NamedTool]:
    return [NamedTool("from_factory_a"), NamedTool("from_factory_b")]


def makes_junk() -> list[object]:
    return [NamedTool("fine"), "not a tool"]


def needs_an_argument(name: str) -> list[NamedTool]:
    return [NamedTool(name)]


def test_registry_lookup_names_and_sorted_specs() -> None:
    registry = ToolRegistry([NamedTool("zeta"), ECHO, NamedTool("alpha")])
    assert registry.names() == ["alpha", "echo", "zeta"]
    assert [s.name for s in registry.specs()] == ["alpha", "echo", "zeta"]
    assert registry.get("echo") is ECHO
    assert registry.get("missing") is None


def test_duplicate_names_are_refused_naming_both_tools() -> None:
    with pytest.raises(ValueError, match="duplicate tool name 'read_file'") as info:
        ToolRegistry([*builtin_tools(), ReadFileImpostor()])
    assert "builtin.ReadFile" in str(info.value)
    assert "ReadFileImpostor" in str(info.value)


def test_registry_refuses_non_tools_and_bad_schemas() -> None:
    with pytest.raises(TypeError, match="not a Tool"):
        ToolRegistry([object()])  # type: ignore[list-item]
    bad = NamedTool("bad")
    bad.spec = ToolSpec("bad", "", {"type": "array"}, read_only=True, idempotent=True)
    with pytest.raises(TypeError, match="type 'object'"):
        ToolRegistry([bad])
    bad.spec = ToolSpec("bad", "", {"type": "object", "minProperties": "x"}, True, True)
    with pytest.raises(TypeError, match="not valid JSON Schema"):
        ToolRegistry([bad])


def test_validate_args_reports_readable_errors() -> None:
    registry = ToolRegistry([*builtin_tools(), ECHO])
    assert registry.validate_args("read_file", {"path": "a", "offset": 0, "limit": 10}) == []
    assert registry.validate_args("read_file", {"path": 5}) == ["path: 5 is not of type 'string'"]
    assert registry.validate_args("write_file", {"path": "a"}) == [
        "'content' is a required property"
    ]
    assert registry.validate_args("list_dir", {"path": ".", "recursive": True}) == [
        "Additional properties are not allowed ('recursive' was unexpected)"
    ]
    assert registry.validate_args("read_file", {"path": "a", "limit": 0, "offset": True}) == [
        "limit: 0 is less than the minimum of 1",
        "offset: True is not of type 'integer'",
    ]
    assert registry.validate_args("grep", ["pattern"]) == ["['pattern'] is not of type 'object'"]
    assert registry.validate_args("rm_rf", {}) == [
        "unknown tool 'rm_rf'; known: echo, grep, list_dir, read_attachment, read_file, write_file"
    ]


def test_validate_args_clips_huge_offending_values() -> None:
    registry = ToolRegistry(builtin_tools())
    [error] = registry.validate_args("read_file", {"path": ["x" * 10_000]})
    assert error.startswith("path: ['xxx") and len(error) <= registry_module.MAX_ERROR_CHARS


def test_validators_are_built_once_per_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[object] = []
    real = registry_module.Draft202012Validator  # type: ignore[attr-defined]

    class Counting:
        check_schema = staticmethod(real.check_schema)

        def __new__(cls, schema: dict[str, Any]) -> Any:
            built.append(schema)
            return real(schema)

    monkeypatch.setattr(registry_module, "Draft202012Validator", Counting)
    registry = ToolRegistry(builtin_tools())
    assert len(built) == len(BUILTIN_NAMES)
    for _ in range(3):
        registry.validate_args("read_file", {"path": 1})
        registry.validate_args("grep", {"pattern": "x"})
    assert len(built) == len(BUILTIN_NAMES)


# --- load -------------------------------------------------------------------------------------


def fake_entry_points(monkeypatch: pytest.MonkeyPatch, group: str, **targets: str) -> list[str]:
    """Make `importlib.metadata.entry_points(group=group)` return `targets`; records queries."""
    asked: list[str] = []

    def entry_points(*, group: str) -> list[metadata.EntryPoint]:
        asked.append(group)
        return [metadata.EntryPoint(name, value, group) for name, value in targets.items()]

    monkeypatch.setattr(metadata, "entry_points", entry_points)
    return asked


def test_load_takes_builtins_entry_points_and_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = fake_entry_points(
        monkeypatch,
        "my.tools",
        instance=f"{__name__}:ECHO",
        klass=f"{__name__}:ReadFileImpostor",
        factory=f"{__name__}:make_tools",
    )
    with pytest.raises(ValueError, match="duplicate tool name 'read_file'"):
        ToolRegistry.load(entry_point_group="my.tools")
    assert asked == ["my.tools"]

    fake_entry_points(
        monkeypatch,
        "turnstream.tools",
        instance=f"{__name__}:ECHO",
        factory=f"{__name__}:make_tools",
    )
    registry = ToolRegistry.load(extra=[NamedTool("extra_one")])
    assert registry.names() == sorted(
        [*BUILTIN_NAMES, "echo", "extra_one", "from_factory_a", "from_factory_b"]
    )
    assert registry.get("echo") is ECHO


def test_load_instantiates_tool_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_entry_points(monkeypatch, "turnstream.tools", klass=f"{__name__}:EchoTool")
    tool = ToolRegistry.load().get("echo")
    assert isinstance(tool, EchoTool) and tool is not ECHO


def test_load_without_entry_points_gives_the_builtins(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_entry_points(monkeypatch, "turnstream.tools")
    assert ToolRegistry.load().names() == BUILTIN_NAMES


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("tests.unit.no_such_module:Tool", "failed to import: ModuleNotFoundError"),
        (f"{__name__}:NoSuchAttribute", "failed to import: AttributeError"),
        (f"{__name__}:NOT_A_TOOL", "did not give Tools"),
        (f"{__name__}:needs_an_argument", "did not give Tools: TypeError"),
        (f"{__name__}:NamedTool", "did not give Tools: TypeError"),
        (f"{__name__}:makes_junk", "'not a tool' is not a Tool"),
    ],
)
def test_broken_entry_point_names_itself_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, target: str, expected: str
) -> None:
    fake_entry_points(monkeypatch, "turnstream.tools", ok=f"{__name__}:ECHO", broken=target)
    with pytest.raises(ToolLoadError) as info:
        ToolRegistry.load()
    message = str(info.value)
    assert "tool entry point 'broken'" in message and repr(target) in message
    assert expected in message
    assert "Fix:" in message and '[project.entry-points."turnstream.tools"]' in message
