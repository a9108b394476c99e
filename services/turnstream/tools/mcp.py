"""MCP servers' tools as turnstream tools, through the official `mcp` SDK (v1).

Each configured server (stdio: `command/args/env`; streamable HTTP: `url/headers`) gets one
`McpServer`: a task that holds the SDK's transport and `ClientSession` open (anyio context
managers must be left in the task that entered them), the server's tools as `McpTool`s named
`<server>__<tool>`, and a reconnect on the next call after a call failed for the connection
(the server died, or did not answer in time). `notifications/tools/list_changed` re-lists
that server's tools and calls `on_change`. Secret values (`${secret:NAME}`, `${env:NAME}`)
are resolved at connect time and never logged.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from datetime import timedelta
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, best_match
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from referencing import Registry

from turnstream.core.toolnames import mcp_name
from turnstream.tools.base import TOOL_NAME, Tool, ToolContext, ToolError, ToolSpec
from turnstream.tools.registry import ToolRegistry

log = logging.getLogger("turnstream.tools.mcp")

CONNECT_TIMEOUT_S = 20.0
"""Starting a server (a subprocess importing its SDK, say) may take longer than a call."""
REF = re.compile(r"\$\{(secret|env):([A-Za-z_][A-Za-z0-9_]*)\}")

SecretLookup = Callable[[str], str | None]


class McpConfigError(ValueError):
    """A server's configuration cannot be used (a missing secret, say); names no value."""


def resolve(value: str, secret: SecretLookup, where: str) -> str:
    """`value` with its `${secret:NAME}` / `${env:NAME}` references replaced."""

    def sub(match: re.Match[str]) -> str:
        kind, name = match.group(1), match.group(2)
        found = secret(name) if kind == "secret" else os.environ.get(name)
        if found is None:
            source = "the secrets file or environment" if kind == "secret" else "the environment"
            raise McpConfigError(f"{where}: ${{{kind}:{name}}} is not set in {source}")
        return found

    return REF.sub(sub, value)


def tool_spec(server: str, tool: types.Tool, timeout_s: float) -> ToolSpec | None:
    """The turnstream spec of one MCP tool, or None (with a logged error) if unusable."""
    name = mcp_name(server, tool.name)
    if not TOOL_NAME.fullmatch(name):
        log.error(
            "MCP server %r: tool %r skipped: its name %r must match %s",
            server,
            tool.name,
            name,
            TOOL_NAME.pattern,
        )
        return None
    schema = dict(tool.inputSchema)
    try:
        if schema.get("type") != "object":
            raise SchemaError(f"its type must be 'object', got {schema.get('type')!r}")
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        log.error(
            "MCP server %r: tool %r skipped: its inputSchema is not valid JSON Schema: %s",
            server,
            tool.name,
            exc.message,
        )
        return None
    hints = tool.annotations or types.ToolAnnotations()
    return ToolSpec(
        name=name,
        description=tool.description or tool.title or f"{tool.name} (MCP server {server})",
        parameters=schema,
        read_only=hints.readOnlyHint is True,
        idempotent=hints.idempotentHint is True or hints.readOnlyHint is True,
        # the server's answer is awaited for `timeout_s`; the executor's own bound is later,
        # so a hung server gives a ToolError (and a reconnect), not a bare timeout
        timeout_s=timeout_s + 1.0,
    )


