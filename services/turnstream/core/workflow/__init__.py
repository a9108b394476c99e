"""Workflows (state machines): definitions, templates, and the pure run logic."""
