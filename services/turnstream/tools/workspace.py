"""Confinement of user-supplied paths to the workspace (TURNSTREAM_WORKSPACE)."""

from __future__ import annotations

import os
from pathlib import Path

from turnstream.tools.base import ToolError


def resolve_in_workspace(workspace: Path, user_path: str) -> Path:
    """The fully resolved path `user_path` names, or `ToolError("path_escape")` if outside."""
    root = Path(os.path.realpath(workspace))
    try:
        # realpath follows every symlink that exists, dangling ones included, and keeps the
        # missing tail as is: a file about to be created is checked by its real parent. Unlike
        # Path.resolve it does not raise on symlink loops; using such a path fails later as I/O.
        resolved = Path(os.path.realpath(root / user_path))
    except (OSError, ValueError) as exc:
        raise ToolError("invalid_arguments", f"cannot resolve path {user_path!r}: {exc}") from exc
    if not resolved.is_relative_to(root):
        raise ToolError(
            "path_escape",
            f"path {user_path!r} leads outside the workspace; paths must stay inside the "
            f"workspace {root} (TURNSTREAM_WORKSPACE): use a path relative to it",
        )
    return resolved
