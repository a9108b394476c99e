"""Model providers behind one small protocol; `scripted` needs no API key."""

from typing import Any

from turnstream.providers.base import DeltaSink, Provider
from turnstream.providers.retry import RetryPolicy
from turnstream.providers.scripted import ScriptedProvider, load_script
from turnstream.settings import Settings

__all__ = ["DeltaSink", "Provider", "ScriptedProvider", "build_provider", "load_script"]


def build_provider(settings: Settings) -> Provider:
    """The provider a deployment is configured for (API keys come from the environment or
    the secrets file, never from settings that could end up in events or logs)."""
    retry = RetryPolicy(
        max_retries=settings.provider_max_retries, base_delay_s=settings.provider_retry_base_s
    )
    common: dict[str, Any] = {
        "base_url": settings.base_url,
        "max_tokens": settings.max_tokens,
        "temperature": settings.temperature,
        "retry": retry,
    }
    if settings.provider == "anthropic":
        from turnstream.providers.anthropic_api import AnthropicProvider

        key = settings.secret("ANTHROPIC_API_KEY")
        return AnthropicProvider(settings.model_name, api_key=key, **common)
    if settings.provider == "openai":
        from turnstream.providers.openai_api import OpenAIProvider

        key = settings.secret("OPENAI_API_KEY")
        return OpenAIProvider(settings.model_name, api_key=key, **common)
    return ScriptedProvider(load_script(settings.script), model=settings.model_name)
