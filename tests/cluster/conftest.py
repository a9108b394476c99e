"""Three nats-server processes from the wheel on loopback, each started from the shipped
`ops/nats-cluster-<n>.conf`. The test copies each file next to a link to
`ops/accounts.conf` and changes only what a container provides: the listen, http and
cluster ports (`0.0.0.0:4222/8222/6222` → free loopback ports), the route host names
(`natsN:6222` → `127.0.0.1:<port>`) and the store directory (`/data/jetstream` → a
temporary directory). `templated` asserts nothing else differs."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import time
import urllib.request
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest

from turnstream.bus.embedded import free_port, server_binary
from turnstream.bus.mapping import partitioned_accounts
from turnstream.cli.secure import dev_secrets, password_variable
from turnstream.core.subjects import Subjects

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]


def templated(n: int, ports: dict[int, tuple[int, int, int]], store: Path) -> str:
    original = (ROOT / "ops" / f"nats-cluster-{n}.conf").read_text()
    client, http, route = ports[n]
    text = (
        original.replace('listen: "0.0.0.0:4222"', f'listen: "127.0.0.1:{client}"')
        .replace('http: "0.0.0.0:8222"', f'http: "127.0.0.1:{http}"')
        .replace('listen: "0.0.0.0:6222"', f'listen: "127.0.0.1:{route}"')
        .replace('store_dir: "/data/jetstream"', f'store_dir: "{store}"')
    )
    for m, (_, _, route_m) in ports.items():
        text = text.replace(f"nats-route://nats{m}:6222", f"nats-route://127.0.0.1:{route_m}")
    changed = [
        (a, b) for a, b in zip(original.splitlines(), text.splitlines(), strict=True) if a != b
    ]
    assert len(changed) == 7, changed  # 3 listens/http, 3 routes, the store: nothing else
    return text


@dataclass
class Cluster:
    root: Path
    passwords: dict[str, str]
    ports: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    nodes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    def url(self, user: str) -> str:
        password = self.passwords[user]
        return ",".join(
            f"nats://{user}:{password}@127.0.0.1:{client}" for client, _, _ in self.ports.values()
        )

    def start(self, n: int) -> None:
        folder = self.root / f"nats{n}"
        config = folder / f"nats-cluster-{n}.conf"
        env = {**os.environ, **{password_variable(u): p for u, p in self.passwords.items()}}
        with open(folder / "server.log", "ab") as out:
            self.nodes[n] = subprocess.Popen(
                [server_binary(), "-c", str(config), "-n", f"nats{n}"],
                stdout=out,
                stderr=out,
                env=env,
            )

    def meta_leader(self) -> str | None:
        for n, (_, http, _) in self.ports.items():
            if self.nodes[n].poll() is not None:
                continue
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http}/jsz", timeout=1) as r:
                    leader = orjson.loads(r.read()).get("meta_cluster", {}).get("leader")
            except OSError:
                continue
            if leader:
                return str(leader)
        return None

    def kill9(self, n: int) -> None:
        self.nodes[n].send_signal(signal.SIGKILL)
        self.nodes[n].wait()

    def stop(self) -> None:
        for process in self.nodes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.nodes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


def start_cluster(root: Path, subjects: Subjects | None = None) -> Cluster:
    """The three nodes under `root`, running, with a JetStream meta leader. For a
    partitioned log (`subjects.log_partitions` > 1) each node loads ops/accounts.conf as
    derived for it (`turnstream streams mapping --accounts`: mappings, rights per stream)."""
    cluster = Cluster(root, dev_secrets(root / "secrets.env"))  # every user's, generated
    cluster.ports = {n: (free_port(), free_port(), free_port()) for n in (1, 2, 3)}
    shipped = ROOT / "ops" / "accounts.conf"
    for n in (1, 2, 3):
        folder = root / f"nats{n}"
        folder.mkdir()
        if subjects is not None and subjects.partitioned:
            derived = partitioned_accounts(shipped.read_text(), subjects)
            (folder / "accounts.conf").write_text(derived)
        else:
            (folder / "accounts.conf").symlink_to(shipped)  # the shipped one
        (folder / f"nats-cluster-{n}.conf").write_text(
            templated(n, cluster.ports, folder / "jetstream")
        )
        cluster.start(n)
    try:
        deadline = time.monotonic() + 20
        for n in (1, 2, 3):
            log = root / f"nats{n}" / "server.log"
            while "Server is ready" not in log.read_text():
                assert cluster.nodes[n].poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
        while not cluster.meta_leader():  # JetStream answers once the nodes elected one
            assert time.monotonic() < deadline, "no JetStream meta leader"
            time.sleep(0.2)
    except BaseException:
        cluster.stop()
        raise
    return cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    cluster = start_cluster(tmp_path)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(autouse=True)
def collect_what_the_kills_left() -> Iterator[None]:
    """Killing a node mid-run leaves clients' sockets to it for the garbage collector: collect
    them after each test, so their ResourceWarnings are not raised inside a later test."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
