"""Workflow definitions on disk: loading and checking a workflow folder."""
