"""Who may do what: the users of ops/accounts.conf that hold a right the server refused a
command, so its error names the role to use instead of leaving a person to read the file."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from turnstream.bus.permissions import PermissionDenied

PEOPLE = ("admin", "approver", "operator", "client")
"""The roles a person connects as (ops/README.md, "People"), named before any other."""
ROLE_OF = {
    "admin": "the admin",
    "approver": "the approver",
    "operator": "the setup operator",
    "client": "a client",
}


@cache
def rights(accounts: Path) -> dict[str, dict[str, tuple[str, ...]]]:
    """Each user's `publish` and `subscription` allow lists in an accounts file ({} when
    it cannot be read: an installed package has no ops/)."""
    try:
        text = accounts.read_text()
    except OSError:
        return {}
    found: dict[str, dict[str, tuple[str, ...]]] = {}
    for block in re.split(r"\n\s*\{ user: ", text)[1:]:
        user = block.split(",", 1)[0].strip()
        body = re.sub(r"#[^\n]*", "", block)
        publish_part, _, subscribe_part = body.partition("subscribe:")
        found[user] = {
            "publish": tuple(re.findall(r'"([^"]+)"', publish_part.partition("publish:")[2])),
            "subscription": tuple(re.findall(r'"([^"]+)"', subscribe_part.split("}")[0])),
        }
    return found


def matches(pattern: str, subject: str) -> bool:
    """Whether the NATS subject `pattern` (`*` one token, `>` the rest) covers `subject`,
    a subject or itself a pattern (a subscription's); case-insensitive, as the server's
    refusal comes in lower case."""
    want, have = pattern.lower().split("."), subject.lower().split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have) or (token != "*" and token != have[i]):
            return False
    return len(want) == len(have)


def holders(action: str, subject: str, accounts: Path | None = None) -> list[str]:
    """The users that may `action` (publish, subscription) `subject`, people first."""
    from turnstream.cli.secure import ACCOUNTS

    granted = rights(accounts or ACCOUNTS)
    users = [u for u, r in granted.items() if any(matches(p, subject) for p in r[action])]
    return sorted(users, key=lambda u: (u not in PEOPLE, PEOPLE.index(u) if u in PEOPLE else 0))


def explain(denied: PermissionDenied, accounts: Path | None = None) -> str:
    """The refusal in a person's words: who was refused what, and who may do it."""
    verb = "publish to" if denied.action == "publish" else "subscribe to"
    who = f"NATS user {denied.user!r}" if denied.user else "this NATS connection (no user)"
    said = f"{who} may not {verb} {denied.subject} (refused by the server)"
    users = holders(denied.action, denied.subject, accounts)
    people = [u for u in users if u in PEOPLE]
    if people:
        names = " or ".join(f"{ROLE_OF[u]} (`{u}`)" for u in people)
        return (
            f"{said}; in ops/accounts.conf that is for {names}: connect as "
            f'TURNSTREAM_NATS_USER={people[0]} (ops/README.md, "People")'
        )
    if users:
        return f"{said}; in ops/accounts.conf only {', '.join(users)} may, no person's role"
    return f"{said}; no user of ops/accounts.conf may"
