"""The built-in file tools (read_file, list_dir, grep, write_file), confined to the workspace,
and read_attachment (`attachments.py`).

File I/O runs in a worker thread so the executor's asyncio timeout can abandon a slow call.
"""

from __future__ import annotations

import asyncio
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from turnstream.tools.attachments import ReadAttachment
from turnstream.tools.base import Tool, ToolContext, ToolError, ToolSpec
from turnstream.tools.workspace import resolve_in_workspace

MAX_READ_BYTES = 2 * 1024 * 1024
MAX_READ_LINES = 5000
MAX_GREP_MATCHES = 1000
MAX_GREP_LINE_CHARS = 500
SKIP_DIRS = frozenset({".git", ".venv", "node_modules"})
BINARY_SNIFF_BYTES = 8192


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


_PATH = {"type": "string", "description": "Path relative to the workspace."}


@contextmanager
def _io_errors(user_path: str) -> Iterator[None]:
    try:
        yield
    except FileNotFoundError as exc:
        raise ToolError("not_found", f"{user_path!r} does not exist") from exc
    except (NotADirectoryError, FileExistsError) as exc:
        raise ToolError("not_a_directory", f"a parent of {user_path!r} is not a directory") from exc
    except OSError as exc:
        raise ToolError("io_error", f"{user_path!r}: {exc.strerror or exc}") from exc


class ReadFile:
    """Read a text file, whole or a range of lines."""

    spec = ToolSpec(
        name="read_file",
        description=(
            "Read a UTF-8 text file in the workspace. Files over 2 MB need `limit`; use "
            "`offset` and `limit` to read a range of lines."
        ),
        parameters=_schema(
            {
                "path": _PATH,
                "offset": {"type": "integer", "minimum": 0, "description": "First line, 0-based."},
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_READ_LINES,
                    "description": "Number of lines to read.",
                },
            },
            ["path"],
        ),
        read_only=True,
        idempotent=True,
    )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        """The file's text (or the requested lines), invalid UTF-8 replaced."""
        limit = args.get("limit")
        return await asyncio.to_thread(
            _read_file,
            ctx.workspace,
            args["path"],
            int(args.get("offset", 0)),
            None if limit is None else int(limit),
        )


def _read_file(workspace: Path, user_path: str, offset: int, limit: int | None) -> str:
    path = resolve_in_workspace(workspace, user_path)
    with _io_errors(user_path):
        st = path.stat()
        if stat.S_ISDIR(st.st_mode):
            raise ToolError("not_a_file", f"{user_path!r} is a directory; use list_dir on it")
        if not stat.S_ISREG(st.st_mode):
            raise ToolError("not_a_file", f"{user_path!r} is not a regular file")
        if limit is None and st.st_size > MAX_READ_BYTES:
            raise ToolError(
                "too_large",
                f"{user_path!r} is {st.st_size} bytes, over the 2 MB limit for a whole file; "
                f"pass offset and limit (at most {MAX_READ_LINES} lines) to read it in parts",
            )
        with path.open("rb") as f:
            return _read_lines(f, user_path, offset, limit)


def _read_lines(f: BinaryIO, user_path: str, offset: int, limit: int | None) -> str:
    for _ in range(offset):
        if not _skip_line(f):
            return ""
    parts: list[bytes] = []
    total = 0
    while limit is None or len(parts) < limit:
        # Bounded, so one enormous line cannot pull the whole file into memory.
        line = f.readline(MAX_READ_BYTES + 1 - total)
        if not line:
            break
        total += len(line)
        if total > MAX_READ_BYTES:
            raise ToolError(
                "too_large",
                f"the lines of {user_path!r} from line {offset} come to over 2 MB; "
                "pass a smaller limit",
            )
        parts.append(line)
    return b"".join(parts).decode("utf-8", errors="replace")


def _skip_line(f: BinaryIO) -> bool:
    while chunk := f.readline(65536):
        if chunk.endswith(b"\n"):
            return True
    return False


class ListDir:
    """List a directory."""

    spec = ToolSpec(
        name="list_dir",
        description=(
            "List a directory in the workspace: one entry per line, sorted, "
            "directories end with '/'."
        ),
        parameters=_schema({"path": {**_PATH, "default": "."}}, []),
        read_only=True,
        idempotent=True,
    )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        """The entries of the directory, one per line."""
        return await asyncio.to_thread(_list_dir, ctx.workspace, args.get("path", "."))


def _list_dir(workspace: Path, user_path: str) -> str:
    path = resolve_in_workspace(workspace, user_path)
    with _io_errors(user_path):
        if not stat.S_ISDIR(path.stat().st_mode):
            raise ToolError("not_a_directory", f"{user_path!r} is not a directory")
        with os.scandir(path) as entries:
            named = sorted((e.name, e.is_dir()) for e in entries)
    listing = "\n".join(name + "/" if is_dir else name for name, is_dir in named)
    return listing or "(empty directory)"  # an empty string reads as a failure to a model


