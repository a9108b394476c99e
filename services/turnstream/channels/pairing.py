"""Pairing, pure: the book of open codes. A stranger's direct message (DM policy `pairing`)
gets a one-time code that expires; the owner approves it (`turnstream channels pairing
approve CODE`), which pairs the sender, or denies it. The book is one KV entry, changed
by compare-and-set (`channels.records`); a paired sender is an entry of its own."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace
from typing import Any

ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
"""No 0/O, 1/I: a code is read aloud and typed."""
CODE_LENGTH = 8


def new_code() -> str:
    """A fresh code (~40 bits of randomness, one sender's to use once)."""
    return "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))


@dataclass(frozen=True)
class Request:
    """One open code: who asked, where, until when."""

    code: str
    user: str
    user_name: str
    chat: str
    """The chat token (`Chat.token`) the code was given in."""
    expires: float
    """Epoch seconds."""

    def as_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "user": self.user,
            "userName": self.user_name,
            "chat": self.chat,
            "expires": self.expires,
        }

    @classmethod
    def of_json(cls, value: dict[str, Any]) -> Request:
        return cls(value["code"], value["user"], value["userName"], value["chat"], value["expires"])


@dataclass(frozen=True)
class Book:
    """The open codes, by code."""

    requests: tuple[Request, ...] = ()

    def open(self, now: float) -> tuple[Request, ...]:
        """The codes not expired at `now`."""
        return tuple(r for r in self.requests if r.expires > now)

    def code_of(self, user: str, now: float) -> str | None:
        """The open code `user` was given, if any."""
        return next((r.code for r in self.open(now) if r.user == user), None)

    def find(self, code: str, now: float) -> Request | None:
        code = code.strip().upper()
        return next((r for r in self.open(now) if r.code == code), None)

    def with_request(self, request: Request, now: float) -> Book:
        """This book with `request` added, and the expired codes gone."""
        return replace(self, requests=(*self.open(now), request))

    def without(self, code: str, now: float) -> Book:
        """This book with `code` gone (approved or denied), and the expired codes gone."""
        return replace(self, requests=tuple(r for r in self.open(now) if r.code != code))

    def as_json(self) -> dict[str, Any]:
        return {"requests": [r.as_json() for r in self.requests]}

    @classmethod
    def of_json(cls, value: dict[str, Any]) -> Book:
        return cls(tuple(Request.of_json(r) for r in value.get("requests", [])))
