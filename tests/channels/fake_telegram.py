"""A fake Telegram Bot API server that speaks the real wire format: `POST /bot<token>/<method>`
with form or JSON parameters, answered `{"ok": true, "result": …}` or `{"ok": false,
"error_code", "description", "parameters": {"retry_after"}}`; `getUpdates` long-polls with
an offset that confirms what came before it. It records every call (the token checked,
never stored in a call), keeps the chats' messages with their edits, and can be told to
answer 429, fail polls, or hold a call (before or after it took effect) so a test can kill
the channel at that point."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

UPDATE_IDS = itertools.count(1000)
MESSAGE_IDS = itertools.count(1)
"""One bot's update ids (and, here, message ids) never repeat, across the tests' fakes too."""
BOT = {"id": 999, "is_bot": True, "first_name": "Turnstream", "username": "ts_test_bot"}


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    at: float
    answered: str = "ok"
    """`ok`, `429`, `error`, `held`."""


@dataclass
class Posted:
    chat_id: int
    message_id: int
    text: str
    reply_markup: Any = None
    edits: list[str] = field(default_factory=list)
    at: float = 0.0


@dataclass
class Hold:
    """A call held at its `when` (`before` it takes effect, or `after`) until `release`."""

    method: str
    when: str
    text: str | None = None
    """Only a call whose `text` is this one."""
    reached: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    times: int = 1

    def matches(self, method: str, params: dict[str, Any]) -> bool:
        wanted = self.text is None or params.get("text") == self.text
        return self.times > 0 and method == self.method and wanted


class FakeTelegram:
    def __init__(self, token: str) -> None:
        self.token = token
        self.calls: list[Call] = []
        self.updates: list[dict[str, Any]] = []
        self.confirmed = 0
        self.update_ids = UPDATE_IDS
        self.message_ids = MESSAGE_IDS
        self.messages: dict[tuple[int, int], Posted] = {}
        self.rate_limits: dict[str, list[int]] = {}
        self.poll_failures = 0
        self.failures: dict[str, list[tuple[int, str]]] = {}
        self.holds: list[Hold] = []
        self.new_update = asyncio.Condition()
        self.unauthorized = 0
        self.closing = False
        self.runner: web.AppRunner | None = None
        self.url = ""
        self.files: dict[str, bytes] = {}
        """Uploaded files by `file_id`, served by `getFile` and `GET /file/bot<token>/<path>`."""
        self.downloads: list[str] = []

    # lifecycle
    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/{bot}/{method}", self._handle)
        app.router.add_get("/file/{bot}/{path:.+}", self._download)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        self.closing = True
        for hold in self.holds:
            hold.release.set()
        async with self.new_update:
            self.new_update.notify_all()
        if self.runner is not None:
            await self.runner.cleanup()

    # what a test does
    def rate_limit(self, method: str, retry_after: int, times: int = 1) -> None:
        """The next `times` calls of `method` answer 429 with `retry_after`."""
        self.rate_limits.setdefault(method, []).extend([retry_after] * times)

    def fail(self, method: str, code: int, description: str, times: int = 1) -> None:
        """The next `times` calls of `method` answer this error."""
        self.failures.setdefault(method, []).extend([(code, description)] * times)

    def hold(self, method: str, when: str, text: str | None = None) -> Hold:
        hold = Hold(method, when, text)
        self.holds.append(hold)
        return hold

    async def send_update(self, update: dict[str, Any]) -> int:
        update_id = next(self.update_ids)
        self.updates.append({"update_id": update_id, **update})
        async with self.new_update:
            self.new_update.notify_all()
        return update_id

    async def redeliver(self, update_id: int) -> None:
        """The same update again (Telegram re-sends what was not confirmed; a test forces it)."""
        update = next(u for u in self.updates if u["update_id"] == update_id)
        self.confirmed = min(self.confirmed, update_id)
        self.updates.append(dict(update))
        async with self.new_update:
            self.new_update.notify_all()

    def message_update(
        self,
        text: str,
        *,
        chat_id: int = 42,
        user_id: int = 7,
        chat_type: str = "private",
        first_name: str = "Ann",
        is_bot: bool = False,
        entities: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        chat: dict[str, Any] = {"id": chat_id, "type": chat_type}
        if chat_type == "private":
            chat["first_name"] = first_name
        else:
            chat["title"] = "A group"
        message: dict[str, Any] = {
            "message_id": next(self.message_ids),
            "date": int(time.time()),
            "chat": chat,
            "from": {"id": user_id, "is_bot": is_bot, "first_name": first_name},
            "text": text,
        }
        if entities:
            message["entities"] = entities
        return {"message": message}

    def upload(self, data: bytes) -> dict[str, Any]:
        """A file a user sent, as Telegram describes it in a message (`file_id`, size)."""
        file_id = f"F{next(self.update_ids)}"
        self.files[file_id] = data
        return {"file_id": file_id, "file_unique_id": f"u{file_id}", "file_size": len(data)}

    async def send_file(
        self,
        data: bytes,
        *,
        caption: str = "",
        document: tuple[str, str] | None = None,
        **kw: Any,
    ) -> int:
        """A photo (as Telegram sends one: a smaller size, then the largest) or, with
        `document=(file_name, mime_type)`, a document; its update id."""
        update = self.message_update("", **kw)
        message = update["message"]
        del message["text"]
        if caption:
            message["caption"] = caption
        if document is None:
            thumb = self.upload(data[: len(data) // 4])
            message["photo"] = [
                {**thumb, "width": 90, "height": 90},
                {**self.upload(data), "width": 800, "height": 600},
            ]
        else:
            name, mime = document
            message["document"] = {**self.upload(data), "file_name": name, "mime_type": mime}
        return await self.send_update(update)

    async def say(self, text: str, **kw: Any) -> int:
        """A user's message to the bot; its update id."""
        return await self.send_update(self.message_update(text, **kw))

    async def press(self, posted: Posted, data: str, *, user_id: int = 7) -> int:
        query = {
            "id": f"cq{next(self.update_ids)}",
            "from": {"id": user_id, "is_bot": False, "first_name": f"U{user_id}"},
            "chat_instance": "ci",
            "data": data,
            "message": {
                "message_id": posted.message_id,
                "date": int(time.time()),
                "chat": self._as_message(posted)["chat"],
                "from": BOT,
                "text": posted.text,
            },
        }
        return await self.send_update({"callback_query": query})

    def sent(self, chat_id: int | None = None) -> list[Posted]:
        return [m for m in self.messages.values() if chat_id is None or m.chat_id == chat_id]

    def of(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    # the wire
    async def _handle(self, request: web.Request) -> web.Response:
        bot, method = request.match_info["bot"], request.match_info["method"]
        if bot != f"bot{self.token}":
            self.unauthorized += 1
            return _error(401, "Unauthorized")
        params = await _params(request)
        call = Call(method, params, time.monotonic())
        self.calls.append(call)
        waits = self.rate_limits.get(method)
        if waits:
            call.answered = "429"
            retry_after = waits.pop(0)
            return _error(
                429,
                f"Too Many Requests: retry after {retry_after}",
                {"retry_after": retry_after},
            )
        failing = self.failures.get(method)
        if failing:
            call.answered = "error"
            return _error(*failing.pop(0))
        handler = getattr(self, f"_{method}", None)
        if handler is None:
            call.answered = "error"
            return _error(404, "Not Found: method not found")
        hold = next((h for h in self.holds if h.matches(method, params)), None)
        if hold is not None:
            hold.times -= 1
        if hold is not None and hold.when == "before":
            call.answered = "held"
            hold.reached.set()
            await hold.release.wait()
            return _error(500, "Internal Server Error: held")
        result = await handler(params)
        if isinstance(result, web.Response):
            call.answered = "error"
            return result
        if hold is not None and hold.when == "after":
            call.answered = "held"
            hold.reached.set()
            await hold.release.wait()
        return web.json_response({"ok": True, "result": result})

    async def _getFile(self, params: dict[str, Any]) -> Any:
        file_id = str(params.get("file_id", ""))
        if file_id not in self.files:
            return _error(400, "Bad Request: invalid file_id")
        data = self.files[file_id]
        return {
            "file_id": file_id,
            "file_unique_id": f"u{file_id}",
            "file_size": len(data),
            "file_path": f"documents/{file_id}.bin",
        }

    async def _download(self, request: web.Request) -> web.StreamResponse:
        """`https://api.telegram.org/file/bot<token>/<file_path>`, as `getFile` named it."""
        if request.match_info["bot"] != f"bot{self.token}":
            self.unauthorized += 1
            return web.Response(status=401)
        file_id = request.match_info["path"].rpartition("/")[2].removesuffix(".bin")
        if file_id not in self.files:
            return web.Response(status=404)
        self.downloads.append(file_id)
        return web.Response(body=self.files[file_id])

    async def _setWebhook(self, params: dict[str, Any]) -> Any:
        return True  # recorded in `calls`; `fake_telegram_webhook` plays the deliveries

    async def _getMe(self, params: dict[str, Any]) -> Any:
        return BOT

    async def _getUpdates(self, params: dict[str, Any]) -> Any:
        if self.poll_failures:
            self.poll_failures -= 1
            return _error(502, "Bad Gateway")
        offset = int(params.get("offset") or 0)
        self.confirmed = max(self.confirmed, offset)
        deadline = time.monotonic() + float(params.get("timeout") or 0)
        while True:
            ready = [u for u in self.updates if u["update_id"] >= self.confirmed]
            left = deadline - time.monotonic()
            if ready or left <= 0 or self.closing:
                return ready
            async with self.new_update:
                try:
                    await asyncio.wait_for(self.new_update.wait(), min(left, 0.5))
                except TimeoutError:
                    pass

    def _message(self, params: dict[str, Any]) -> dict[str, Any]:
        chat_id = int(params["chat_id"])
        posted = Posted(
            chat_id,
            next(self.message_ids),
            str(params["text"]),
            params.get("reply_markup"),
            at=time.monotonic(),
        )
        self.messages[(chat_id, posted.message_id)] = posted
        return self._as_message(posted)

    def _as_message(self, posted: Posted) -> dict[str, Any]:
        result: dict[str, Any] = {
            "message_id": posted.message_id,
            "date": int(time.time()),
            "chat": {"id": posted.chat_id, "type": "private" if posted.chat_id > 0 else "group"},
            "from": BOT,
            "text": posted.text,
        }
        if posted.reply_markup:
            result["reply_markup"] = posted.reply_markup
        return result

    async def _sendMessage(self, params: dict[str, Any]) -> Any:
        if not str(params.get("text", "")).strip():
            return _error(400, "Bad Request: message text is empty")
        if len(str(params["text"])) > 4096 + 2000:  # the limit counts shown text, not tags
            return _error(400, "Bad Request: message is too long")
        return self._message(params)

    async def _editMessageText(self, params: dict[str, Any]) -> Any:
        key = (int(params["chat_id"]), int(params["message_id"]))
        posted = self.messages.get(key)
        if posted is None:
            return _error(400, "Bad Request: message to edit not found")
        markup = params.get("reply_markup")
        if params["text"] == posted.text and markup == posted.reply_markup:
            return _error(
                400,
                "Bad Request: message is not modified: specified new message content and "
                "reply markup are exactly the same as a current content and reply markup "
                "of the message",
            )
        posted.text, posted.reply_markup = str(params["text"]), markup
        posted.edits.append(posted.text)
        return self._as_message(posted)

    async def _sendMessageDraft(self, params: dict[str, Any]) -> Any:
        return True

    async def _sendChatAction(self, params: dict[str, Any]) -> Any:
        return True

    async def _answerCallbackQuery(self, params: dict[str, Any]) -> Any:
        return True

    async def _close(self, params: dict[str, Any]) -> Any:
        return True


def _error(code: int, description: str, parameters: dict[str, Any] | None = None) -> web.Response:
    body: dict[str, Any] = {"ok": False, "error_code": code, "description": description}
    if parameters:
        body["parameters"] = parameters
    return web.json_response(body, status=code)


async def _params(request: web.Request) -> dict[str, Any]:
    if request.content_type == "application/json":
        return dict(await request.json())
    form = await request.post()
    out: dict[str, Any] = {}
    for key, value in form.items():
        text = str(value)
        try:
            out[key] = json.loads(text) if text[:1] in "[{" else text
        except ValueError:
            out[key] = text
    return out


Waiter = Callable[[], Awaitable[None]]