class Grep:
    """Search file contents with a regular expression."""

    spec = ToolSpec(
        name="grep",
        description=(
            "Search files under a path in the workspace for a Python regular expression; "
            "prints 'path:line:text' per matching line. Skips .git, .venv and node_modules."
        ),
        parameters=_schema(
            {
                "pattern": {"type": "string", "description": "Python regular expression."},
                "path": {**_PATH, "default": "."},
                "glob": {"type": "string", "description": "Only files matching, e.g. '*.py'."},
                "max_matches": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_GREP_MATCHES,
                    "default": 200,
                },
            },
            ["pattern"],
        ),
        read_only=True,
        idempotent=True,
    )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        """Matching lines as 'relpath:lineno:line', with a note when max_matches was hit."""
        try:
            regex = re.compile(args["pattern"])
        except re.error as exc:
            raise ToolError(
                "invalid_arguments", f"invalid regex {args['pattern']!r}: {exc}"
            ) from exc
        return await asyncio.to_thread(
            _grep,
            ctx.workspace,
            regex,
            args.get("path", "."),
            args.get("glob") or None,
            int(args.get("max_matches", 200)),
        )


def _grep(
    workspace: Path, regex: re.Pattern[str], user_path: str, glob: str | None, max_matches: int
) -> str:
    root = Path(os.path.realpath(workspace))
    start = resolve_in_workspace(workspace, user_path)
    with _io_errors(user_path):
        start.stat()
    found: list[str] = []
    for shown, real in _files_under(root, start):
        rel = shown.relative_to(root).as_posix()
        if glob and not PurePosixPath(rel).match(glob):
            continue
        for lineno, line in _text_lines(real):
            if not regex.search(line):
                continue
            if len(found) == max_matches:
                found.append(
                    f"[stopped at max_matches={max_matches}; there are more matches: narrow "
                    "the pattern, path or glob, or raise max_matches]"
                )
                return "\n".join(found)
            found.append(f"{rel}:{lineno}:{line[:MAX_GREP_LINE_CHARS]}")
    return "\n".join(found) if found else f"no matches for {regex.pattern!r}"


def _files_under(root: Path, start: Path) -> Iterator[tuple[Path, Path]]:
    """(path as seen from `start`, real path) of each regular file, never leaving `root`."""
    if not start.is_dir():
        if start.is_file():
            yield start, start
        return
    seen = {start}
    for dirpath, dirnames, filenames in os.walk(start, followlinks=True):
        here = Path(dirpath)
        kept = []
        for name in sorted(dirnames):
            real = Path(os.path.realpath(here / name))
            # `seen` stops symlink cycles; the root check stops symlinks out of the workspace.
            if name in SKIP_DIRS or real in seen or not real.is_relative_to(root):
                continue
            seen.add(real)
            kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            real = Path(os.path.realpath(here / name))
            if real.is_relative_to(root) and real.is_file():
                yield here / name, real


def _text_lines(path: Path) -> Iterator[tuple[int, str]]:
    try:
        with path.open("rb") as f:
            if b"\0" in f.read(BINARY_SNIFF_BYTES):
                return
            f.seek(0)
            for lineno, raw in enumerate(f, 1):
                yield lineno, raw.decode("utf-8", errors="replace").rstrip("\r\n")
    except OSError:
        return  # unreadable files are skipped, as grep -s does


class WriteFile:
    """Write (or append to) a text file."""

    spec = ToolSpec(
        name="write_file",
        description=(
            "Write UTF-8 text to a file in the workspace, creating parent directories; "
            "replaces the file unless append is true."
        ),
        parameters=_schema(
            {
                "path": _PATH,
                "content": {"type": "string"},
                "append": {"type": "boolean", "default": False},
            },
            ["path", "content"],
        ),
        read_only=False,
        idempotent=False,
    )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        """'wrote N bytes to path'."""
        return await asyncio.to_thread(
            _write_file,
            ctx.workspace,
            args["path"],
            args["content"],
            bool(args.get("append", False)),
        )


def _write_file(workspace: Path, user_path: str, content: str, append: bool) -> str:
    path = resolve_in_workspace(workspace, user_path)
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError("invalid_arguments", f"content is not valid text: {exc.reason}") from exc
    with _io_errors(user_path):
        if path.exists() and not path.is_file():
            raise ToolError("not_a_file", f"{user_path!r} exists and is not a regular file")
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab" if append else "wb") as f:
            f.write(data)
    return f"wrote {len(data)} bytes to {user_path}"


def builtin_tools() -> list[Tool]:
    """Fresh instances of the built-in tools."""
    return [ReadFile(), ListDir(), Grep(), WriteFile(), ReadAttachment()]
