"""`turnstream up`: an embedded nats-server plus every service as its own process."""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import subprocess
import sys
import time
from importlib.util import find_spec
from pathlib import Path
from typing import IO

from rich.console import Console
from rich.markup import escape

from turnstream.bus.embedded import EmbeddedServer, free_port, port_is_free
from turnstream.cli.common import command_name
from turnstream.cli.secure import (
    CHANNEL_USERS,
    DEV_SECRETS,
    SECURE_MARK,
    USERS,
    Passwords,
    SecureServer,
)
from turnstream.cli.secure import passwords as load_passwords
from turnstream.providers import api_key
from turnstream.runtime import apply_streams
from turnstream.settings import Settings

SERVICES = ("gateway", "turn_runner", "approval", "tool_executor", "audit", "http")
"""Service packages started by `up`, each as `python -m turnstream.<name>`."""
CHANNELS = {
    "channels.telegram": ("TURNSTREAM_TELEGRAM_BOT_TOKEN", "telegram", "turnstream[telegram]"),
    "channels.slack": ("TURNSTREAM_SLACK_BOT_TOKEN", "slack_bolt", "turnstream[slack]"),
}
"""Chat channels `up` also starts, each when its token is set (docs/channels.md): its
token, the SDK it runs on, the extra that installs it."""


def channel_services(settings: Settings, console: Console | None = None) -> list[str]:
    """The chat channels whose token is set (environment or secrets file) and which can
    run here; one whose module or SDK is missing is named, with what installs it."""
    found = []
    for name, (token, sdk, extra) in CHANNELS.items():
        if not settings.secret(token):
            continue
        if find_spec(f"turnstream.{name}") is None or find_spec(sdk) is None:
            if console is not None:
                console.print(
                    f"[yellow]{token} is set but {name} cannot run here[/]: "
                    f"pip install '{escape(extra)}'"
                )
            continue
        found.append(name)
    return found


MAX_RESTARTS = 5
LOCK_FILE = "up.lock"
"""In the data dir: held (flock) by the one `up` that runs on it."""
PORT_FILE = "nats.port"
"""In the data dir: the embedded server's last port, reused when free."""


class Supervisor:
    """Starts the services, restarts one that dies (a few times), stops all on exit."""

    def __init__(
        self,
        url: str,
        settings: Settings,
        console: Console,
        passwords: dict[str, str] | None = None,
    ) -> None:
        self.url = url
        self.settings = settings
        self.console = console
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.passwords = passwords
        """Under --secure: each user's password (each service runs as its own user)."""
        self.services = [
            s
            for s in (*SERVICES, *channel_services(settings, console))
            if passwords is None or s in USERS or s in CHANNEL_USERS
        ]
        self.restarts: dict[str, int] = dict.fromkeys(self.services, 0)

    def env(self, name: str) -> dict[str, str]:
        env = dict(os.environ)
        env["TURNSTREAM_NATS_URL"] = self.url
        env["TURNSTREAM_DATA_DIR"] = str(self.settings.data_dir)
        env["TURNSTREAM_PROVIDER"] = self.settings.provider
        env["TURNSTREAM_LOG_PARTITIONS"] = str(self.settings.log_partitions)
        if self.settings.script:
            env["TURNSTREAM_SCRIPT"] = str(self.settings.script)
        if self.passwords is not None:  # --secure: the service's own identity
            user = {**USERS, **CHANNEL_USERS}[name]
            env["TURNSTREAM_NATS_USER"] = user
            env["TURNSTREAM_NATS_PASSWORD"] = self.passwords[user]
        return env

    def start(self, name: str) -> None:
        log = self.settings.data_dir / f"{name}.log"
        with open(log, "ab") as out:
            self.children[name] = subprocess.Popen(
                [sys.executable, "-m", f"turnstream.{name}"],
                env=self.env(name),
                stdout=out,
                stderr=subprocess.STDOUT,
                # not in the terminal's process group: Ctrl-C reaches `up` alone, which
                # stops the services before their server (else all at once, and each
                # service logs the server going away)
                start_new_session=True,
            )

    def start_all(self) -> None:
        for name in self.services:
            self.start(name)

    def check(self) -> None:
        for name, child in list(self.children.items()):
            code = child.poll()
            if code is None:
                continue
            log = self.settings.data_dir / f"{name}.log"
            if self._http_gave_up(name, code):
                continue
            if self.restarts[name] >= MAX_RESTARTS:
                raise RuntimeError(f"{name} keeps exiting (code {code}); see {log}")
            self.restarts[name] += 1
            self.console.print(f"[red]{name} exited with code {code}; restarting[/] (see {log})")
            self.start(name)

    def _http_gave_up(self, name: str, code: int | None) -> bool:
        """The HTTP face exits 3 when its address is taken or refused: say so, run without."""
        if name != "http" or code != 3:
            return False
        log = self.settings.data_dir / f"{name}.log"
        self.console.print(f"[yellow]http not served[/] (see {log})")
        del self.children[name]
        return True

    def stop_all(self) -> None:
        exited = {name: child.poll() for name, child in self.children.items()}
        for child in self.children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in self.children.values():
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if "http" in self.children and 3 in (exited["http"], self.children["http"].returncode):
            self._http_gave_up("http", 3)  # it gave up before the next check: still say so


