"""The manifest's digest: canonical, so the same tools give the same digest anywhere."""

from __future__ import annotations

from turnstream.tools import ToolRegistry, builtin_tools
from turnstream.tools.manifest import digest, entries, infos, manifest


def test_the_digest_is_canonical_and_follows_every_field() -> None:
    value = manifest(ToolRegistry(builtin_tools()))
    tools = value["tools"]
    assert value["digest"] == digest(entries(ToolRegistry(list(reversed(builtin_tools()))).specs()))
    shuffled = [dict(reversed(list(t.items()))) for t in tools]
    assert digest(shuffled) == value["digest"]
    changed = [{**tools[0], "read_only": not tools[0]["read_only"]}, *tools[1:]]
    assert digest(changed) != value["digest"]
    assert [i.name for i in infos(value)] == [t["name"] for t in tools]
    assert value["digest"].startswith("sha256:") and len(value["digest"]) == 7 + 64
