"""The fake Slack's files: a file a user shares is served as Slack serves it, at the
`url_private_download` the message event names, to a request with the bot token as bearer
(`Authorization: Bearer xoxb-…`); without it, or with another token, Slack redirects to its
sign-in page (a 302), as the real one does."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

JSON = dict[str, Any]
_IDS = itertools.count(1)


@dataclass
class SlackFiles:
    bot_token: str
    stored: dict[str, bytes] = field(default_factory=dict)
    downloads: list[tuple[str, str | None]] = field(default_factory=list)
    """`(file id, the Authorization header)` of every download asked for."""

    def route(self, app: web.Application) -> None:
        app.router.add_get("/files-pri/{team_file}/download/{name}", self.download)

    def share(self, base_url: str, name: str, mimetype: str, data: bytes) -> JSON:
        """A file as a `file_share` message event lists it (`files[]`)."""
        file_id = f"F0FAKE{next(_IDS):04d}"
        self.stored[file_id] = data
        return {
            "id": file_id,
            "name": name,
            "title": name,
            "mimetype": mimetype,
            "filetype": name.rpartition(".")[2],
            "size": len(data),
            "mode": "hosted",
            "url_private": f"{base_url}/files-pri/T0FAKE-{file_id}/{name}",
            "url_private_download": f"{base_url}/files-pri/T0FAKE-{file_id}/download/{name}",
        }

    async def download(self, request: web.Request) -> web.StreamResponse:
        file_id = request.match_info["team_file"].rpartition("-")[2]
        auth = request.headers.get("Authorization")
        self.downloads.append((file_id, auth))
        if auth != f"Bearer {self.bot_token}":
            raise web.HTTPFound("/?redir=%2Ffiles-pri")  # Slack's sign-in page
        if file_id not in self.stored:
            return web.Response(status=404)
        return web.Response(body=self.stored[file_id], content_type="application/octet-stream")
