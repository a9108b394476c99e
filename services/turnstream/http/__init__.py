"""The HTTP face (DESIGN §12): REST + SSE over the inbound commands and the log."""

from turnstream.http.app import create_app, serve

__all__ = ["create_app", "serve"]
