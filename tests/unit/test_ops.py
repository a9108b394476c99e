from __future__ import annotations

import re
from pathlib import Path

import orjson
import yaml

from turnstream.bus.streams import StreamLimits, describe
from turnstream.cli.secure import USERS
from turnstream.cli.up import SERVICES
from turnstream.core.subjects import Subjects

ROOT = Path(__file__).parents[2]


def test_ops_streams_json_is_what_the_services_create() -> None:
    committed = orjson.loads((ROOT / "ops" / "streams.json").read_bytes())
    assert committed == describe(Subjects("ts"), StreamLimits(replicas=3)), (
        "ops/streams.json drifted: run `turnstream streams --replicas 3 > ops/streams.json`"
    )


def test_prefix_renames_streams_and_subjects() -> None:
    names = {c["name"]: c["subjects"] for c in describe(Subjects("acme"), StreamLimits())}
    assert names == {
        "ACME_INBOUND": ["acme.in.>"],
        "ACME_LOG": ["acme.log.>"],
        "ACME_DEAD": ["acme.dead.>"],
    }


def test_services_never_use_asyncio_wait_for() -> None:
    """On Python 3.11 `asyncio.wait_for` swallows a cancellation that races its inner
    future; the cancelled task then waits forever (it hung service shutdown here).
    `async with asyncio.timeout(...)` is correct; this keeps it that way (a condition's
    own `wait_for(predicate)` is another method)."""
    asyncio_wait_for = re.compile(r"asyncio\.wait_for\(|(?<![.\w])wait_for\(")
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in (ROOT / "services").rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if asyncio_wait_for.search(line) and not line.lstrip().startswith("#")
    ]
    assert offenders == []


def test_compose_runs_the_cluster_configs_and_every_service_as_its_own_user() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    commands = {name: s.get("command", []) for name, s in services.items()}
    for n in (1, 2, 3):
        assert (ROOT / "ops" / f"nats-cluster-{n}.conf").exists()
        assert commands[f"nats{n}"] == ["-c", f"/etc/nats/nats-cluster-{n}.conf"]
        assert "./ops:/etc/nats:ro" in services[f"nats{n}"]["volumes"]
    # the setup step runs first, as the operator; services depend on its success
    assert commands["setup"] == ["turnstream.cli", "streams", "apply"]
    assert services["setup"]["environment"]["TURNSTREAM_NATS_USER"] == "operator"
    del services["setup"], commands["setup"]
    for name in SERVICES:
        ready = services[name.replace("_", "-")]["depends_on"]["setup"]["condition"]
        assert ready == "service_completed_successfully", name
    started = {c[0] for name, c in commands.items() if not name.startswith("nats")}
    # every service `up` starts, the HTTP face included, each under its own NATS identity
    assert set(SERVICES) <= set(USERS)
    assert started == {f"turnstream.{s}" for s in SERVICES}
    users = {
        services[name]["environment"]["TURNSTREAM_NATS_USER"]
        for name in services
        if not name.startswith("nats")
    }
    assert users == set(USERS.values())
    text = (ROOT / "docker-compose.yml").read_text()
    secrets = [line for line in text.splitlines() if "PASSWORD:" in line or "SECRET:" in line]
    assert secrets and all('"${TS_' in line for line in secrets), "secrets only from .env"
    http = services["http"]["environment"]
    assert http["TURNSTREAM_HTTP_KEYS_FILE"], "off loopback the HTTP face needs keys"


def test_every_cluster_node_fsyncs_and_loads_the_shipped_accounts() -> None:
    accounts = (ROOT / "ops" / "accounts.conf").read_text()
    for user in USERS.values():
        assert f"user: {user}, password: $TS_" in accounts, user
    assert "change-me" not in accounts
    for n in (1, 2, 3):
        conf = (ROOT / "ops" / f"nats-cluster-{n}.conf").read_text()
        assert "sync_interval: always" in conf
        assert "include ./accounts.conf" in conf
        assert all(f"nats-route://nats{m}:6222" in conf for m in (1, 2, 3))
