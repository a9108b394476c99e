"""The channel core's pure decisions: who may talk (DM policy, pairing, groups, mentions,
bot loops), which session, `/stop` and `/new`, who may press; what a chat shows of a turn
(typing, throttled stream, the final reply split, prompts); text splitting."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnstream.channels import inbound, outbound
from turnstream.channels.pairing import Book, Request
from turnstream.channels.platform import Chat, Incoming, Press
from turnstream.channels.text import split_text, tool_line
from turnstream.core.commands import COMMAND_ADAPTER
from turnstream.settings import ChannelSettings

DM = Chat("42", private=True)
GROUP = Chat("-100", private=False)


def msg(text: str = "hi", chat: Chat = DM, user: str = "7", **more: bool) -> Incoming:
    return Incoming(f"k-{text}", chat, user, "Ann", text, **more)


def decide(
    policy: ChannelSettings, m: Incoming, known: inbound.Known | None = None
) -> inbound.MessageDecision:
    return inbound.decide_message(
        "telegram", policy, "chat", m, known or inbound.Known(), "CODE1234"
    )


def test_an_allowed_dm_is_a_valid_message_command_keyed_by_the_platform_identity() -> None:
    d = decide(ChannelSettings(dm_policy="open"), msg())
    assert isinstance(d, inbound.Publish)
    command = COMMAND_ADAPTER.validate_python(d.command)
    assert command.type == "message" and d.session_id == "telegram-42"
    assert command.idempotency_key == "k-hi" and command.sender.id == "7"
    assert Chat.parse(command.chat_id) == DM


def test_a_stranger_gets_a_pairing_code_then_the_same_one_again() -> None:
    first = decide(ChannelSettings(), msg())
    assert isinstance(first, inbound.Pair) and first.new and first.code == "CODE1234"
    again = decide(ChannelSettings(), msg(), inbound.Known(open_code="OPEN5678"))
    assert isinstance(again, inbound.Pair) and not again.new and again.code == "OPEN5678"
    paired = decide(ChannelSettings(), msg(), inbound.Known(paired=True))
    assert isinstance(paired, inbound.Publish)


@pytest.mark.parametrize("policy", ["allowlist", "disabled"])
def test_allowlist_and_disabled_refuse_with_a_reply_not_a_turn(policy: str) -> None:
    d = decide(ChannelSettings(dm_policy=policy), msg())  # type: ignore[arg-type]
    assert isinstance(d, inbound.Reply) and d.chat == DM
    allowed = decide(ChannelSettings(dm_policy=policy, allow_from=["7"]), msg())  # type: ignore[arg-type]
    assert isinstance(allowed, inbound.Reply if policy == "disabled" else inbound.Publish)


def test_groups_need_the_allowlist_and_a_mention() -> None:
    policy = ChannelSettings(groups=["-100"])
    assert isinstance(decide(policy, msg(chat=GROUP)), inbound.Ignore)
    assert isinstance(decide(policy, msg(chat=GROUP, mentions_bot=True)), inbound.Publish)
    other = Chat("-200", private=False)
    assert isinstance(decide(policy, msg(chat=other, mentions_bot=True)), inbound.Ignore)
    loose = ChannelSettings(groups=["*"], require_mention=False)
    assert isinstance(decide(loose, msg(chat=other)), inbound.Publish)


def test_bots_are_ignored_unless_their_chat_takes_them_and_self_always() -> None:
    policy = ChannelSettings(dm_policy="open")
    assert isinstance(decide(policy, msg(from_bot=True)), inbound.Ignore)
    assert isinstance(decide(policy, msg(from_self=True)), inbound.Ignore)
    takes = ChannelSettings(dm_policy="open", bot_chats=["42"])
    d = decide(takes, msg(from_bot=True))
    assert isinstance(d, inbound.Publish) and d.command["sender"]["kind"] == "agent"
    assert isinstance(decide(takes, msg(from_self=True, from_bot=True)), inbound.Ignore)


def test_stop_interrupts_and_new_moves_to_the_next_generation() -> None:
    policy = ChannelSettings(dm_policy="open")
    stop = decide(policy, msg("/stop"), inbound.Known(generation=2))
    assert isinstance(stop, inbound.Publish) and stop.session_id == "telegram-42-g2"
    assert COMMAND_ADAPTER.validate_python(stop.command).type == "interrupt"
    new = decide(policy, msg("/new"), inbound.Known(generation=2))
    assert new == inbound.NewSession(DM, "telegram-42", 3)


def test_session_scopes() -> None:
    chat = Chat("-100", private=False, topic="5", thread="17.5")
    assert inbound.base_session("slack", "thread", chat, "U1") == "slack--100-5-17_5"
    assert inbound.base_session("telegram", "chat", chat, "U1") == "telegram--100-5"
    assert inbound.base_session("telegram", "user", chat, "U1") == "telegram-u-U1"
    assert inbound.owns("telegram", "telegram--100-5") and not inbound.owns("telegram", "slack-1")
    assert not inbound.owns("telegram", "telegram-42:sub-0a1b2c3d4e5f"), "a sub-turn's child"


def test_only_the_sender_or_an_approver_may_press() -> None:
    press = Press("p1", DM, "8", "Bob", "i-1", "approve", "cb")
    owner = inbound.PromptOwner("telegram-42", "7")
    refused = inbound.decide_press(ChannelSettings(), press, owner)
    assert isinstance(refused, inbound.RefusePress)
    taken = inbound.decide_press(ChannelSettings(approvers=["8"]), press, owner)
    assert isinstance(taken, inbound.AnswerPress)
    answer = COMMAND_ADAPTER.validate_python(taken.publish.command)
    assert answer.type == "answer" and answer.idempotency_key == "answer-i-1"
    assert Chat.parse(answer.chat_id) == DM
    assert isinstance(inbound.decide_press(ChannelSettings(), press, None), inbound.RefusePress)


def test_the_pairing_book_expires_and_settles_codes() -> None:
    book = Book().with_request(Request("AAAA2222", "7", "Ann", DM.token(), 100.0), now=0)
    assert book.code_of("7", 50) == "AAAA2222" and book.code_of("7", 100) is None
    assert book.find("aaaa2222", 50) is not None
    assert book.without("AAAA2222", 50).open(50) == ()
    assert Book.of_json(book.as_json()) == book


PACING = outbound.Pacing(text_limit=100, stream_interval_s=1.0, typing_every_s=4.0)


def test_a_turn_types_streams_throttled_and_ends_with_the_reply_split() -> None:
    views: outbound.Views = {}
    views, fx = outbound.decide_outbound(views, outbound.Started("s", "t", DM, "7"), 0.0, PACING)
    assert fx == [outbound.Track("s", "t", DM, "7"), outbound.Typing(DM)]
    views, fx = outbound.decide_outbound(views, outbound.Delta("t", "Hel"), 0.1, PACING)
    assert fx == [outbound.Stream("t", DM, "Hel")]
    views, fx = outbound.decide_outbound(views, outbound.Delta("t", "lo"), 0.5, PACING)
    assert fx == []  # within the interval: held back
    views, fx = outbound.decide_outbound(views, outbound.Tick(), 1.2, PACING)
    assert fx == [outbound.Stream("t", DM, "Hello")]
    views, fx = outbound.decide_outbound(views, outbound.Tick(), 4.1, PACING)
    assert fx == [outbound.Typing(DM)]
    views, fx = outbound.decide_outbound(views, outbound.Activity("t", "🔧 ls"), 5.0, PACING)
    assert fx == [outbound.Stream("t", DM, "Hello\n\n🔧 ls")]
    reply = "word " * 50
    views, fx = outbound.decide_outbound(views, outbound.Ended("s", "t", DM, reply), 6, PACING)
    assert views == {}
    assert len(fx) == 1 and isinstance(fx[0], outbound.Final)
    assert len(fx[0].parts) == 3 and all(len(p) <= 100 for p in fx[0].parts)
    assert " ".join(fx[0].parts).split() == reply.split()


def test_a_prompt_has_approve_and_deny_buttons() -> None:
    asked = outbound.Asked("s", "t", DM, "i-1", "Approval needed")
    _, fx = outbound.decide_outbound({}, asked, 0, PACING)
    assert len(fx) == 1 and isinstance(fx[0], outbound.Prompt)
    assert [(b.decision, b.interaction_id) for b in fx[0].buttons] == [
        ("approve", "i-1"),
        ("deny", "i-1"),
    ]


def test_split_text_keeps_code_fences_balanced_and_loses_nothing() -> None:
    text = "intro\n```\n" + "\n".join(f"line {i}" for i in range(200)) + "\n```\nend"
    parts = split_text(text, 300)
    assert all(len(p) <= 300 for p in parts)
    assert all(p.count("```") % 2 == 0 for p in parts)
    assert split_text("x" * 1000, 4096) == ["x" * 1000]
    assert "".join(split_text("y" * 9000, 4096)) == "y" * 9000


def test_a_tool_call_is_one_short_line() -> None:
    line = tool_line("write_file", {"path": "a.txt", "content": "x" * 500})
    assert line.startswith("🔧 write_file path=a.txt") and len(line) <= 80


def test_up_starts_a_channel_whose_token_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    from turnstream.cli.up import channel_services
    from turnstream.settings import Settings

    monkeypatch.delenv("TURNSTREAM_TELEGRAM_BOT_TOKEN", raising=False)
    monkeypatch.delenv("TURNSTREAM_SLACK_BOT_TOKEN", raising=False)
    assert channel_services(Settings()) == []
    monkeypatch.setenv("TURNSTREAM_TELEGRAM_BOT_TOKEN", "123:abc")
    assert channel_services(Settings()) == ["channels.telegram"]
    assert "123:abc" in Settings().log_secrets(), "the token is redacted from log lines"


def test_channel_policies_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from turnstream.settings import Settings

    monkeypatch.setenv("TURNSTREAM_TELEGRAM__DM_POLICY", "open")
    monkeypatch.setenv("TURNSTREAM_TELEGRAM__GROUPS", '["-100"]')
    settings = Settings()
    assert settings.channel("telegram").dm_policy == "open"
    assert settings.channel("telegram").groups == ["-100"]
    assert settings.channel("slack").dm_policy == "pairing"


def test_a_turn_taken_up_after_a_restart_types_but_does_not_stream_from_its_middle() -> None:
    views, fx = outbound.decide_outbound({}, outbound.Resumed("s", "t", DM), 0.0, PACING)
    assert fx == [outbound.Typing(DM)]
    views, fx = outbound.decide_outbound(views, outbound.Delta("t", "middle"), 2.0, PACING)
    assert fx == []
    views, fx = outbound.decide_outbound(views, outbound.Tick(), 4.5, PACING)
    assert fx == [outbound.Typing(DM)]
    _, fx = outbound.decide_outbound(views, outbound.Ended("s", "t", DM, "all of it"), 5, PACING)
    assert fx == [outbound.Final("t", DM, ("all of it",))]


def test_the_stop_button_interrupts_once_and_only_for_the_sender() -> None:
    press = Press("p2", GROUP, "7", "Ann", "turn-1", "stop", "cb")
    owner = inbound.PromptOwner("telegram--100", "7")
    taken = inbound.decide_press(ChannelSettings(), press, owner)
    assert isinstance(taken, inbound.AnswerPress)
    stop = COMMAND_ADAPTER.validate_python(taken.publish.command)
    assert stop.type == "interrupt" and stop.idempotency_key == "stop-turn-1"
    stranger = Press("p3", GROUP, "8", "Bob", "turn-1", "stop", "cb")
    assert isinstance(inbound.decide_press(ChannelSettings(), stranger, owner), inbound.RefusePress)


def test_a_stopped_turn_keeps_what_was_streamed() -> None:
    views, _ = outbound.decide_outbound({}, outbound.Started("s", "t", GROUP, "7"), 0, PACING)
    views, _ = outbound.decide_outbound(views, outbound.Delta("t", "half a"), 1, PACING)
    ended = outbound.Ended("s", "t", GROUP, "Stopped.", interrupted=True)
    _, fx = outbound.decide_outbound(views, ended, 2, PACING)
    assert fx == [outbound.Final("t", GROUP, ("half a\n\n⏹ Stopped.",))]


@given(
    text=st.text(alphabet=st.sampled_from("ab `\n#*"), max_size=3000),
    limit=st.integers(min_value=16, max_value=500),
)
def test_split_text_loses_nothing_but_spaces_at_its_cuts(text: str, limit: int) -> None:
    """Every part within the limit; every character but the whitespace at a cut kept, in
    order (fences closed and reopened at a cut aside)."""
    parts = split_text(text, limit)
    assert all(len(p) <= limit for p in parts)

    def bare(s: str) -> str:
        return "".join(s.replace("```", "").split())

    assert bare("".join(parts)) == bare(text)


def test_up_names_a_channel_it_cannot_run_and_what_installs_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rich.console import Console

    from turnstream.cli import up
    from turnstream.settings import Settings

    monkeypatch.setenv("TURNSTREAM_TELEGRAM_BOT_TOKEN", "123:abc")
    missing = ("TURNSTREAM_TELEGRAM_BOT_TOKEN", "no_such_sdk_here", "turnstream[telegram]")
    monkeypatch.setitem(up.CHANNELS, "channels.telegram", missing)
    console = Console(record=True, width=200)
    assert up.channel_services(Settings(), console) == []
    assert "pip install 'turnstream[telegram]'" in console.export_text()


def test_files_go_with_the_command_and_a_type_or_size_not_taken_is_a_reply() -> None:
    from turnstream.channels.platform import File
    from turnstream.core.commands import AttachmentPolicy

    policy = AttachmentPolicy(max_bytes=1000)
    png = File("a.png", "image/png", 10, "ref-a")

    def with_files(*files: File, text: str = "") -> inbound.MessageDecision:
        m = Incoming("k", DM, "7", "Ann", text, files=files)
        return inbound.decide_message(
            "telegram", ChannelSettings(dm_policy="open"), "chat", m, inbound.Known(), "C", policy
        )

    taken = with_files(png)
    assert isinstance(taken, inbound.Publish) and taken.files == (png,)
    assert taken.command["text"] == "[a.png]"
    exe = with_files(png, File("x.exe", "application/x-msdownload", 2, "r"), text="see")
    assert isinstance(exe, inbound.Reply) and "x.exe" in exe.text and "not taken" in exe.text
    big = with_files(File("b.pdf", "application/pdf", 1001, "r"))
    assert isinstance(big, inbound.Reply) and "over the limit of 1000" in big.text
    many = with_files(*[png] * 11)
    assert isinstance(many, inbound.Reply) and "at most 10" in many.text
    unknown_size = with_files(File("c.pdf", "application/pdf", None, "r"))
    assert isinstance(unknown_size, inbound.Publish), "checked once fetched"
    assert isinstance(with_files(), inbound.Ignore), "no text, no file: nothing to send"
