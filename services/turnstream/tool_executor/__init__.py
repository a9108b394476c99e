"""tool-executor: runs requested tool invocations, each at most once (scale by adding instances)."""
