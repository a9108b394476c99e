"""Model providers behind one small protocol; `scripted` needs no API key."""

from typing import Any

from turnstream.providers.base import DeltaSink, Provider
from turnstream.providers.retry import RetryPolicy
from turnstream.providers.scripted import ScriptedProvider, load_script
from turnstream.settings import Settings

__all__ = [
    "DeltaSink",
    "Provider",
    "ScriptedProvider",
    "api_key",
    "build_provider",
    "load_script",
]


def api_key(settings: Settings) -> str | None:
    """The configured provider's key; a clear error when one is needed and missing."""
    if settings.provider == "scripted":
        return None
    name = "ANTHROPIC_API_KEY" if settings.provider == "anthropic" else "OPENAI_API_KEY"
    key = settings.secret(name)
    if key or (settings.provider == "openai" and settings.base_url):
        return key  # a local OpenAI-compatible server needs no key
    raise ValueError(
        f"the {settings.provider} provider needs a key: set {name} (or name a file with "
        f"{name}=… in TURNSTREAM_SECRETS_FILE)"
        + (
            "; a local OpenAI-compatible server needs only TURNSTREAM_BASE_URL"
            if settings.provider == "openai"
            else ""
        )
    )


def build_provider(settings: Settings) -> Provider:
    """The provider a deployment is configured for (API keys come from the environment or
    the secrets file, never from settings that could end up in events or logs), with its
    fallback model behind it when `fallback_model` is set."""
    primary = _build_one(settings)
    fallback = settings.fallback_settings()
    if fallback is None:
        return primary
    from turnstream.providers.fallback import FallbackProvider

    return FallbackProvider(primary, _build_one(fallback))


def _build_one(settings: Settings) -> Provider:
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

        key = api_key(settings)
        return AnthropicProvider(
            settings.model_name, api_key=key, cache=settings.prompt_cache, **common
        )
    if settings.provider == "openai":
        from turnstream.providers.openai_api import OpenAIProvider

        key = api_key(settings)
        # only OpenAI's own API is sure to take `prompt_cache_key`; it caches without it too
        own_api = settings.base_url is None or "api.openai.com" in settings.base_url
        cache_key = settings.prompt_cache != "off" and own_api
        return OpenAIProvider(settings.model_name, api_key=key, cache_key=cache_key, **common)
    return ScriptedProvider(
        load_script(settings.script),
        model=settings.model_name,
        retry=retry,
        cache=settings.prompt_cache,
    )
