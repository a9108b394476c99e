"""The audit file's hash chain: one JSON line per log event, each sealed with a hash.

A line is the record's JSON with a last field `hash`, the sha256 of the line's bytes
before that field (closed with `}`); the record's `prev` is the previous line's hash, the
first line's is `GENESIS`. So an edit anywhere in a line breaks that line's own hash, and
a deleted, inserted or moved line breaks the next `prev`. What a chain alone cannot show
is lines cut off the end: keep the head (`Verdict.head`, printed by `audit verify`)
with one kept elsewhere, or the last sequence with the log's.

    {"seq":7,"id":"…","type":"TurnEnded","time":"…","sessionId":"s1","turnId":"…",
     "sha256":"<of the event's bytes in the log>","prev":"<hash of line 6>","hash":"…"}
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import orjson

GENESIS = "0" * 64
"""The `prev` of the first record."""
_sha256 = hashlib.sha256
_SEAL = re.compile(rb',"hash":"([0-9a-f]{64})"\}$')


def seal(record: dict[str, object]) -> tuple[bytes, str]:
    """The line (without newline) for `record`, and its hash."""
    body = orjson.dumps(record)
    digest = hashlib.sha256(body).hexdigest()
    return body[:-1] + b',"hash":"' + digest.encode() + b'"}', digest


class Recorded(Protocol):
    """What a line takes from an event: a decoded `EventBase`, or the envelope alone
    (`fold.Head`) of one the audit does not decode."""

    @property
    def id(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def time(self) -> datetime: ...
    @property
    def session_id(self) -> str: ...
    @property
    def turn_id(self) -> str | None: ...


def record_line(prev: str, seq: int, event: Recorded, raw: bytes) -> tuple[bytes, str]:
    """The sealed line recording the log event at `seq` (`raw` = its bytes in the log)."""
    body = orjson.dumps(
        {
            "seq": seq,
            "id": event.id,
            "type": event.type,
            "time": event.time,
            "sessionId": event.session_id,
            "turnId": event.turn_id,
            "sha256": _sha256(raw).hexdigest(),
            "prev": prev,
        }
    )
    digest = _sha256(body).hexdigest()  # `seal`'s, without its frame: a line per event
    return b'%b,"hash":"%b"}' % (body[:-1], digest.encode()), digest


def raw_record_line(prev: str, seq: int, subject: str, raw: bytes) -> tuple[bytes, str]:
    """The sealed line for a log message that is not a valid event (it is still recorded)."""
    record = {
        "seq": seq,
        "subject": subject,
        "undecodable": True,
        "sha256": hashlib.sha256(raw).hexdigest(),
        "prev": prev,
    }
    return seal(record)


@dataclass(frozen=True, slots=True)
class Verdict:
    records: int
    """Good lines before the first bad one (all of them when `ok`)."""
    head: str
    """Hash of the last good line (`GENESIS` for none)."""
    last_seq: int
    bad_line: int | None = None
    """1-based number of the first bad line."""
    reason: str | None = None
    head_line: int | None = None
    """With `verify(..., head=H)`: the line whose hash is H (the file still holds it)."""

    @property
    def ok(self) -> bool:
        return self.bad_line is None


def unseal(line: bytes) -> tuple[dict[str, object], str]:
    """The record of a sealed line and its hash; ValueError when the seal is broken."""
    match = _SEAL.search(line)
    if match is None:
        raise ValueError("no hash at the end of the line")
    body = line[: match.start()] + b"}"
    digest = match.group(1).decode()
    if hashlib.sha256(body).hexdigest() != digest:
        raise ValueError("the line does not match its hash (edited)")
    try:
        record = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    return record, digest


def verify(lines: Iterable[bytes], head: str | None = None) -> Verdict:
    """Check every line's seal, the chain of `prev` hashes and increasing sequences; with
    `head` (a hash kept elsewhere earlier), also find the line that has it."""
    wanted, found = head, None
    head, last_seq, count = GENESIS, 0, 0
    for number, line in enumerate(lines, 1):
        try:
            record, digest = unseal(line.rstrip(b"\r\n"))
        except ValueError as exc:
            return Verdict(count, head, last_seq, number, str(exc))
        if record.get("prev") != head:
            reason = (
                "its prev hash is not the hash of the line before "
                "(a line was deleted, inserted or moved here)"
                if number > 1
                else "the first line does not start the chain (lines were removed before it)"
            )
            return Verdict(count, head, last_seq, number, reason)
        seq = record.get("seq")
        if not isinstance(seq, int) or seq <= last_seq:
            return Verdict(count, head, last_seq, number, f"seq {seq!r} after {last_seq}")
        head, last_seq, count = digest, seq, count + 1
        if digest == wanted:
            found = number
    return Verdict(count, head, last_seq, head_line=found)
