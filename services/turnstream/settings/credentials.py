"""Secrets and NATS credentials: read from the environment, else a secrets file, and put
in a server URL (`Settings.secret`, `Settings.resolved_nats_url`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

DEV_SECRETS = "dev-secrets.env"
"""In the data dir: the passwords `turnstream up --secure` generated, `TS_<USER>_PASSWORD=`."""
SECURE_MARK = "nats.secure"
"""In the data dir, beside `nats.url`: the `up` running there is `--secure` (its server wants
a user: a command given none connects as `admin`, with the development secrets)."""
DEV_USER = "admin"


def dev_password_variable(user: str) -> str:
    """The environment variable ops/accounts.conf reads `user`'s password from."""
    return "TS_" + user.upper().replace("-", "_") + "_PASSWORD"


def read_secret(name: str, secrets_file: Path | None) -> str | None:
    """A secret from the environment, else from the secrets file."""
    if os.environ.get(name):
        return os.environ[name]
    if secrets_file is None:
        return None
    try:
        lines = secrets_file.read_text().splitlines()
    except OSError as exc:
        raise ValueError(
            f"cannot read the secrets file {secrets_file}: {exc} (check TURNSTREAM_SECRETS_FILE)"
        ) from exc
    for line in lines:
        key, sep, value = line.strip().partition("=")
        if sep and key.strip() == name:
            return value.strip().strip('"').strip("'")
    return None


def redacted_values(
    redact: Iterable[str], variables: Iterable[str], secrets_file: Path | None
) -> list[str]:
    """`redact`, the values of the environment's `variables`, and every value of the
    secrets file; longest first, those under 4 characters left (they would blank out
    ordinary text)."""
    values = list(redact)
    values += [os.environ[name] for name in variables if os.environ.get(name)]
    if secrets_file is not None and secrets_file.exists():
        for line in secrets_file.read_text().splitlines():
            key, sep, value = line.strip().partition("=")
            if sep and not key.startswith("#"):
                values.append(value.strip().strip('"').strip("'"))
    return sorted({v for v in values if len(v) >= 4}, key=len, reverse=True)


def with_user(url: str, user: str, password: str | None) -> str:
    """`user:password@` put in each server of `url` that has no credentials."""
    if password is None:
        raise ValueError(
            f"TURNSTREAM_NATS_USER is {user!r} but no TURNSTREAM_NATS_PASSWORD: "
            "set it in the environment or the secrets file (TURNSTREAM_SECRETS_FILE)"
        )
    if any(c in password + user for c in "/,#?@ "):
        # nats-py reads credentials from the URL as they are (no %-decoding)
        raise ValueError(
            f"the NATS password of {user!r} (or the user name) has one of "
            "/ , # ? @ or a space: use letters and digits (`turnstream up --secure` does)"
        )
    userinfo = f"{user}:{password}@"
    servers = []
    for server in url.split(","):
        scheme, sep, rest = server.strip().rpartition("://")
        if "@" not in rest:
            rest = userinfo + rest
        servers.append(f"{scheme}{sep}{rest}")
    return ",".join(servers)


def dev_password(user: str, data_dir: Path) -> str:
    """`user`'s password on the server of a `turnstream up --secure` on `data_dir`: from
    `TS_<USER>_PASSWORD`, else the development secrets file `up` wrote."""
    variable = dev_password_variable(user)
    password = os.environ.get(variable)
    secrets_file = data_dir / DEV_SECRETS
    if password is None and secrets_file.exists():
        for line in secrets_file.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() == variable:
                password = value.strip()
    if password is None:
        raise ValueError(
            f"the server `turnstream up --secure` runs here wants a user: no password of "
            f"{user!r} in TURNSTREAM_NATS_PASSWORD, {variable} or {secrets_file}"
        )
    return password


def nats_url(
    explicit: str | None,
    url_file: Path,
    user: str | None,
    secret: Callable[[str], str | None],
) -> str:
    """The server to talk to: `explicit`, else the one a running `turnstream up` wrote to
    `url_file`; with a `user`, its credentials (the secret `TURNSTREAM_NATS_PASSWORD`) are
    put in each server URL that has none. The server of an `up --secure` wants a user even
    without one: `admin` (`DEV_USER`), with its development password (`dev_password`)."""
    if explicit:
        return _as_user(explicit, user, secret)
    if not url_file.exists():
        raise RuntimeError(
            f"no NATS server: set TURNSTREAM_NATS_URL, pass --nats-url, or start "
            f"`turnstream up` first (it writes {url_file})"
        )
    url = url_file.read_text().strip()
    if not (url_file.parent / SECURE_MARK).exists():
        return _as_user(url, user, secret)
    password = secret("TURNSTREAM_NATS_PASSWORD") if user else None
    password = password or dev_password(user or DEV_USER, url_file.parent)
    return with_user(url, user or DEV_USER, password or secret("TURNSTREAM_NATS_PASSWORD"))


def _as_user(url: str, user: str | None, secret: Callable[[str], str | None]) -> str:
    return url if not user else with_user(url, user, secret("TURNSTREAM_NATS_PASSWORD"))
