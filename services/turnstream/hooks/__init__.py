"""Hooks: code that observes, guards or transforms a turn at its stages (in-process or remote)."""

from turnstream.hooks.base import Hook, HookCall, HookReply, HookSpec
from turnstream.hooks.registry import HookRegistry

__all__ = ["Hook", "HookCall", "HookRegistry", "HookReply", "HookSpec"]
