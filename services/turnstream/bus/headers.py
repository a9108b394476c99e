"""The one place that swaps a nats-py internal for a faster one: the parse of a message's
header lines (`parse_header_lines`), which every delivery to every service pays,
installed by `connect` (`install_header_parse`); `bus.raw` parses a raw delivery's
headers with it too."""

from __future__ import annotations

import inspect
from collections.abc import Callable

from nats.aio.client import Client

_HEADER_NAMES: dict[bytes, str] = {}
"""Header name bytes as they come (before the strip) -> the key they give; names the
library skips are not kept. Services see a handful of names, so a lookup replaces the
strip, the decode and the per-character whitespace scan of nearly every line."""
_HEADER_NAMES_MAX = 1024
"""Names remembered at most (a peer sending ever new names cannot grow it further)."""


def _header_name(name: bytes) -> str | None:
    """The key of a header line's name part, None when nats-py 2.16 skips the line."""
    try:
        key = name.strip().decode("ascii")
    except UnicodeDecodeError:
        return None
    if any(c.isspace() for c in key):  # str.isspace: also \x1c-\x1f, which bytes' is not
        return None
    return key


def parse_header_lines(raw: bytes) -> dict[str, str]:
    """What nats-py 2.16's `Client._parse_header_lines` returns for `raw`, cheaper: a known
    name costs a dict lookup instead of the strip, decode and a generator over its
    characters (`tests/unit/test_header_parse.py` holds it to the library's results)."""
    out: dict[str, str] = {}
    names = _HEADER_NAMES
    for line in raw.split(b"\r\n"):
        name, colon, value = line.partition(b":")
        if not colon:
            continue
        key = names.get(name)
        if key is None:
            key = _header_name(name)
            if key is None:
                continue
            if len(names) < _HEADER_NAMES_MAX:
                names[name] = key
        out[key] = value.strip().decode("utf-8", "replace")
    return out


_HEADER_SAMPLES = (
    b"Nats-Msg-Id: a\r\nName:Value\r\n\r\n",
    b"bad name: x\r\nno colon\r\n\xc3\xa9: y\r\n:empty\r\nv: \xff\xfe \r\n",
    b"a\x1cb: x\r\n\ta\t: \tz\t\r\nA: 1\r\nA: 2",
)


def _checked_library_parse() -> Callable[[bytes], dict[str, str]] | None:
    """nats-py's own header-line parse, when it is the one `parse_header_lines` copies:
    a static method of `Client` taking `raw` that gives what ours gives on samples that
    take each of its branches; None for any other nats-py."""
    attribute = Client.__dict__.get("_parse_header_lines")
    if not isinstance(attribute, staticmethod):
        return None
    function: Callable[[bytes], dict[str, str]] = attribute.__func__
    try:
        if list(inspect.signature(function).parameters) != ["raw"]:
            return None
        if any(function(raw) != parse_header_lines(raw) for raw in _HEADER_SAMPLES):
            return None
    except Exception:  # whatever a changed library does with them: not the one we copy
        return None
    return function


LIBRARY_HEADER_PARSE = _checked_library_parse()
"""nats-py's parse as it was on import (before any install); None when it is not the one
`parse_header_lines` copies (then it is never replaced)."""


def install_header_parse() -> bool:
    """Have every nats-py client in this process parse header lines with
    `parse_header_lines` (installing again is a no-op); False, and the library's parse
    kept, when nats-py's is not the one it copies."""
    if LIBRARY_HEADER_PARSE is None:
        return False
    Client._parse_header_lines = staticmethod(parse_header_lines)  # type: ignore[method-assign]
    return True
