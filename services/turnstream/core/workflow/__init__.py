"""Workflows (state machines): definitions, templates, and the pure run logic."""

# the turn package holds workflow runs in its state and this package builds on its turns:
# load it first, so that importing any module here first works too
import turnstream.core.turn  # noqa: F401
