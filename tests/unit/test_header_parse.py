"""bus/headers.parse_header_lines gives exactly what nats-py's own header parse gives."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nats.aio.client import Client

from turnstream.bus import headers
from turnstream.bus.headers import (
    LIBRARY_HEADER_PARSE,
    _checked_library_parse,
    install_header_parse,
    parse_header_lines,
)


def library() -> Callable[[bytes], dict[str, str]]:
    assert LIBRARY_HEADER_PARSE is not None, "nats-py's parse is not the one we copy"
    return LIBRARY_HEADER_PARSE


@pytest.fixture(autouse=True)
def no_names_known() -> Iterator[None]:
    """Each test starts with no header name remembered (and leaves none behind)."""
    headers._HEADER_NAMES.clear()
    yield
    headers._HEADER_NAMES.clear()


def same_as_library(raw: bytes) -> None:
    expected = library()(raw)
    assert parse_header_lines(raw) == expected  # the names not known yet
    assert parse_header_lines(raw) == expected  # and now remembered
    assert list(parse_header_lines(raw)) == list(expected)  # in the same order


CRAFTED = [
    b"",
    b"\r\n",
    b"\r\n\r\n",
    b"Nats-Msg-Id: 0192f2b4-3c2a-7cc1-9c1a-6f3e2d1c0b9a\r\n\r\n",
    b"Nats-Msg-Id: a\r\nNats-Expected-Last-Subject-Sequence: 12\r\n\r\n",
    b"Name:Value\r\n",
    b"Name:\tValue\t\r\n",
    b"  Name  :  Value  \r\n",
    b"\tName\t: Value\r\n",
    b": empty name\r\n",
    b":\r\n",
    b"Name:\r\n",
    b"Name: \r\n",
    b"no colon at all\r\n",
    b"no colon\r\nName: after\r\n",
    b"bad name: x\r\n",
    b"bad\tname: x\r\n",
    *(b"a" + bytes([c]) + b"b: x\r\n" for c in (0x09, 0x0B, 0x0C, 0x1C, 0x1D, 0x1E, 0x1F)),
    *(bytes([c]) + b"ab: x\r\n" for c in (0x0B, 0x0C, 0x1C, 0x1D, 0x1E, 0x1F, 0x00, 0x7F)),
    b"a\nb: x\r\n",
    b"a\rb: x\r\n",
    b"Name: a\rb\nc\r\n",
    b"Name: one\r\nName: two\r\n",
    b"\xc3\xa9t\xc3\xa9: summer\r\n",
    b"N\x80: x\r\nOk: y\r\n",
    b"Name: \xc3\xa9t\xc3\xa9\r\n",
    b"Name: \xff\xfe\xfd\r\n",
    b"Name: \xc3\r\n",
    b"Name: a: b: c\r\n",
    b"Name: v\r\n\r\n\r\n\r\n",
    b"Name: v",
    b"A: 1\r\nB: 2\r\nA: 3",
    b"Idle Heartbeat\r\nNats-Last-Consumer: 1016\r\nNats-Last-Stream: 1024\r\n\r\n",
    b"Status: 404\r\nDescription: No Messages\r\n\r\n",
    b"\x00: nul\r\n",
    b"Name\x00: nul\r\n",
    b"Name: \x00\r\n",
    b"Name: \x85 \xa0\r\n",
    "Name: \u00a0x\u3000\r\n".encode(),
]


@pytest.mark.parametrize("raw", CRAFTED)
def test_crafted_blocks_parse_as_the_library_parses_them(raw: bytes) -> None:
    same_as_library(raw)


INTERESTING = st.sampled_from(
    [
        *(b"\r\n", b":", b": ", b"\r", b"\n", b" ", b"\t", b"\x0b", b"\x0c", b"\x1c", b"\x1f"),
        *(b"\x00", b"\x7f", b"\x80", b"\xc3\xa9", b"\xff", b"Nats-Msg-Id", b"a", b"Z", b"-"),
    ]
)


@settings(max_examples=600, deadline=None)
@given(st.lists(st.one_of(INTERESTING, st.binary(max_size=4)), max_size=24).map(b"".join))
def test_any_block_parses_as_the_library_parses_it(raw: bytes) -> None:
    same_as_library(raw)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(max_size=8).map(str.encode) | st.binary(max_size=8),
            st.sampled_from([b":", b": ", b" : ", b":\t", b""]),
            st.text(max_size=8).map(str.encode) | st.binary(max_size=8),
        ),
        max_size=6,
    )
)
def test_header_lines_parse_as_the_library_parses_them(
    lines: list[tuple[bytes, bytes, bytes]],
) -> None:
    same_as_library(b"\r\n".join(b"".join(line) for line in lines) + b"\r\n\r\n")


def test_names_past_the_limit_are_parsed_without_being_remembered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(headers, "_HEADER_NAMES_MAX", 2)
    raw = b"A: 1\r\nB: 2\r\nC: 3\r\nD\x1c: 4\r\n"
    same_as_library(raw)
    assert headers._HEADER_NAMES == {b"A": "A", b"B": "B"}


def test_installed_for_every_client() -> None:
    assert install_header_parse()
    assert install_header_parse()  # again: nothing changes
    assert Client._parse_header_lines is parse_header_lines


@pytest.mark.parametrize(
    "changed",
    [
        lambda raw: {},  # a plain function (a method), not a static one
        staticmethod(lambda raw, strict: {}),  # another shape
        staticmethod(lambda raw: {}),  # the same shape, other results
        staticmethod(lambda raw: raw.no_such_thing),  # raises
    ],
)
def test_a_library_parse_other_than_the_one_we_copy_is_kept(
    monkeypatch: pytest.MonkeyPatch, changed: object
) -> None:
    monkeypatch.setattr(Client, "_parse_header_lines", changed)
    assert _checked_library_parse() is None


def test_no_library_parse_at_all_is_kept_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(Client, "_parse_header_lines")
    assert _checked_library_parse() is None
