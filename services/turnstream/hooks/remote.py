"""Serve hooks from another process: each answers `HookCall`s on its NATS subject and is
registered in the hooks bucket, so every turn-runner runs it from its next decision on."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from turnstream.core.subjects import Subjects
from turnstream.hooks.base import Hook, HookCall, HookReply, HookSpec

log = logging.getLogger("turnstream.hooks")


async def serve_hooks(
    nc: Any,
    hooks: Iterable[tuple[HookSpec, Hook]],
    stop: asyncio.Event,
    subjects: Subjects | None = None,
) -> None:
    """Answer each hook's calls on `nc` (a nats-py client) until `stop`, then unregister
    them (a hook left registered while nobody answers counts as timed out)."""
    kv = await nc.jetstream().key_value((subjects or Subjects()).hooks_bucket)
    subs, names = [], []
    for spec, fn in hooks:
        if spec.subject is None:
            raise ValueError(f"hook {spec.name} needs a subject to be served remotely")
        subs.append(await nc.subscribe(spec.subject, cb=_responder(fn)))
        await kv.put(spec.name, spec.model_dump_json(by_alias=True, exclude_none=True).encode())
        names.append(spec.name)
        log.info(
            "hook %s (%s at %s %s) answers on %s",
            spec.name,
            spec.kind,
            spec.stage,
            spec.point,
            spec.subject,
        )
    try:
        await stop.wait()
    finally:
        for name in names:
            await kv.delete(name)
        for sub in subs:
            await sub.unsubscribe()


def _responder(fn: Hook) -> Any:
    async def respond(msg: Any) -> None:
        try:
            call = HookCall.model_validate_json(msg.data)
            reply = await fn(call)
        except ValidationError as exc:
            log.warning("a hook call that is not a HookCall: %s", exc)
            reply = HookReply()  # changes nothing
        await msg.respond(reply.model_dump_json(by_alias=True, exclude_none=True).encode())

    return respond