def result_text(result: types.CallToolResult) -> str:
    """The text the model sees of a tool result (non-text parts are described)."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.ImageContent | types.AudioContent):
            parts.append(f"[{block.type} {block.mimeType}]")
        elif isinstance(block, types.EmbeddedResource):
            res = block.resource
            parts.append(
                res.text if isinstance(res, types.TextResourceContents) else f"[{res.uri}]"
            )
        else:
            parts.append(f"[{block.type}]")
    if not parts and result.structuredContent is not None:
        parts.append(json.dumps(result.structuredContent))
    return "\n".join(parts)


class _Session(ClientSession):
    """The SDK's session, checking a structured result with a validator built once per
    output schema: the SDK's own check (`jsonschema.validate`) re-validates the schema
    itself on every call (what it costs a call: `bench/mcp_tools.py` with this method
    removed, against the FastMCP test server)."""

    _validators: dict[str, tuple[dict[str, Any], Draft202012Validator]]

    async def _validate_tool_result(self, name: str, result: types.CallToolResult) -> None:
        schema = self._tool_output_schemas.get(name)
        if schema is None:  # not listed (the SDK re-lists) or no output schema
            await super()._validate_tool_result(name, result)
            return
        cached = getattr(self, "_validators", {}).get(name)
        if cached is None or cached[0] is not schema:
            try:
                Draft202012Validator.check_schema(schema)
            except SchemaError as exc:
                raise RuntimeError(f"Invalid schema for tool {name}: {exc.message}") from exc
            cached = (schema, Draft202012Validator(schema, registry=Registry()))
            if not hasattr(self, "_validators"):
                self._validators = {}
            self._validators[name] = cached
        if result.structuredContent is None:
            raise RuntimeError(
                f"Tool {name} has an output schema but did not return structured content"
            )
        error = best_match(cached[1].iter_errors(result.structuredContent))
        if error is not None:
            raise RuntimeError(
                f"Invalid structured content returned by tool {name}: {error.message}"
            )


class McpTool:
    """One tool of one MCP server."""

    def __init__(self, server: McpServer, remote_name: str, spec: ToolSpec) -> None:
        self.server = server
        self.remote_name = remote_name
        self.spec = spec

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        return await self.server.call(self.remote_name, args)


class McpServer:
    """One configured MCP server: its connection, its tools, and reconnecting."""

    def __init__(
        self,
        name: str,
        config: Any,
        secret: SecretLookup,
        *,
        on_change: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self.secret = secret
        self.on_change = on_change
        self.tools: dict[str, McpTool] = {}
        self.session: ClientSession | None = None
        self._holder: asyncio.Task[None] | None = None
        self._close = asyncio.Event()
        self._lock = asyncio.Lock()
        self._refreshes: set[asyncio.Task[None]] = set()

    @property
    def timeout_s(self) -> float:
        return float(getattr(self.config, "timeout_s", 30.0))

    # connection ---------------------------------------------------------------------------

    async def connect(self) -> bool:
        """Open the connection and list the tools (whether they changed); raises on failure
        (the caller logs)."""
        ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
        self._close = asyncio.Event()
        self._holder = asyncio.create_task(self._hold(ready), name=f"mcp:{self.name}")
        try:
            async with asyncio.timeout(max(self.timeout_s, CONNECT_TIMEOUT_S)):
                self.session = await asyncio.shield(ready)
        except BaseException:
            await self.disconnect()
            raise
        return await self._list()

    async def _hold(self, ready: asyncio.Future[ClientSession]) -> None:
        try:
            async with AsyncExitStack() as stack:
                read, write = await self._transport(stack)
                session = await stack.enter_async_context(
                    _Session(read, write, message_handler=self._on_message)
                )
                await session.initialize()
                if not ready.done():
                    ready.set_result(session)
                await self._close.wait()
        except BaseException as exc:  # anyio wraps a transport failure in an ExceptionGroup
            if not ready.done():
                ready.set_exception(RuntimeError(_plain(exc)))
            elif not isinstance(exc, asyncio.CancelledError):
                log.warning("MCP server %r: connection ended: %s", self.name, _plain(exc))
        finally:
            self.session = None

    async def _transport(self, stack: AsyncExitStack) -> tuple[Any, Any]:
        where = f"MCP server {self.name!r}"
        config = self.config
        if getattr(config, "url", None):
            headers = {
                k: resolve(v, self.secret, f"{where} header {k}") for k, v in config.headers.items()
            }
            client = await stack.enter_async_context(create_mcp_http_client(headers=headers))
            read, write, _ = await stack.enter_async_context(
                streamable_http_client(config.url, http_client=client)
            )
            return read, write
        env = {**get_default_environment()}
        env.update({k: resolve(v, self.secret, f"{where} env {k}") for k, v in config.env.items()})
        params = StdioServerParameters(command=config.command, args=list(config.args), env=env)
        read, write = await stack.enter_async_context(stdio_client(params))
        return read, write

    async def disconnect(self) -> None:
        self._close.set()
        holder, self._holder = self._holder, None
        if holder is not None:
            try:
                async with asyncio.timeout(5):
                    await holder
            except (TimeoutError, asyncio.CancelledError):
                holder.cancel()
        self.session = None

    async def close(self) -> None:
        for task in list(self._refreshes):
            task.cancel()
        await self.disconnect()

    # tools --------------------------------------------------------------------------------

    async def _list(self) -> bool:
        """Re-read the server's tools; whether their specs changed."""
        session = self.session
        if session is None:
            raise ToolError("mcp_disconnected", f"MCP server {self.name!r} is not connected")
        listed: list[types.Tool] = []
        cursor: str | None = None
        while True:
            page = await session.list_tools(cursor=cursor)
            listed.extend(page.tools)
            cursor = page.nextCursor
            if not cursor:
                break
        tools: dict[str, McpTool] = {}
        for tool in listed:
            spec = tool_spec(self.name, tool, self.timeout_s)
            if spec is not None:
                tools[spec.name] = McpTool(self, tool.name, spec)
        changed = [t.spec for t in self.tools.values()] != [t.spec for t in tools.values()]
        self.tools = tools
        log.info("MCP server %r: tools %s", self.name, sorted(tools))
        return changed

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ServerNotification) and isinstance(
            message.root, types.ToolListChangedNotification
        ):
            task = asyncio.create_task(self.refresh(), name=f"mcp-refresh:{self.name}")
            self._refreshes.add(task)
            task.add_done_callback(self._refreshes.discard)

    async def refresh(self) -> None:
        """Re-list the tools (after `tools/list_changed`) and tell `on_change`."""
        try:
            changed = await self._list()
        except Exception as exc:
            log.error("MCP server %r: re-listing its tools failed: %s", self.name, _plain(exc))
            return
        if changed and self.on_change is not None:
            await self.on_change()

    # calls --------------------------------------------------------------------------------

    async def call(self, tool: str, args: dict[str, Any]) -> str:
        where = f"MCP server {self.name!r} tool {tool!r}"
        async with self._lock:
            if self.session is None or self._holder is None or self._holder.done():
                await self.disconnect()
                try:
                    if await self.connect() and self.on_change is not None:
                        await self.on_change()  # reconnected to a server with other tools
                except Exception as exc:
                    raise ToolError(
                        "mcp_unavailable", f"{where}: cannot connect: {_plain(exc)}"
                    ) from exc
            session = self.session
        assert session is not None
        try:
            result = await session.call_tool(
                tool, args, read_timeout_seconds=timedelta(seconds=self.timeout_s)
            )
        except Exception as exc:
            await self.disconnect()  # the next call connects anew
            reason = _plain(exc)
            if "Timed out" in reason or isinstance(exc, TimeoutError):
                raise ToolError(
                    "mcp_timeout", f"{where}: no answer within {self.timeout_s:g} s ({reason})"
                ) from exc
            raise ToolError("mcp_connection_lost", f"{where}: {reason}") from exc
        text = result_text(result)
        if result.isError:
            raise ToolError("mcp_tool_error", f"{where} reported an error: {text or '(no text)'}")
        return text


