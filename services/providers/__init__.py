"""Model providers behind one small protocol; `scripted` needs no API key."""

from turnstream.providers.base import DeltaSink, Provider
from turnstream.providers.scripted import ScriptedProvider, load_script

__all__ = ["DeltaSink", "Provider", "ScriptedProvider", "build_provider", "load_script"]


def build_provider(name: str, *, script: object = None, model: str | None = None) -> Provider:
    """The provider a deployment is configured for."""
    from pathlib import Path

    if name == "scripted":
        path = Path(str(script)) if script else None
        return ScriptedProvider(load_script(path), model=model or "demo")
    raise ValueError(
        f"provider {name!r} is not available in this build yet; use TURNSTREAM_PROVIDER=scripted"
    )
