"""approval: decides which proposed tool calls may run (security mode, prompts, deadlines)."""