def _plain(exc: BaseException) -> str:
    """The innermost message of an (ExceptionGroup-wrapped) error."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if not text.startswith(type(exc).__name__) else text


class McpTools:
    """Every configured MCP server of one executor; `tools()` is what they offer now."""

    def __init__(self, servers: dict[str, Any], secret: SecretLookup) -> None:
        self.servers = [
            McpServer(name, config, secret, on_change=self._changed)
            for name, config in sorted(servers.items())
        ]
        self.listeners: list[Callable[[], Awaitable[None]]] = []

    async def start(self) -> None:
        """Connect to each server; one that does not start is logged and left out."""

        async def one(server: McpServer) -> None:
            try:
                await server.connect()
            except Exception as exc:
                log.error(
                    "MCP server %r did not start (%s); the executor goes on without its tools",
                    server.name,
                    _plain(exc),
                )

        await asyncio.gather(*(one(s) for s in self.servers))

    async def close(self) -> None:
        await asyncio.gather(*(s.close() for s in self.servers), return_exceptions=True)

    async def __aenter__(self) -> McpTools:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def tools(self) -> list[Tool]:
        return [tool for server in self.servers for tool in server.tools.values()]

    def registry(self, base: ToolRegistry) -> ToolRegistry:
        """`base`'s tools and the MCP tools (one whose name `base` has is left out, logged)."""
        own: list[Tool] = [t for name in base.names() if (t := base.get(name)) is not None]
        taken = set(base.names())
        extra: list[Tool] = []
        for tool in self.tools():
            if tool.spec.name in taken:
                log.error("MCP tool %r skipped: a tool of that name exists", tool.spec.name)
                continue
            extra.append(tool)
        return ToolRegistry([*own, *extra])

    async def _changed(self) -> None:
        for listener in self.listeners:
            await listener()
