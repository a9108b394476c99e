"""The people's roles of ops/accounts.conf (issue 36): every `turnstream` command a person
runs works for the role that should have it, as the real command against the shipped file,
and the others are refused by the server with an error that names the user, the subject
and the role that may. The `admin` reads everything, answers and interrupts; the
`approver` lists and answers prompts; neither may administer a stream or a consumer."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import orjson
import pytest

from tests.security.conftest import SecureServer, secure_server_in
from tests.security.test_identities import as_user, services_as_themselves
from turnstream.bus import Bus
from turnstream.cli import secure
from turnstream.client import message_command, pending_prompts, publish_command

pytestmark = pytest.mark.integration
TURNSTREAM = str(Path(sys.executable).parent / "turnstream")
DURABLES = ("gateway", "turn-runner", "approval", "tool-executor", "audit")


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "notes.txt").write_text("the secret word is turnip\n")
    return tmp_path


def environment(server: SecureServer, user: str, tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")}
    env.update(
        TURNSTREAM_NATS_URL=f"nats://127.0.0.1:{server.port}",
        TURNSTREAM_NATS_USER=user,
        TURNSTREAM_NATS_PASSWORD=server.passwords[user],
        TURNSTREAM_DATA_DIR=str(tmp / "cli-data"),
        TURNSTREAM_CONFIG=str(tmp / "absent.yaml"),
        COLUMNS="300",
    )
    return env


async def cli(server: SecureServer, user: str, tmp: Path, *args: str) -> tuple[int, str]:
    """`turnstream ARGS` as `user`, nothing on stdin: its exit code and what it printed."""
    process = await asyncio.create_subprocess_exec(
        TURNSTREAM,
        *args,
        env=environment(server, user, tmp),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(process.communicate(), 30)
    except TimeoutError:
        process.kill()
        out, _ = await process.communicate()
        raise AssertionError(f"`turnstream {' '.join(args)}` as {user} hung: {out!r}") from None
    assert process.returncode is not None
    text = out.decode()
    assert "Traceback" not in text, text
    assert server.passwords[user] not in text
    return process.returncode, text


async def tail_until(server: SecureServer, user: str, tmp: Path, session: str, seen: str) -> str:
    """`turnstream tail SESSION --history` as `user` until it prints `seen`, then Ctrl-C."""
    process = await asyncio.create_subprocess_exec(
        TURNSTREAM,
        "tail",
        session,
        "--history",
        env=environment(server, user, tmp),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    printed = b""
    try:
        async with asyncio.timeout(20):
            while seen.encode() not in printed:
                line = await process.stdout.readline()
                if not line:
                    break
                printed += line
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
        rest, _ = await process.communicate()
    assert process.returncode == 130, printed + rest
    return (printed + rest).decode()


@pytest.fixture
async def prompting(secure_server: SecureServer, tmp: Path) -> AsyncIterator[Bus]:
    """The services, each as itself, with calls that need a person; the admin's bus."""
    async with services_as_themselves(secure_server, tmp, security_mode="ask"):
        admin = await as_user(secure_server, "admin")
        try:
            yield admin
        finally:
            await admin.close()


async def prompt_of(bus: Bus, session: str, text: str, tenant: Bus) -> str:
    """Send `text` to `session` (as the tenant) and wait for its approval prompt."""
    await publish_command(tenant, session, message_command(session, text))
    async with asyncio.timeout(15):
        while True:
            pending = [p for p in await pending_prompts(bus, session) if not p["answered"]]
            if pending:
                return str(pending[0]["interactionId"])
            await asyncio.sleep(0.2)


async def replayed_until(
    server: SecureServer, tmp: Path, session: str, seen: str
) -> tuple[int, str]:
    """`turnstream replay SESSION` as the admin, again until it shows `seen` (15 s)."""
    async with asyncio.timeout(15):
        while True:
            code, out = await cli(server, "admin", tmp, "replay", session)
            if seen in out:
                return code, out
            await asyncio.sleep(0.3)


def names_the_refusal(out: str, user: str, subject: str, role: str) -> bool:
    return (
        f"NATS user '{user}' may not" in out
        and subject in out
        and f"`{role}`" in out
        and "no answer from the service" not in out
        and "TimeoutError" not in out
    )


