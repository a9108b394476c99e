"""What a session's mailbox holds (the runner's ownership and its actors both name it)."""

from __future__ import annotations

from turnstream.core.session.decider import Input
from turnstream.runtime.mailbox import Delivered

Item = Delivered | Input
"""What a session's mailbox holds: delivered facts, and the inputs the actor posts itself
(a model call's result, a streamed tool call, a timer's tick)."""
