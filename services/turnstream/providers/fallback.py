"""A primary provider with a fallback model behind it (`TURNSTREAM_FALLBACK_MODEL`).

The primary runs with its own bounded retries; when its final failure is one that
`turnstream.core.turn.fallback.falls_back` accepts, the same request goes to the fallback
and the outcome carries a `Fallback` note (the decider records it as `ProviderFallback`).
A request of a turn that already switched (`request.on_fallback`) goes straight there.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from turnstream.core.turn import ProviderFailure, ProviderOutcome, ProviderRequest
from turnstream.core.turn.fallback import falls_back, label
from turnstream.core.turn.provider import Fallback
from turnstream.providers.base import DeltaSink, Provider, ToolCallSink

log = logging.getLogger(__name__)


class FallbackProvider:
    """Looks like the primary (`name`, `model`); answers from the fallback when it must."""

    def __init__(self, primary: Provider, fallback: Provider) -> None:
        self.primary = primary
        self.fallback = fallback
        self.name = primary.name
        self.model = primary.model

    async def complete(
        self,
        request: ProviderRequest,
        on_delta: DeltaSink,
        on_tool_call: ToolCallSink | None = None,
    ) -> ProviderOutcome:
        if request.on_fallback:
            return await self.fallback.complete(request, on_delta, on_tool_call)
        outcome = await self.primary.complete(request, on_delta, on_tool_call)
        if not isinstance(outcome, ProviderFailure) or not falls_back(outcome):
            return outcome
        switch = Fallback(
            from_model=label(self.primary.name, self.primary.model),
            to_model=label(self.fallback.name, self.fallback.model),
            failure=outcome,
        )
        log.warning(
            "model %s failed (%s: %s); falling back to %s",
            switch.from_model,
            outcome.error_class,
            outcome.message,
            switch.to_model,
        )
        # the fallback is its own model, whatever an interceptor asked of the primary
        answer = await self.fallback.complete(replace(request, model=None), on_delta, on_tool_call)
        return replace(answer, fallback=switch)

    async def close(self) -> None:
        try:
            await self.primary.close()
        finally:
            await self.fallback.close()