def lock_data_dir(settings: Settings) -> IO[str]:
    """Hold the data dir's lock for as long as the returned file stays open (the OS lets go
    of it when the process ends, however it ends); `RuntimeError` naming the running
    deployment when another `up` holds it. Two servers on one JetStream store corrupt it."""
    lock = open(settings.data_dir / LOCK_FILE, "a+")  # held until `up` ends
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "another process"
        lock.close()
        url = settings.url_file.read_text().strip() if settings.url_file.exists() else "?"
        raise RuntimeError(
            f"turnstream is already up on {url} with data dir {_abs(settings)} ({holder}); "
            "use that one (every command finds it), stop it first, or pass another "
            "--data-dir"
        ) from None
    lock.seek(0)
    lock.truncate()
    lock.write(f"pid {os.getpid()}\n")
    lock.flush()
    return lock


def stable_port(settings: Settings) -> int:
    """The embedded server's port: the configured one, else the one the last `up` on this
    data dir used if it is free (clients and notes that remember the URL keep working),
    else a free one."""
    if settings.nats_port:
        return settings.nats_port
    remembered = settings.data_dir / PORT_FILE
    try:
        port = int(remembered.read_text().strip())
    except (OSError, ValueError):
        return free_port()
    return port if port_is_free(port) else free_port()


def run_up(settings: Settings, console: Console, *, secure: bool = False) -> None:
    """Run until Ctrl-C (or SIGTERM); then stop the services, then the server."""
    # the server and the services run in sessions of their own (Ctrl-C reaches `up` alone):
    # a closed terminal (SIGHUP) must stop them through `up` too, or they outlive it
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    api_key(settings)  # no key: fail now, with the fix, rather than in a restarting child
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    lock = lock_data_dir(settings)
    try:
        _run_locked(settings, console, secure)
    finally:
        lock.close()


def _run_locked(settings: Settings, console: Console, secure: bool) -> None:
    mark = settings.data_dir / SECURE_MARK
    mark.unlink(missing_ok=True)  # said again below by a --secure one
    server, url, users = _start_server(settings, secure, mark)
    passwords = users.of if users else None
    supervisor = Supervisor(url, settings, console, passwords)
    try:
        setup(settings, url, passwords)
        supervisor.start_all()
        wait_until_up(settings, url, passwords, supervisor, console)
        _print_up(console, settings, url, server, users, supervisor, secure)
        while True:
            time.sleep(0.5)
            supervisor.check()
    except KeyboardInterrupt:
        console.print("\nstopping…")
    finally:
        supervisor.stop_all()
        if server is not None:
            server.stop()
            settings.url_file.unlink(missing_ok=True)
            mark.unlink(missing_ok=True)
        console.print("stopped")


def _start_server(
    settings: Settings, secure: bool, mark: Path
) -> tuple[EmbeddedServer | None, str, Passwords | None]:
    """The embedded server started (`--secure`: with ops/accounts.conf's users), its URL
    written for other commands; none with `nats_url` (the URL given)."""
    url = settings.nats_url
    users: Passwords | None = None
    if secure:
        if url is not None:
            raise ValueError("--secure runs the embedded server: drop --nats-url")
        users = load_passwords(settings.data_dir / DEV_SECRETS, os.environ)
        server: EmbeddedServer = SecureServer(
            settings.data_dir / "nats",
            stable_port(settings),
            users.of,
            subjects=settings.subjects,
        )
    elif url is not None:
        return None, url, None
    else:
        server = EmbeddedServer(
            settings.data_dir / "nats",
            stable_port(settings),
            log_file=settings.data_dir / "nats-server.log",
            subjects=settings.subjects,
        )
    server.detached = True
    server.start()
    if users is not None:
        mark.write_text("ops/accounts.conf: commands connect as admin unless told\n")
    settings.url_file.write_text(server.url + "\n")
    (settings.data_dir / PORT_FILE).write_text(f"{server.port}\n")
    return server, server.url, users


