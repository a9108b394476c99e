"""API keys and tickets of the HTTP face (DESIGN §12).

Keys live in a YAML file (`TURNSTREAM_HTTP_KEYS_FILE`), hashed:

```yaml
keys:
  - name: web-chat
    key: "sha256:<hex of sha256(the key)>"
    scopes: [send, read]          # send · read · approve · admin (admin: all of them)
    sessions: "web-*"             # a glob over session ids; "*" for all
```

A request carries `Authorization: Bearer <key>`. A browser `EventSource` cannot set
headers, so it asks `POST /v1/tickets` for a short-lived ticket (HMAC-SHA256 over the key's
name, the session and an expiry) and opens the stream with `?ticket=`. The HMAC secret is
`TURNSTREAM_HTTP_TICKET_SECRET` (environment or secrets file); without it each process
makes its own, and a ticket works only on the replica that issued it.

Without a keys file every request is allowed, and only from loopback: the app refuses to
bind another address (`check_bind`). Keys and tickets are never logged or echoed: errors
name the key (`name`), never its value.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import hmac
import ipaddress
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import orjson
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from turnstream.core.events import FailureClass
from turnstream.http.problems import Problem

Scope = Literal["send", "read", "approve", "admin"]


class KeySpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=128)
    key: str
    """`sha256:<64 hex>`: the SHA-256 of the key, never the key itself."""
    scopes: tuple[Scope, ...] = Field(min_length=1)
    sessions: str = "*"

    @field_validator("key")
    @classmethod
    def _hashed(cls, value: str) -> str:
        algo, _, digest = value.partition(":")
        if algo != "sha256" or len(digest) != 64 or not _is_hex(digest):
            raise ValueError('must be "sha256:<64 hex digits>" (the hash, not the key)')
        return f"sha256:{digest.lower()}"


class KeysFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    keys: list[KeySpec] = Field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a key (by name), or anyone on loopback when there are no keys."""

    name: str
    scopes: frozenset[str]
    sessions: str = "*"

    def allows(self, scope: Scope, session_id: str | None = None) -> bool:
        if scope not in self.scopes and "admin" not in self.scopes:
            return False
        return session_id is None or fnmatch.fnmatchcase(session_id, self.sessions)

    def require(self, scope: Scope, session_id: str | None = None) -> None:
        if scope not in self.scopes and "admin" not in self.scopes:
            raise forbidden(f"key {self.name!r} lacks the {scope!r} scope")
        if session_id is not None and not fnmatch.fnmatchcase(session_id, self.sessions):
            raise forbidden(f"key {self.name!r} may not use session {session_id!r}")


LOOPBACK = Principal("loopback", frozenset(["admin"]))


def hash_key(key: str) -> str:
    """The keys-file form of a key: `sha256:<hex>`."""
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def load_keys(path: Path) -> list[KeySpec]:
    """The keys in `path`; `ValueError` saying what is wrong (never echoing a value)."""
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"cannot read the HTTP keys file {path}: {type(exc).__name__}") from exc
    try:
        keys = KeysFile.model_validate(raw).keys
    except ValidationError as exc:
        where = [".".join(str(p) for p in e["loc"]) + ": " + e["msg"] for e in exc.errors()]
        raise ValueError(f"HTTP keys file {path}: " + "; ".join(where)) from None
    names = [k.name for k in keys]
    if len(set(names)) != len(names):
        raise ValueError(f"HTTP keys file {path}: key names must be unique")
    return keys


class Authenticator:
    """Turns a request's credentials into a `Principal`, or a 401."""

    def __init__(self, keys: list[KeySpec] | None, ticket_secret: str | None = None) -> None:
        self.keys = keys
        self._by_hash = {k.key: k for k in keys or []}
        self._by_name = {k.name: k for k in keys or []}
        self._secret = (ticket_secret or secrets.token_hex(32)).encode()

    @property
    def open(self) -> bool:
        """No keys file: everyone on loopback may do everything."""
        return self.keys is None

    def principal(
        self, authorization: str | None, client_host: str | None, ticket: str | None = None
    ) -> Principal:
        if self.open:
            if not is_loopback(client_host):
                raise forbidden("this server has no keys file and answers loopback clients only")
            return LOOPBACK
        if authorization:
            scheme, _, value = authorization.partition(" ")
            if scheme.lower() != "bearer" or not value.strip():
                raise unauthenticated("send the key as `Authorization: Bearer <key>`")
            spec = self._by_hash.get(hash_key(value.strip()))
            if spec is None:
                raise unauthenticated("unknown API key")
            return Principal(spec.name, frozenset(spec.scopes), spec.sessions)
        if ticket:
            return self._from_ticket(ticket)
        raise unauthenticated("no API key: send `Authorization: Bearer <key>`")

    def issue_ticket(self, principal: Principal, session_id: str, ttl_s: float) -> tuple[str, int]:
        """A ticket for reading `session_id`'s stream, valid `ttl_s` seconds."""
        expires = int(time.time() + ttl_s)
        payload = _b64(orjson.dumps({"k": principal.name, "s": session_id, "e": expires}))
        return f"{payload}.{self._sign(payload)}", expires

    def _from_ticket(self, ticket: str) -> Principal:
        payload, _, signature = ticket.partition(".")
        if not hmac.compare_digest(self._sign(payload), signature):
            raise unauthenticated("invalid ticket")
        try:
            body = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        except ValueError:
            raise unauthenticated("invalid ticket") from None
        if body["e"] < time.time():
            raise unauthenticated("expired ticket: ask POST /v1/tickets for a new one")
        spec = self._by_name.get(body["k"])
        if spec is None:  # the key was removed since: its tickets die with it
            raise unauthenticated("the ticket's key no longer exists")
        if "read" not in spec.scopes and "admin" not in spec.scopes:
            raise forbidden(f"key {spec.name!r} lacks the 'read' scope")
        # a ticket reads one session's stream and nothing else
        return Principal(spec.name, frozenset(["read"]), body["s"])

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self._secret, payload.encode(), hashlib.sha256).digest())


def is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, has_keys: bool) -> None:
    """Refuse to serve a non-loopback address without a keys file."""
    if not has_keys and not is_loopback(host):
        raise ValueError(
            f"refusing to serve on {host} without API keys: set TURNSTREAM_HTTP_KEYS_FILE "
            "(see `turnstream http --help`) or bind a loopback address (127.0.0.1)"
        )


def unauthenticated(detail: str) -> Problem:
    return Problem(
        401,
        "unauthenticated",
        "Unauthenticated",
        detail,
        failure_class=FailureClass.POLICY_DENIED,
        headers={"WWW-Authenticate": 'Bearer realm="turnstream"'},
    )


def forbidden(detail: str) -> Problem:
    return Problem(403, "forbidden", "Forbidden", detail, failure_class=FailureClass.POLICY_DENIED)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _is_hex(value: str) -> bool:
    try:
        int(value, 16)
    except ValueError:
        return False
    return True
