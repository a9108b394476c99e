"""Every context provider of a deployment, and asking them for one turn's context.

Configured in `context.providers` (`turnstream.yaml`, or `TURNSTREAM_CONTEXT` as JSON):
a built-in by its name, a remote provider with a `subject`; entry-point providers take
part when installed (the settings may change their priority, timeout and budget).
Each is asked at once; the answers are returned in priority order. A provider that
raises, answers badly or not within its timeout is skipped: the turn goes on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from turnstream.context.base import ContextFn, ContextSpec, RemoteSpec
from turnstream.context.builtin import BUILTIN_NAMES, VOLATILE_BUILTINS, builtin
from turnstream.core.turn.context import ContextRequest, ContextResult, Contributed, Skipped
from turnstream.entry_points import load_pairs

log = logging.getLogger("turnstream.context")
ENTRY_POINT_GROUP = "turnstream.context"
REMOTE_PREFIX = "context."
"""Remote providers register in the hooks bucket under `context.<name>` (`RemoteSpec`)."""


def _utc_now() -> datetime:
    return datetime.now(UTC)


class ContextRegistry:
    def __init__(self, providers: Iterable[tuple[ContextSpec, ContextFn | None]], nc: Any = None):
        self.providers = sorted(providers, key=lambda p: (p[0].priority, p[0].name))
        self.nc = nc

    def set_remote(self, key: str, value: bytes | None) -> None:
        """Apply one `context.<name>` entry of the hooks bucket (None = deleted)."""
        name = key.removeprefix(REMOTE_PREFIX)
        if value is not None:
            try:
                remote = RemoteSpec.model_validate_json(value)
            except ValidationError as exc:
                log.warning("ignoring remote context provider %r: %s", name, exc)
                return
        kept = [p for p in self.providers if p[0].name != name or p[1] is not None]
        if value is not None:
            spec = ContextSpec(
                name,
                remote.priority,
                remote.timeout_ms,
                remote.max_tokens,
                remote.subject,
                remote.volatile,
            )
            kept.append((spec, None))
        self.providers = sorted(kept, key=lambda p: (p[0].priority, p[0].name))

    def __bool__(self) -> bool:
        return bool(self.providers)

    @property
    def local(self) -> bool:
        """Every provider runs in this process (none is asked over NATS)."""
        return all(fn is not None for _, fn in self.providers)

    @classmethod
    def load(
        cls,
        settings: Any,
        nc: Any = None,
        extra: Iterable[tuple[ContextSpec, ContextFn]] = (),
        clock: Callable[[], datetime] = _utc_now,
    ) -> ContextRegistry:
        """Entry-point providers, `extra`, and those the settings name (built-in or remote)."""
        found: dict[str, tuple[ContextSpec, ContextFn | None]] = {}
        for spec, fn in [*load_pairs(ENTRY_POINT_GROUP, "context provider"), *extra]:
            found[spec.name] = (spec, fn)
        for name, setting in settings.context.providers.items():
            spec = ContextSpec(
                name=name,
                priority=setting.priority,
                timeout_ms=setting.timeout_ms,
                max_tokens=setting.max_tokens,
                subject=setting.subject,
                volatile=(
                    setting.volatile if setting.volatile is not None else name in VOLATILE_BUILTINS
                ),
            )
            if setting.subject is not None:
                found[name] = (spec, None)
            elif name in found:
                installed, fn = found[name]
                volatile = installed.volatile if setting.volatile is None else setting.volatile
                found[name] = (replace(spec, subject=None, volatile=volatile), fn)
            elif name in BUILTIN_NAMES:
                found[name] = (spec, builtin(name, Path(settings.workspace), clock))
            else:
                raise ValueError(
                    f"context provider {name!r} is neither built in ({', '.join(BUILTIN_NAMES)}), "
                    f"installed (entry point group {ENTRY_POINT_GROUP!r}) nor remote (give it a "
                    "`subject`)"
                )
        return cls(found.values(), nc)

    async def gather(self, request: ContextRequest) -> tuple[ContextResult, ...]:
        """Every provider's answer for `request`, in priority order."""
        if len(self.providers) == 1:  # no task to spawn for the common case
            spec, fn = self.providers[0]
            return (await self._ask(spec, fn, request),)
        asked = [self._ask(spec, fn, request) for spec, fn in self.providers]
        return tuple(await asyncio.gather(*asked))

    async def _ask(
        self, spec: ContextSpec, fn: ContextFn | None, request: ContextRequest
    ) -> ContextResult:
        try:
            async with asyncio.timeout(spec.timeout_ms / 1000):
                text = await (fn(request) if fn is not None else self._remote(spec, request))
        except TimeoutError:
            log.warning(
                "context provider %s did not answer within %d ms", spec.name, spec.timeout_ms
            )
            return Skipped(spec.name, f"no answer within {spec.timeout_ms} ms", timed_out=True)
        except Exception as exc:  # a provider's bug, a bad reply, nobody listening
            reason = f"{type(exc).__name__}: {exc}"
            log.warning("context provider %s skipped: %s", spec.name, reason)
            return Skipped(spec.name, reason)
        if text is not None and not isinstance(text, str):
            return Skipped(spec.name, f"answered {type(text).__name__}, not text")
        text = (text or "").strip()
        budget = spec.max_tokens * 4
        if len(text) > budget:
            log.warning(
                "context provider %s returned ~%d tokens, over its budget of %d: cut",
                spec.name,
                (len(text) + 3) // 4,
                spec.max_tokens,
            )
            return Contributed(spec.name, text[:budget], truncated=True, volatile=spec.volatile)
        return Contributed(spec.name, text, volatile=spec.volatile)

    async def _remote(self, spec: ContextSpec, request: ContextRequest) -> str | None:
        if self.nc is None or spec.subject is None:
            raise RuntimeError("no NATS connection for a remote provider")
        body = orjson.dumps(
            {
                "provider": spec.name,
                "sessionId": request.session_id,
                "turnId": request.turn_id,
                "iteration": request.iteration,
                "input": request.input,
                "summary": request.summary,
                "maxTokens": spec.max_tokens,
            }
        )
        msg = await self.nc.request(spec.subject, body, timeout=spec.timeout_ms / 1000)
        reply = orjson.loads(msg.data)
        if not isinstance(reply, dict) or not isinstance(reply.get("content"), str | None):
            raise ValueError(f'expected {{"content": "<text>" | null}}, got {msg.data[:200]!r}')
        content = reply.get("content")
        return content if isinstance(content, str) else None