def _print_up(
    console: Console,
    settings: Settings,
    url: str,
    server: EmbeddedServer | None,
    users: Passwords | None,
    supervisor: Supervisor,
    secure: bool,
) -> None:
    where = "embedded" if server else "external"
    console.print(f"[bold green]turnstream is up[/] on {url} ({where})")
    if users is not None:
        print_access(console, users)
    elif server is not None:
        console.print(
            "  access:    [yellow]open[/]: no authentication, loopback only "
            "(`turnstream up --secure` for per-service identities)"
        )
    console.print(f"  data:      {_abs(settings)}")
    if server is not None and (other := other_mode_log(settings, secure)):
        print_other_mode(console, settings, secure, other)
    console.print(f"  workspace: {settings.workspace.resolve()}")
    console.print(f"  services:  {', '.join(supervisor.services)}")
    console.print(f"  provider:  {settings.provider} (TURNSTREAM_PROVIDER)")
    console.print(f"  approvals: {settings.security_mode} (TURNSTREAM_SECURITY_MODE)")
    console.print(f"  console:   http://{settings.http_addr}/")
    console.print(f"  http:      http://{settings.http_addr}/docs (TURNSTREAM_HTTP_ADDR)")
    console.print(f"  a2a:       http://{settings.http_addr}/.well-known/agent-card.json")
    console.print(f'  try:       [bold]{command_name()} send demo "hello"[/]')
    console.print("  Ctrl-C stops everything")


def print_access(console: Console, users: Passwords) -> None:
    """Under --secure: who is who, where each password came from, and who a command is."""
    file = users.file.resolve()
    console.print(
        "  access:    ops/accounts.conf: one NATS user per service (the HTTP face is `http`) "
        'and per role (ops/README.md, "People")'
    )
    if users.from_environment:
        names = ", ".join(users.from_environment)
        console.print(
            f"             passwords of {names}: from the environment (TS_<USER>_PASSWORD)"
        )
    if users.generated:
        console.print(f"             generated now into {file}: {', '.join(users.generated)}")
    kept = [u for u in users.of if u not in users.from_environment and u not in users.generated]
    if kept:
        console.print(f"             the others' from {file}")
    console.print(
        "  you:       commands here connect as [bold]admin[/] (reads, answers, interrupts); "
        "TURNSTREAM_NATS_USER=approver, client or operator for another role"
    )


OPEN_ACCOUNT, SECURE_ACCOUNT = "$G", "TURNSTREAM"
"""The JetStream account whose store holds the log: an open server's global account, or
the account of ops/accounts.conf."""


def other_mode_log(settings: Settings, secure: bool) -> Path | None:
    """The log the other mode (`up` vs `up --secure`) left in this data dir's store, which
    this one cannot see (each mode's streams are in its own account), if any."""
    account = OPEN_ACCOUNT if secure else SECURE_ACCOUNT
    log = (
        settings.data_dir
        / "nats"
        / "jetstream"
        / account
        / "streams"
        / settings.subjects.log_stream_at(0)
    )
    return log if log.exists() else None


def print_other_mode(console: Console, settings: Settings, secure: bool, log: Path) -> None:
    this, other = (
        ("`up --secure`", "`turnstream up`") if secure else ("`up`", "`turnstream up --secure`")
    )
    console.print(
        f"  [yellow]note:[/]      this data dir also holds the log of {other} ({log}); "
        f"{this} cannot see it, so its sessions are not listed here: run {other} on "
        "this data dir to reach them, or give each mode its own --data-dir"
    )


def wait_until_up(
    settings: Settings,
    url: str,
    passwords: dict[str, str] | None,
    supervisor: Supervisor,
    console: Console,
) -> None:
    """Until every service serves and the HTTP face answers (asked as the operator under
    --secure), restarting one that dies meanwhile."""
    from turnstream.cli.ready import wait_until_serving

    if passwords is not None:
        url = url.replace("://", f"://operator:{passwords['operator']}@", 1)
    asyncio.run(
        wait_until_serving(
            url,
            settings.subjects,
            lambda: list(supervisor.children),
            f"http://{settings.http_addr}",
            supervisor.check,
            console,
        )
    )


def setup(settings: Settings, url: str, passwords: dict[str, str] | None) -> None:
    """The setup step before any service starts (they only check): the streams and buckets,
    created as the operator under --secure."""
    if passwords is not None:
        url = url.replace("://", f"://operator:{passwords['operator']}@", 1)
    asyncio.run(apply_streams(settings.model_copy(update={"nats_url": url, "nats_user": None})))


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _abs(settings: Settings) -> Path:
    return settings.data_dir.resolve()
