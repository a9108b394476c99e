"""`turnstream up`: an embedded nats-server plus every service as its own process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console

from turnstream.bus.embedded import EmbeddedServer
from turnstream.providers import api_key
from turnstream.settings import Settings

SERVICES = ("gateway", "turn_runner", "approval", "tool_executor", "audit", "http")
"""Service packages started by `up`, each as `python -m turnstream.<name>`."""
MAX_RESTARTS = 5


class Supervisor:
    """Starts the services, restarts one that dies (a few times), stops all on exit."""

    def __init__(self, url: str, settings: Settings, console: Console) -> None:
        self.url = url
        self.settings = settings
        self.console = console
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.restarts: dict[str, int] = dict.fromkeys(SERVICES, 0)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["TURNSTREAM_NATS_URL"] = self.url
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
                env=self.env(),
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
            if name == "http" and code == 3:  # its address is taken or refused: run without
                self.console.print(f"[yellow]http not served[/] (see {log})")
                del self.children[name]
                continue
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


def run_up(settings: Settings, console: Console) -> None:
    """Run until Ctrl-C (or SIGTERM); then stop the services, then the server."""
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    api_key(settings)  # no key: fail now, with the fix, rather than in a restarting child
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    server: EmbeddedServer | None = None
    url = settings.nats_url
    if url is None:
        server = EmbeddedServer(
            settings.data_dir / "nats",
            settings.nats_port,
            log_file=settings.data_dir / "nats-server.log",
        ).start()
        url = server.url
        settings.url_file.write_text(url + "\n")
    supervisor = Supervisor(url, settings, console)
    try:
        supervisor.start_all()
        where = "embedded" if server else "external"
        console.print(f"[bold green]turnstream is up[/] on {url} ({where})")
        console.print(f"  data:      {_abs(settings)}")
        console.print(f"  workspace: {settings.workspace.resolve()}")
        console.print(f"  services:  {', '.join(SERVICES)} · provider {settings.provider}")
        console.print(f"  approvals: {settings.security_mode} (TURNSTREAM_SECURITY_MODE)")
        console.print(f"  http:      http://{settings.http_addr}/docs (TURNSTREAM_HTTP_ADDR)")
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
