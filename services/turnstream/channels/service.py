"""The channel's shell: a platform's messages in (decided by `channels.inbound`, published,
then acknowledged to the platform), its sessions' turns out (the channel's durable and the
live tokens, decided by `channels.outbound`, posted by `channels.posting`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, assert_never

import orjson

from turnstream.bus import Bus
from turnstream.bus.consume import kept_in_progress
from turnstream.bus.durables import channel
from turnstream.channels import files, inbound, outbound
from turnstream.channels.pairing import Request, new_code
from turnstream.channels.platform import Chat, Incoming, Platform, PlatformError, Press
from turnstream.channels.posting import Poster
from turnstream.channels.records import Records
from turnstream.client import publish_command
from turnstream.core.events import decode
from turnstream.runtime.connection import service_bus
from turnstream.settings import Settings

log = logging.getLogger("turnstream.channels")
TICK_S = 0.25
RETAKE_S = 1.0
GIVE_UP_AFTER = 5
"""Deliveries of a log event whose showing keeps failing (not a platform's refusal, which
is given up at once, nor a network failure, waited out): then it is dropped, logged."""
MAX_SESSION_LOCKS = 10_000


class ChannelService:
    """One platform's channel: run `serve` until `stop` is set."""

    def __init__(
        self,
        platform: Platform,
        settings: Settings,
        bus: Bus,
        records: Records,
        *,
        clock: Callable[[], float] = time.monotonic,
        poster: Poster | None = None,
    ) -> None:
        self.platform, self.bus, self.records = platform, bus, records
        self.policy = settings.channel(platform.name)
        self.files = settings.attachment_policy()
        self.poster = poster or Poster(platform, records)
        self.pacing = outbound.Pacing(
            platform.limits.text, self.policy.stream_interval_s, platform.limits.typing_every_s
        )
        self.views: dict[str, outbound.TurnView] = {}
        self.looked_up: set[str] = set()
        """Turns whose tokens came unannounced (a restart mid-turn), looked up once."""
        self.clock = clock
        self.durable = channel(platform.name)
        self.tasks: asyncio.TaskGroup | None = None
        self.showing: set[asyncio.Task[None]] = set()
        self.sessions: dict[str, asyncio.Lock] = {}
        """One lock per session: a session's events are shown in order, and a chat that
        waits out a 429 holds up no other."""

    async def serve(self, stop: asyncio.Event) -> None:
        subjects = self.bus.subjects
        try:
            async with asyncio.TaskGroup() as tasks:
                self.tasks = tasks
                live = await self.bus.nc.subscribe(subjects.live_all, cb=self._on_live)
                subs = await self.bus.log_push(self.durable, self._on_log)
                name = self.platform.name
                log.info("%s channel: following the log as %s", name, self.durable.name)
                running = [tasks.create_task(self._receive()), tasks.create_task(self._tick())]
                try:
                    await stop.wait()
                finally:
                    log.info("%s channel: stopping", name)
                    await subs.unsubscribe()
                    with contextlib.suppress(Exception):
                        await live.unsubscribe()
                    for task in [*running, *self.showing]:  # what is unacked comes again
                        task.cancel()
        finally:
            await self.platform.aclose()
            log.info("%s channel: stopped", self.platform.name)

    # inbound
    async def _receive(self) -> None:
        async for delivery in self.platform.receive():
            try:
                for item in delivery.items:
                    await self.take(item)
            except Exception:  # NATS away, say: not acknowledged, the platform sends it again
                log.exception("a delivery of %d item(s) not taken; again", len(delivery.items))
                await asyncio.sleep(RETAKE_S)
                continue
            await delivery.ack()  # only now: every command is stored

    async def take(self, item: Incoming | Press) -> None:
        """Decide on one message or press and perform it (publish before anything else)."""
        if isinstance(item, Press):
            await self._take_press(item)
            return
        name, policy = self.platform.name, self.policy
        scope = policy.session_scope or self.platform.limits.default_scope
        base = inbound.base_session(name, scope, item.chat, item.user)
        book, _ = await self.records.book()
        generation, last_new = await self.records.generation(base)
        known = inbound.Known(
            paired=await self.records.paired(item.user),
            generation=generation,
            open_code=book.code_of(item.user, time.time()),
        )
        decision = inbound.decide_message(
            name, policy, self.platform.limits.default_scope, item, known, new_code(), self.files
        )
        match decision:
            case inbound.Ignore(reason):
                log.debug("ignored %s: %s", item.key, reason)
            case inbound.Publish(session_id, command, attached):
                if attached:
                    try:
                        command["attachments"] = await files.attach(
                            self.platform, self.bus, attached, self.files
                        )
                    except files.Refused as refused:
                        await self._reply(item.key, item.chat, str(refused))
                        return
                await publish_command(self.bus, session_id, command)
            case inbound.Reply(chat, text):
                await self._reply(item.key, chat, text)
            case inbound.Pair(chat, user, user_name, code, new):
                if new:
                    expires = time.time() + policy.pairing_ttl_s
                    request = Request(code, user, user_name, chat.token(), expires)
                    await self.records.change_book(lambda b: b.with_request(request, time.time()))
                    log.info("pairing code %s given to %s (%s)", code, user, user_name)
                await self._reply(item.key, chat, decision.text)
            case inbound.NewSession(chat, base_id, generation):
                if last_new != item.key:  # this `/new` delivered again: counted once
                    await self.records.set_generation(base_id, generation, item.key)
                await self._reply(item.key, chat, "Started a new conversation.")
            case _:
                assert_never(decision)

    async def _take_press(self, press: Press) -> None:
        if press.decision == "stop":  # a streamed reply's: the turn's record
            found = await self.records.turn(press.interaction_id)
            found = None if found and found.get("done") else found
        else:
            found = await self.records.prompt(press.interaction_id)
        owner = inbound.PromptOwner(found["session"], found["sender"]) if found else None
        decision = inbound.decide_press(self.policy, press, owner)
        match decision:
            case inbound.RefusePress(text):
                await self._answer(press, text, alert=True)
            case inbound.AnswerPress(publish, text):
                await publish_command(self.bus, publish.session_id, publish.command)
                await self._answer(press, text, alert=False)
            case _:
                assert_never(decision)

    async def _reply(self, key: str, chat: Chat, text: str) -> None:
        try:
            await self.poster.notice(key, chat, text)
        except PlatformError as exc:
            log.warning("a reply to %s was not delivered: %s", chat.id, exc)

    async def _answer(self, press: Press, text: str, *, alert: bool) -> None:
        try:
            await self.poster.answer(press, text, alert=alert)
        except PlatformError as exc:  # a press answered late is refused by the platform
            log.warning("a button press was not answered: %s", exc)

    # outbound
    async def _on_log(self, msg: Any) -> None:
        event = decode(msg.data)
        ours = inbound.owns(self.platform.name, event.session_id)
        given = outbound.input_of(event) if ours else None
        if given is None or self.tasks is None:
            await msg.ack()
            return
        if len(self.sessions) > MAX_SESSION_LOCKS:
            self.sessions = {k: v for k, v in self.sessions.items() if v.locked()}
        lock = self.sessions.setdefault(event.session_id, asyncio.Lock())
        task = self.tasks.create_task(self._show(msg, given, lock))  # in order: a FIFO lock
        self.showing.add(task)
        task.add_done_callback(self.showing.discard)

    async def _show(self, msg: Any, given: outbound.Input, lock: asyncio.Lock) -> None:
        try:
            async with lock:
                with kept_in_progress([msg], self.durable.ack_wait_s):
                    await self.step(given)
            await msg.ack()
        except Exception:
            delivered = int(msg.metadata.num_delivered)
            log.exception("showing %s failed (delivery %d)", type(given).__name__, delivered)
            if delivered >= GIVE_UP_AFTER:
                log.error("given up after %d deliveries: %s", delivered, given)
                await msg.term()

    async def _on_live(self, msg: Any) -> None:
        session_id = self.bus.subjects.session_from_live(msg.subject)
        if not inbound.owns(self.platform.name, session_id):
            return
        try:
            body = orjson.loads(msg.data)
            turn_id = body["turnId"]
            if turn_id not in self.views and turn_id not in self.looked_up:
                await self._resume(session_id, turn_id)
            await self.step(outbound.Delta(turn_id, body["delta"]))
        except Exception:  # a token lost only delays what the stream shows
            log.exception("live delta of %s", session_id)

    async def _resume(self, session_id: str, turn_id: str) -> None:
        if len(self.looked_up) > 10_000:
            self.looked_up.clear()
        self.looked_up.add(turn_id)
        record = await self.records.turn(turn_id)
        chat = Chat.parse(record.get("chat", "")) if record else None
        if record is not None and chat is not None and not record.get("done"):
            await self.step(outbound.Resumed(session_id, turn_id, chat))

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                await self.step(outbound.Tick())
            except Exception:
                log.exception("tick")

    async def step(self, given: outbound.Input) -> None:
        """Decide on one input and perform its effects, in order."""
        self.views, effects = outbound.decide_outbound(self.views, given, self.clock(), self.pacing)
        for effect in effects:
            await self.perform(effect)

    async def perform(self, effect: outbound.Effect) -> None:
        poster = self.poster
        match effect:
            case outbound.Track(session_id, turn_id, chat, sender):
                await poster.track(turn_id, session_id, chat, sender)
            case outbound.Typing(chat):
                with contextlib.suppress(PlatformError):
                    await self.platform.typing(chat)
            case outbound.Stream(turn_id, chat, text):
                try:
                    await poster.stream(turn_id, chat, text)
                except PlatformError as exc:  # the final reply still comes
                    log.warning("stream update of turn %s: %s", turn_id, exc)
            case outbound.Final(turn_id, chat, parts):
                with given_up(f"the reply of turn {turn_id}"):
                    await poster.final(turn_id, chat, parts)
            case outbound.Prompt(session_id, turn_id, chat, interaction_id, text, buttons):
                with given_up(f"the prompt {interaction_id}"):
                    await poster.prompt(turn_id, session_id, chat, interaction_id, text, buttons)
            case outbound.ClosePrompt(chat, interaction_id, text):
                with given_up(f"the answer to prompt {interaction_id}"):
                    await poster.close_prompt(chat, interaction_id, text)
            case _:
                assert_never(effect)


@contextlib.contextmanager
def given_up(what: str) -> Iterator[None]:
    """A platform's refusal that no retry fixes (the bot blocked, removed from the chat, a
    bad request) is logged and given up; a transient one is raised, so the log event comes
    again and the call is made again."""
    try:
        yield
    except PlatformError as exc:
        if exc.transient:
            raise
        log.error("%s was not delivered: %s", what, exc)


async def serve_channel(
    platform: Platform,
    settings: Settings,
    stop: asyncio.Event,
    bus: Bus | None = None,
    *,
    poster: Callable[[Records], Poster] | None = None,
) -> None:
    """Run the channel of `platform` until `stop` is set (its own NATS connection unless a
    test gives one), posting through `poster(records)` where the platform has its own."""
    async with service_bus(settings, f"channel-{platform.name}", bus) as bus:
        records = await Records.open(bus, platform.name)
        own = poster(records) if poster is not None else None
        await ChannelService(platform, settings, bus, records, poster=own).serve(stop)
