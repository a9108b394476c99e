"""Context providers: what each turn's requests carry besides the history (issue 16).

In-process providers come from entry points (`turnstream.context`), remote ones answer
NATS requests on a subject named in the settings, and three are built in: the workspace's
`AGENTS.md`, the current date and time, and the session's running summary after
compaction. `ContextRegistry.gather` asks them all for one turn, each within its timeout
and token budget; the turn-runner records what they said (`ContextProvided`).
"""

from turnstream.context.base import ContextFn, ContextSpec
from turnstream.context.registry import ContextRegistry

__all__ = ["ContextFn", "ContextRegistry", "ContextSpec"]
