"""What a partitioned log would rely on, tried against the real nats-server.

    python bench/partitions_probe.py [--partitions 4 16] [--sessions 300] [--json PATH]

For each N: a nats-server (the wheel's) whose account maps every log subject to a
partition, `ts.log.*.*` → `ts.log.{{wildcard(1)}}.{{wildcard(2)}}.{{partition(N,1)}}`, and
N streams `TS_LOG_<k>` on `ts.log.*.*.<k>` (as `turnstream streams apply` defines TS_LOG:
file storage, allow_direct, allow_batched), each with a subject transform that stores
`ts.log.<s>.<Type>.<k>` as `ts.log.<s>.<Type>` again. Then:
  hash       `--sessions` ids appended through the mapping; the stream each pub ack
             names must be `turnstream.core.partition.partition(session, N)`
  live       a core subscriber on `ts.log.<s>.>` gets the mapped subject
             (`ts.log.<s>.<Type>.<k>`); one on `ts.log.*.<Type>` does not, one on
             `ts.log.*.<Type>.*` does
  batch      a decision through `PipelinedAppender.publish_batch` (fast ingest) lands
             whole in the session's partition
  fence      `Nats-Expected-Last-Subject-Sequence` (subject `ts.log.<s>.>`) still fences:
             the session's last sequence in its partition passes, a stale one is refused
  lookup     a JetStream subscribe on `ts.log.<s>.>` without a stream name (nats-py looks
             the stream up by subject) against one bound to `TS_LOG_<k>`
  stored     the partition stream holds today's subjects: a consumer filtered on
             `ts.log.*.<Type>` in `TS_LOG_<k>` gets the session's event
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import uuid_utils
from nats.js import api
from rich.console import Console
from rich.table import Table

from turnstream.bus import connect
from turnstream.bus.appender import AppendError, PipelinedAppender
from turnstream.bus.embedded import free_port, server_binary
from turnstream.core.partition import partition
from turnstream.core.subjects import Subjects

console = Console(highlight=False)
SUBJECTS = Subjects("ts")
CONDITION = "Nats-Expected-Last-Subject-Sequence"


def config(port: int, store: Path, partitions: int) -> str:
    return (
        f'listen: "127.0.0.1:{port}"\n'
        f'jetstream {{ store_dir: "{store}", sync_interval: 2m }}\n'
        "mappings {\n"
        '  "ts.log.*.*": "ts.log.{{wildcard(1)}}.{{wildcard(2)}}.'
        f'{{{{partition({partitions},1)}}}}"\n'
        "}\n"
    )


@contextlib.contextmanager
def server(root: Path, partitions: int) -> Iterator[str]:
    port = free_port()
    path = root / f"p{partitions}.conf"
    path.write_text(config(port, root / f"js{partitions}", partitions))
    process = subprocess.Popen(
        [server_binary(), "-c", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                assert time.monotonic() < deadline, "nats-server did not start"
                time.sleep(0.05)
        yield f"nats://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)


def version() -> str:
    out = subprocess.run([server_binary(), "--version"], capture_output=True, text=True)
    return out.stdout.strip()


async def probe(url: str, partitions: int, sessions: int) -> dict[str, Any]:
    bus = await connect(url, SUBJECTS)
    js, nc = bus.js, bus.nc
    for k in range(partitions):
        await js.add_stream(
            api.StreamConfig(
                name=f"TS_LOG_{k}",
                subjects=[f"ts.log.*.*.{k}"],
                storage=api.StorageType.FILE,
                allow_direct=True,
                allow_batched=True,
                duplicate_window=120,
                # stored without the partition token: the subjects of today's log
                subject_transform=api.SubjectTransform(
                    src=f"ts.log.*.*.{k}", dest="ts.log.{{wildcard(1)}}.{{wildcard(2)}}"
                ),
            )
        )
    found: dict[str, Any] = {}

    # hash: the stream each append lands in, against the Python function
    ids = [f"s{i}" for i in range(sessions // 3)]
    ids += [str(uuid_utils.uuid7()) for _ in range(sessions // 3)]
    ids += [f"chat:{i}_x-{i * 7919}" for i in range(sessions - len(ids))]
    vectors: dict[str, int] = {}
    for session in ids:
        ack = await js.publish(SUBJECTS.log(session, "Probe"), b"{}")
        vectors[session] = int(ack.stream.rsplit("_", 1)[1])
    wrong = [s for s, k in vectors.items() if partition(s, partitions) != k]
    found["hash"] = {"ok": not wrong, "checked": len(vectors), "wrong": wrong[:5]}
    third = sessions // 3  # a few of each kind of id, for tests/unit/test_partition.py
    found["vectors"] = {s: vectors[s] for s in ids[:6] + ids[third : third + 4] + ids[-6:]}

    # live: core subscribers as clients use them today, and with the partition token
    got: dict[str, list[str]] = {"session": [], "kind": [], "kind_any": []}
    subs = []
    for key, subject in (
        ("session", SUBJECTS.log_session("live1")),
        ("kind", SUBJECTS.log_kind("TurnEnded")),
        ("kind_any", SUBJECTS.log_kind("TurnEnded") + ".*"),
    ):

        async def on_msg(msg: Any, key: str = key) -> None:
            got[key].append(msg.subject)

        subs.append(await nc.subscribe(subject, cb=on_msg))
    await nc.flush()
    await js.publish(SUBJECTS.log("live1", "TurnEnded"), b"{}")
    await asyncio.sleep(0.2)
    for sub in subs:
        await sub.unsubscribe()
    found["live"] = {
        "ok": bool(got["session"]) and not got["kind"] and bool(got["kind_any"]),
        "ts.log.live1.> got": got["session"],
        "ts.log.*.TurnEnded got": got["kind"],
        "ts.log.*.TurnEnded.* got": got["kind_any"],
    }

    # batch + fence: a decision through the services' appender, fenced on the session
    appender = PipelinedAppender(nc)
    session = "fence1"
    home = f"TS_LOG_{partition(session, partitions)}"
    first = await js.publish(SUBJECTS.log(session, "InputAccepted"), b"{}")

    def decision(last: int) -> list[tuple[str, bytes, dict[str, str]]]:
        items = [
            (SUBJECTS.log(session, kind), b"{}", {"Nats-Msg-Id": str(uuid_utils.uuid7())})
            for kind in ("SessionTurnStart", "StagePreFired", "ProviderRequestStarted")
        ]
        items[0][2][CONDITION] = str(last)
        items[0][2][f"{CONDITION}-Subject"] = SUBJECTS.log_session(session)
        return items

    batch: dict[str, Any] = {}
    try:
        last = await appender.publish_batch(decision(first.seq), 5)
        info = await js.stream_info(home)
        batch = {"ok": last == info.state.last_seq == first.seq + 3, "last_seq": last}
        batch["stream"] = home
    except (AppendError, TimeoutError) as exc:
        batch = {"ok": False, "error": repr(exc)}
    found["batch"] = batch
    try:
        await appender.publish_batch(decision(first.seq), 5)  # stale: the batch's seq is later
        found["fence"] = {"ok": False, "error": "a stale condition was accepted"}
    except AppendError as exc:
        found["fence"] = {"ok": exc.err_code == 10071 and exc.index == 1, "refused": str(exc)}

    # lookup: a reader of one session
    async def read(stream: str | None) -> list[str]:
        sub = await js.subscribe(
            SUBJECTS.log_session(session), stream=stream, ordered_consumer=True
        )
        subjects = []
        with contextlib.suppress(Exception):
            while True:
                subjects.append((await sub.next_msg(timeout=0.5)).subject)
        await sub.unsubscribe()
        return subjects

    try:
        unnamed = str(len(await read(None))) + " of 4 events"
    except Exception as exc:
        unnamed = f"{type(exc).__name__}: {exc}"
    named = await read(home)
    found["lookup"] = {"ok": len(named) == 4, "without stream name": unnamed, "with": named}

    # stored: today's subjects in the partition stream, so a kind filter works there
    kind = await js.subscribe(
        SUBJECTS.log_kind("InputAccepted"), stream=home, ordered_consumer=True
    )
    stored = (await kind.next_msg(timeout=2)).subject
    await kind.unsubscribe()
    found["stored"] = {"ok": stored == SUBJECTS.log(session, "InputAccepted"), "as": stored}
    await bus.close()
    return found


async def main(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"server": version()}
    table = Table("N", "check", "ok", "what happened")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.partitions:
            with server(Path(tmp), n) as url:
                found = result[str(n)] = await probe(url, n, args.sessions)
            for check, what in found.items():
                if check == "vectors":
                    continue
                detail = {k: v for k, v in what.items() if k != "ok"}
                table.add_row(str(n), check, "yes" if what["ok"] else "[red]NO[/]", str(detail))
    console.print(result["server"])
    console.print(table)
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--json", type=Path, default=Path("bench/results/partitions_probe.json"))
    args = parser.parse_args()
    out = asyncio.run(main(args))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2))
    console.print(f"wrote {args.json}")
    sys.exit(
        0
        if all(c["ok"] for n in args.partitions for k, c in out[str(n)].items() if k != "vectors")
        else 1
    )
