"""`turnstream up --secure`: the embedded server with ops/accounts.conf, one NATS identity per
service, passwords in a development secrets file (DESIGN §3; ops/README.md)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.mapping import partitioned_accounts
from turnstream.core.subjects import Subjects
from turnstream.settings import DEV_SECRETS, SECURE_MARK, dev_password_variable

__all__ = [
    "CHANNEL_USERS",
    "DEV_SECRETS",
    "SECURE_MARK",
    "Passwords",
    "SecureServer",
    "dev_secrets",
    "passwords",
]

USERS = {
    "gateway": "gateway",
    "turn_runner": "turn-runner",
    "approval": "approval",
    "tool_executor": "tool-executor",
    "audit": "audit",
    "http": "http",
}
"""The NATS user each service runs as under `up --secure` (ops/accounts.conf)."""
CHANNEL_USERS = {
    "channels.telegram": "channel-telegram",
    "channels.slack": "channel-slack",
}
"""The NATS user each chat channel runs as (started by `up` when its token is set)."""
OTHER_USERS = ("client", "client-acme", "operator", "admin", "approver")
ACCOUNTS = Path(__file__).resolve().parents[3] / "ops" / "accounts.conf"


def password_variable(user: str) -> str:
    """The environment variable ops/accounts.conf reads the user's password from."""
    return dev_password_variable(user)


@dataclass(frozen=True)
class Passwords:
    """Every user's password for `up --secure`, and where each came from."""

    of: dict[str, str]
    from_environment: list[str]
    """Users whose `TS_<USER>_PASSWORD` was set (never written to the secrets file)."""
    generated: list[str]
    """Users whose password was made now, into the secrets file."""
    file: Path


def passwords(path: Path, environ: Mapping[str, str]) -> Passwords:
    """Each user's password: `TS_<USER>_PASSWORD` from `environ` when set, else the one in
    the development secrets file `path`, else one generated into it (readable by its owner
    only). `ValueError` for an environment value nats-server could not read as a config
    value (letters and digits only)."""
    wanted = [*USERS.values(), *CHANNEL_USERS.values(), *OTHER_USERS]
    known: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep:
                known[key.strip()] = value.strip()
    given = {u: environ[password_variable(u)] for u in wanted if environ.get(password_variable(u))}
    for user, value in given.items():
        if not value.isascii() or not value.isalnum():
            raise ValueError(
                f"{password_variable(user)} in the environment has characters other than "
                "letters and digits; nats-server reads it as a config value: choose another"
            )
    generated = [u for u in wanted if u not in given and password_variable(u) not in known]
    if generated:
        for user in generated:  # letters and digits: nats-server parses env values as config
            known[password_variable(user)] = "pw" + secrets.token_hex(16)
        path.write_text("".join(f"{k}={v}\n" for k, v in sorted(known.items())))
        path.chmod(0o600)
    of = {u: given.get(u) or known[password_variable(u)] for u in wanted}
    return Passwords(of, sorted(given), generated, path)


def dev_secrets(path: Path) -> dict[str, str]:
    """Every user's password from `path` (`TS_<USER>_PASSWORD=...` lines), generated on
    first use: a development secrets file, readable by its owner only."""
    return passwords(path, {}).of


class SecureServer(EmbeddedServer):
    """The embedded server with ops/accounts.conf (included, not copied) and its users'
    passwords from the development secrets file."""

    def __init__(
        self,
        store_dir: Path,
        port: int | None,
        passwords: dict[str, str],
        accounts: Path = ACCOUNTS,
        subjects: Subjects | None = None,
    ) -> None:
        super().__init__(
            store_dir, port, log_file=store_dir.parent / "nats-server.log", subjects=subjects
        )
        self.passwords = passwords
        self.accounts = accounts

    config_name = "nats-server-secure.conf"

    def account_config(self) -> str:
        """Include `accounts`; for a partitioned log, the file derived from it for N
        partitions (`bus.mapping.partitioned_accounts`), written next to the store."""
        accounts = self.accounts
        if self.subjects.partitioned:
            accounts = self.store_dir / f"accounts-{self.subjects.log_partitions}.conf"
            accounts.write_text(partitioned_accounts(self.accounts.read_text(), self.subjects))
        return f'include "{os.path.relpath(accounts, self.store_dir)}"\n'

    def environment(self) -> dict[str, str]:
        passwords = {password_variable(u): p for u, p in self.passwords.items()}
        return {**super().environment(), **passwords}

    def start(self, timeout: float = 10.0) -> EmbeddedServer:
        if not self.accounts.exists():
            raise RuntimeError(f"--secure needs {self.accounts} (run from a source checkout)")
        return super().start(timeout)
