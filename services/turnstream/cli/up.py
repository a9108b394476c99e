"""`turnstream up`: an embedded nats-server plus every service as its own process."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console

from turnstream.bus.embedded import EmbeddedServer, server_binary
from turnstream.providers import api_key
from turnstream.settings import Settings

SERVICES = ("gateway", "turn_runner", "approval", "tool_executor", "audit")
"""Service packages started by `up`, each as `python -m turnstream.<name>`."""
MAX_RESTARTS = 5
USERS = {
    "gateway": "gateway",
    "turn_runner": "turn-runner",
    "approval": "approval",
    "tool_executor": "tool-executor",
    "audit": "audit",
}
"""The NATS user each service runs as under `up --secure` (ops/accounts.conf)."""
OTHER_USERS = ("client", "client-acme", "operator")
ACCOUNTS = Path(__file__).resolve().parents[3] / "ops" / "accounts.conf"


def password_variable(user: str) -> str:
    """The environment variable ops/accounts.conf reads the user's password from."""
    return "TS_" + user.upper().replace("-", "_") + "_PASSWORD"


def dev_secrets(path: Path) -> dict[str, str]:
    """Every user's password from `path` (`TS_<USER>_PASSWORD=...` lines), generated on
    first use: a development secrets file, readable by its owner only."""
    wanted = [*USERS.values(), *OTHER_USERS]
    known: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep:
                known[key.strip()] = value.strip()
    missing = [u for u in wanted if password_variable(u) not in known]
    if missing:
        for user in missing:  # letters and digits: nats-server parses env values as config
            known[password_variable(user)] = "pw" + secrets.token_hex(16)
        path.write_text("".join(f"{k}={v}\n" for k, v in sorted(known.items())))
        path.chmod(0o600)
    return {u: known[password_variable(u)] for u in wanted}


class SecureServer(EmbeddedServer):
    """The embedded server with ops/accounts.conf (included, not copied) and its users'
    passwords from the development secrets file."""

    def __init__(self, store_dir: Path, port: int | None, passwords: dict[str, str]) -> None:
        super().__init__(store_dir, port, log_file=store_dir.parent / "nats-server.log")
        self.passwords = passwords

    def start(self, timeout: float = 10.0) -> EmbeddedServer:
        if not ACCOUNTS.exists():
            raise RuntimeError(f"--secure needs {ACCOUNTS} (run from a source checkout)")
        self.store_dir.mkdir(parents=True, exist_ok=True)
        config = self.store_dir / "nats-server-secure.conf"
        config.write_text(
            f'listen: "127.0.0.1:{self.port}"\n'
            f'jetstream {{ store_dir: "{self.store_dir.resolve()}" }}\n'
            "max_payload: 8MB\n"
            f'include "{os.path.relpath(ACCOUNTS, self.store_dir)}"\n'
        )
        env = dict(os.environ)
        env.update({password_variable(u): p for u, p in self.passwords.items()})
        assert self.log_file is not None
        with open(self.log_file, "ab") as out:
            self.process = subprocess.Popen(
                [server_binary(), "-c", str(config)], stdout=out, stderr=out, env=env
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"nats-server exited with code {self.process.returncode}; see {self.log_file}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"nats-server did not listen on {self.port} within {timeout}s")


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
        self.passwords = passwords
        self.settings = settings
        self.console = console
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.restarts: dict[str, int] = dict.fromkeys(SERVICES, 0)

    def env(self, name: str) -> dict[str, str]:
        env = dict(os.environ)
        env["TURNSTREAM_NATS_URL"] = self.url
        if self.passwords is not None:  # --secure: the service's own identity
            env["TURNSTREAM_NATS_USER"] = USERS[name]
            env["TURNSTREAM_NATS_PASSWORD"] = self.passwords[USERS[name]]
        env["TURNSTREAM_DATA_DIR"] = str(self.settings.data_dir)
        env["TURNSTREAM_PROVIDER"] = self.settings.provider
        if self.settings.script:
            env["TURNSTREAM_SCRIPT"] = str(self.settings.script)
        return env

    def start(self, name: str) -> None:
        log = self.settings.data_dir / f"{name}.log"
        with open(log, "ab") as out:
            self.children[name] = subprocess.Popen(
                [sys.executable, "-m", f"turnstream.{name}"],
                env=self.env(name),
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def start_all(self) -> None:
        for name in SERVICES:
            self.start(name)

    def check(self) -> None:
        for name, child in list(self.children.items()):
            code = child.poll()
            if code is None:
                continue
            log = self.settings.data_dir / f"{name}.log"
            if self.restarts[name] >= MAX_RESTARTS:
                raise RuntimeError(f"{name} keeps exiting (code {code}); see {log}")
            self.restarts[name] += 1
            self.console.print(f"[red]{name} exited with code {code}; restarting[/] (see {log})")
            self.start(name)

    def stop_all(self) -> None:
        for child in self.children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in self.children.values():
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def run_up(settings: Settings, console: Console, *, secure: bool = False) -> None:
    """Run until Ctrl-C (or SIGTERM); then stop the services, then the server."""
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    api_key(settings)  # no key: fail now, with the fix, rather than in a restarting child
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    server: EmbeddedServer | None = None
    url = settings.nats_url
    passwords: dict[str, str] | None = None
    secrets_file = settings.data_dir / "dev-secrets.env"
    if secure:
        if url is not None:
            raise ValueError("--secure runs the embedded server: drop --nats-url")
        passwords = dev_secrets(secrets_file)
        server = SecureServer(settings.data_dir / "nats", settings.nats_port, passwords).start()
        url = server.url
        settings.url_file.write_text(url + "\n")
    elif url is None:
        server = EmbeddedServer(
            settings.data_dir / "nats",
            settings.nats_port,
            log_file=settings.data_dir / "nats-server.log",
        ).start()
        url = server.url
        settings.url_file.write_text(url + "\n")
    supervisor = Supervisor(url, settings, console, passwords)
    try:
        supervisor.start_all()
        where = "embedded" if server else "external"
        console.print(f"[bold green]turnstream is up[/] on {url} ({where})")
        if secure:
            console.print(
                f"  access:    ops/accounts.conf, one user per service; passwords in "
                f"{secrets_file.resolve()} (commands: TURNSTREAM_NATS_USER=operator or client, "
                "TURNSTREAM_NATS_PASSWORD from that file)"
            )
        elif server is not None:
            console.print(
                "  access:    [yellow]open[/]: no authentication, loopback only "
                "(`turnstream up --secure` for per-service identities)"
            )
        console.print(f"  data:      {_abs(settings)}")
        console.print(f"  workspace: {settings.workspace.resolve()}")
        console.print(f"  services:  {', '.join(SERVICES)} · provider {settings.provider}")
        console.print(f"  approvals: {settings.security_mode} (TURNSTREAM_SECURITY_MODE)")
        console.print('  try:      [bold]turnstream send demo "hello"[/]   ·   Ctrl-C stops')
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
        console.print("stopped")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _abs(settings: Settings) -> Path:
    return settings.data_dir.resolve()
