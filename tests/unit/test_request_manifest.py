"""Each model request records the tools it offered: pure, no I/O."""

from __future__ import annotations

from dataclasses import replace

from tests.unit.factories import accepted, run_turn, success
from turnstream.core.events import ProviderRequestStarted
from turnstream.core.session import SessionState, fold
from turnstream.core.turn import ToolInfo, TurnConfig
from turnstream.core.turn.manifest import tools_digest
from turnstream.core.turn.runtime_tools import RUNTIME_TOOLS
from turnstream.runtime.plugins import tool_infos
from turnstream.tools import ToolRegistry
from turnstream.tools.manifest import manifest

READ = ToolInfo("read_file", "read", {"type": "object"}, True, True, 5.0)
WRITE = ToolInfo("write_file", "write", {"type": "object"}, False, False, 5.0)


def started(config: TurnConfig) -> ProviderRequestStarted:
    _, log = run_turn(fold(SessionState.of("s1"), [accepted(1)]), [success()], config)
    return next(e for e in log if isinstance(e, ProviderRequestStarted))


def test_a_request_records_the_manifest_it_offered_with_the_runtimes_own_tools() -> None:
    registry = ToolRegistry.load()
    data = started(TurnConfig(tools=tool_infos(registry))).data
    offered = (*tool_infos(registry), *RUNTIME_TOOLS.values())
    assert data.tools_digest == tools_digest(offered) != manifest(registry)["digest"]
    assert data.tools == [t.name for t in offered]
    assert tools_digest(tool_infos(registry)) == manifest(registry)["digest"]  # computed alike


def test_the_digest_follows_the_tools_offered_not_their_order() -> None:
    both = started(TurnConfig(tools=(READ, WRITE))).data
    assert both.tools_digest == started(TurnConfig(tools=(WRITE, READ))).data.tools_digest
    changed = replace(WRITE, description="write, differently")
    assert started(TurnConfig(tools=(READ, changed))).data.tools_digest != both.tools_digest
    none = started(TurnConfig(tools=(READ, WRITE), offer_tools=False)).data
    assert none.tools == [] and none.tools_digest == tools_digest(())


def test_the_same_tools_are_digested_once() -> None:
    tools = (READ, WRITE)
    assert tools_digest(tools) is tools_digest((READ, WRITE))  # a new tuple, the same tools
    copy = replace(WRITE)
    assert tools_digest((READ, copy)) == tools_digest(tools)  # equal tools: the same digest