async def test_the_admin_reads_answers_and_interrupts_the_approver_answers(
    secure_server: SecureServer, prompting: Bus, tmp: Path
) -> None:
    admin, server = prompting, secure_server
    tenant = await as_user(server, "client-acme")
    try:
        asked = await prompt_of(admin, "acme", "read my notes", tenant)

        code, out = await cli(server, "admin", tmp, "approvals")
        assert code == 0 and asked in out and "read_file" in out, out
        code, out = await cli(server, "approver", tmp, "approvals", "acme")
        assert code == 0 and asked in out, out
        for user in ("admin", "operator"):  # by message gets: no consumer to create
            code, out = await cli(server, user, tmp, "sessions")
            assert code == 0 and "acme" in out, (user, out)
        code, out = await cli(server, "admin", tmp, "status", "acme")
        assert code == 0 and "active turn" in out, out
        out = await tail_until(server, "admin", tmp, "acme", "InteractionRequested")
        assert "InteractionRequested" in out, out

        # the approver answers this one (asked about its session only) …
        code, out = await cli(server, "approver", tmp, "approve", asked, "--session", "acme")
        assert code == 0 and f"approved read_file ({asked})" in out, out
        code, out = await replayed_until(server, tmp, "acme", "turnip")
        assert code == 0 and "turnip" in out, out

        # … the next one the approver denies, the one after the admin approves
        asked = await prompt_of(admin, "acme", "read them again", tenant)
        code, out = await cli(server, "approver", tmp, "deny", asked, "--reason", "enough")
        assert code == 0 and f"denied read_file ({asked})" in out, out
        asked = await prompt_of(admin, "acme", "and once more", tenant)
        code, out = await cli(server, "admin", tmp, "approve", asked)
        assert code == 0 and "approved" in out, out

        code, out = await cli(server, "admin", tmp, "interrupt", "acme", "--hard")
        assert code == 0 and "sent a hard interrupt to acme" in out, out
        code, out = await cli(server, "admin", tmp, "interrupt", "nobody-here")
        assert code == 1 and "no such session: nobody-here" in out, out
        # a tenant may not read the log's last sequence: its interrupt goes unchecked
        code, out = await cli(server, "client-acme", tmp, "interrupt", "acme")
        assert code == 0 and "sent a graceful interrupt to acme" in out, out
    finally:
        await tenant.close()


async def test_the_approver_reads_nothing_and_others_may_not_answer(
    secure_server: SecureServer, prompting: Bus, tmp: Path
) -> None:
    server = secure_server
    tenant = await as_user(server, "client-acme")
    try:
        asked = await prompt_of(prompting, "acme", "read my notes", tenant)
    finally:
        await tenant.close()
    refused = {
        ("replay", "acme"): "$JS.API.",
        ("status", "acme"): "$JS.API.",
        ("sessions",): "$JS.API.",
        ("tail", "acme"): "ts.log.acme.>",
    }
    for args, subject in refused.items():
        code, out = await cli(server, "approver", tmp, *args)
        assert code == 2, (args, out)
        assert names_the_refusal(out, "approver", subject, "admin"), (args, out)

    # the operator sets the deployment up; it answers no prompt: the admin or approver do
    code, out = await cli(server, "operator", tmp, "approve", asked)
    assert code == 2 and names_the_refusal(out, "operator", "ts.in.acme.answer", "approver"), out
    for user in ("client", "client-acme"):
        code, out = await cli(server, user, tmp, "approve", asked)
        assert code == 2, out
        assert names_the_refusal(out, user, "ts.api.approval.pending", "approver"), out
    # nobody answered: the prompt is still open
    assert asked in (await cli(server, "admin", tmp, "approvals"))[1]


async def refused_request(bus: Bus, subject: str, body: dict[str, object]) -> bool:
    """Whether the server refused `bus`'s user the request (a permissions violation, no
    answer), rather than answering it."""
    try:
        await bus.nc.request(subject, orjson.dumps(body), timeout=1)
    except Exception:  # refused: no answer comes
        await asyncio.sleep(0.1)
        return bus.refusals.denied("publish", subject) is not None
    return False


async def test_neither_person_administers_a_stream_or_a_consumer(
    secure_server: SecureServer, prompting: Bus
) -> None:
    operator = await as_user(secure_server, "operator")
    try:
        for user in ("admin", "approver"):
            bus = prompting if user == "admin" else await as_user(secure_server, user)
            config = {"ack_policy": "none", "filter_subject": "ts.log.x.>"}
            evil = {"stream_name": "TS_LOG", "config": {**config, "durable_name": "evil"}}
            for subject, body in [
                ("$JS.API.STREAM.DELETE.TS_LOG", {}),
                ("$JS.API.STREAM.PURGE.TS_LOG", {}),
                ("$JS.API.STREAM.UPDATE.TS_LOG", {"name": "TS_LOG"}),
                ("$JS.API.STREAM.DELETE.KV_ts_sessions", {}),
                ("$JS.API.CONSUMER.DURABLE.CREATE.TS_LOG.evil", evil),
                ("$JS.API.CONSUMER.CREATE.TS_LOG.evil", evil),
                ("$JS.API.CONSUMER.CREATE.TS_LOG", {"stream_name": "TS_LOG", "config": config}),
                # an "ephemeral" create naming a durable would update it (the server allows
                # it on the bare subject): nobody but the setup operator may send one
                (
                    "$JS.API.CONSUMER.CREATE.TS_LOG",
                    {
                        "stream_name": "TS_LOG",
                        "action": "update",
                        "config": {**config, "name": "turn-runner"},
                    },
                ),
                *((f"$JS.API.CONSUMER.DELETE.TS_LOG.{d}", {}) for d in DURABLES[1:]),
                ("$JS.API.CONSUMER.DELETE.TS_INBOUND.gateway", {}),
            ]:
                assert await refused_request(bus, subject, body), (user, subject)
            if bus is not prompting:
                await bus.close()
        for durable in DURABLES[1:]:
            info = await operator.js.consumer_info("TS_LOG", durable)
            assert info.config.filter_subject != "ts.log.x.>", durable
        await operator.js.consumer_info("TS_INBOUND", "gateway")
        assert (await operator.js.stream_info("TS_LOG")).state.messages > 0
    finally:
        await operator.close()


@pytest.fixture
def scoped_approver(tmp_path: Path) -> Iterator[SecureServer]:
    """The shipped file with the approver scoped to the tenant acme's session, as
    ops/README.md ("People") shows it."""
    shipped = secure.ACCOUNTS.read_text()
    granted = '["ts.in.*.answer", "ts.api.approval.pending", "ts.api.approval.pending.*"]'
    assert granted in shipped
    changed = tmp_path / "accounts.conf"
    scoped = '["ts.in.acme.answer", "ts.api.approval.pending.acme"]'
    changed.write_text(shipped.replace(granted, scoped))
    (tmp_path / "nats").mkdir()
    with secure_server_in(tmp_path / "nats", changed) as server:
        yield server


async def test_an_approver_scoped_to_a_tenant_answers_its_prompts_alone(
    scoped_approver: SecureServer, tmp: Path
) -> None:
    server = scoped_approver
    async with services_as_themselves(server, tmp, security_mode="ask"):
        admin, client = await as_user(server, "admin"), await as_user(server, "client")
        try:
            acme = await prompt_of(admin, "acme", "read my notes", client)
            globex = await prompt_of(admin, "globex", "read my notes", client)

            code, out = await cli(server, "approver", tmp, "approvals", "acme")
            assert code == 0 and acme in out and globex not in out, out
            for args in (("approvals",), ("approvals", "globex"), ("approve", globex)):
                code, out = await cli(server, "approver", tmp, *args)
                assert code == 2, (args, out)
                assert names_the_refusal(out, "approver", "ts.api.approval.pending", "admin"), out
            code, out = await cli(server, "approver", tmp, "approve", acme, "--session", "acme")
            assert code == 0 and f"approved read_file ({acme})" in out, out
            # its grant is the session by name: another session's answer is refused
            code, out = await cli(server, "approver", tmp, "approve", globex, "--session", "globex")
            assert code == 2, out
            assert globex in (await cli(server, "admin", tmp, "approvals", "globex"))[1]
        finally:
            await admin.close()
            await client.close()
