"""Time from a turn-runner kill -9 to its open sessions continuing, with 100 open sessions.

    python bench/recovery.py [--sessions 100] [--json bench/results/recovery.json]

Starts an embedded nats-server and the services as separate processes (as `turnstream
up` does), opens N sessions whose turn waits on an approval prompt (`ask` mode, one
`read_file` call), then answers every prompt and measures until each session has
continued (its next stage event, `ToolInvocationRequested`) and until each has ended:
  baseline   no kill: the answers go to the running turn-runner
  same id    kill -9 the runner, answer, start a new one with the same TURNSTREAM_RUNNER_ID
             (it takes its leases back at once)
  other id   the same, the new runner under another name: it takes the sessions over when
             the dead runner's leases expire (TURNSTREAM_LEASE_TTL_S)
and, as a floor, the time to read the N sessions' events back from the log.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import stack
from rich.console import Console

from turnstream.bus import Bus, connect
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.streams import StreamLimits
from turnstream.cli.up import Supervisor
from turnstream.client import answer_command, message_command, publish_command
from turnstream.core.subjects import Subjects
from turnstream.settings import Settings

console = Console(highlight=False, width=160)
SCRIPT = (
    "replies:\n"
    "  - {tool_calls: [{name: read_file, arguments: {path: bench.txt}}]}\n"
    '  - {text: "read {last_tool_result:20}", chunks: whole}\n'
)
WAIT_S = 120.0


class Firsts:
    """When each session first showed an event of each watched kind (core subscriptions)."""

    def __init__(self, bus: Bus, kinds: tuple[str, ...]) -> None:
        self.bus, self.kinds = bus, kinds
        self.at: dict[str, dict[str, float]] = {k: {} for k in kinds}
        self.data: dict[str, dict[str, Any]] = {}
        self.subs: list[Any] = []

    async def start(self) -> None:
        for kind in self.kinds:

            async def on_msg(msg: Any, kind: str = kind) -> None:
                body = orjson.loads(msg.data)
                session = body["sessionId"]
                self.at[kind].setdefault(session, time.perf_counter())
                if kind == "InteractionRequested":
                    self.data[session] = body["data"]

            self.subs.append(
                await self.bus.nc.subscribe(self.bus.subjects.log_kind_live(kind), cb=on_msg)
            )

    async def all_of(self, kind: str, sessions: list[str]) -> float:
        """The time the last of `sessions` showed `kind`."""
        async with asyncio.timeout(WAIT_S):
            while True:
                if all(s in self.at[kind] for s in sessions):
                    return max(self.at[kind][s] for s in sessions)
                await asyncio.sleep(0.01)


def says_consuming(log: Path, since: int) -> bool:
    return log.exists() and b"consuming" in log.read_bytes()[since:]


def size(path: Path) -> int:
    return path.stat().st_size


async def ready(log: Path, since: int) -> float:
    """When the runner writing `log` (past byte `since`) says it is consuming."""
    async with asyncio.timeout(WAIT_S):
        while True:
            if says_consuming(log, since):
                return time.perf_counter()
            await asyncio.sleep(0.01)


async def scenario(
    url: str, supervisor: Supervisor, log: Path, n: int, kill: str | None
) -> dict[str, float]:
    bus = await connect(url, Subjects("ts"), ensure=StreamLimits())
    firsts = Firsts(bus, ("InteractionRequested", "ToolInvocationRequested", "TurnEnded"))
    await firsts.start()
    try:
        sessions = [f"rec-{kill or 'baseline'}-{i}" for i in range(n)]
        for s in sessions:
            await publish_command(bus, s, message_command(s, "read it"))
        await firsts.all_of("InteractionRequested", sessions)
        await asyncio.sleep(1.0)  # every prompt's turn is idle, waiting
        start = time.perf_counter()
        result: dict[str, float] = {}
        if kill:
            runner = supervisor.children["turn_runner"]
            runner.send_signal(signal.SIGKILL)
            runner.wait()
            if kill == "same-id":
                os.environ["TURNSTREAM_RUNNER_ID"] = "bench-runner-0"
            else:
                os.environ["TURNSTREAM_RUNNER_ID"] = "bench-runner-1"
            since = size(log)
            supervisor.start("turn_runner")
        for s in sessions:
            answer = answer_command(s, firsts.data[s]["interactionId"], "approve")
            await publish_command(bus, s, answer)
        if kill:
            result["runner_ready_s"] = await ready(log, since) - start
        result["continued_s"] = await firsts.all_of("ToolInvocationRequested", sessions) - start
        result["ended_s"] = await firsts.all_of("TurnEnded", sessions) - start
        read_start = time.perf_counter()
        for s in sessions:
            await bus.store.read_session(s)
        result["read_events_s"] = time.perf_counter() - read_start
        return result
    finally:
        for sub in firsts.subs:
            await sub.unsubscribe()
        await bus.close()


def run(args: argparse.Namespace, kill: str | None) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        stack.workspace(root, "ask")
        (root / "script.yaml").write_text(SCRIPT)
        os.environ["TURNSTREAM_RUNNER_ID"] = "bench-runner-0"
        with (
            EmbeddedServer(root / "nats") as server,
            stack.running(server, root, root / "script.yaml", console) as supervisor,
        ):
            log = root / "turn_runner.log"
            return asyncio.run(scenario(server.url, supervisor, log, args.sessions, kill))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--json", type=Path, default=Path("bench/results/recovery.json"))
    args = parser.parse_args()
    ttl = Settings().lease_ttl_s
    result: dict[str, Any] = {
        name: run(args, kill)
        for name, kill in [("baseline", None), ("same_id", "same-id"), ("other_id", "other-id")]
    }
    result["lease_ttl_s"] = ttl
    result["machine"] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }
    n = args.sessions
    b = result["baseline"]
    console.print(
        f"[bold]recovery[/], {n} sessions each waiting on an approval; all answered at t=0 "
        f"(at the kill); lease TTL {ttl:g} s"
    )
    console.print(
        f"baseline (no kill): all continued {b['continued_s'] * 1000:.0f} ms, "
        f"all ended {b['ended_s'] * 1000:.0f} ms; reading their events back "
        f"{b['read_events_s'] * 1000:.0f} ms"
    )
    for name, label in (
        ("same_id", "restart, same runner id"),
        ("other_id", "new runner, other id"),
    ):
        r = result[name]
        console.print(
            f"{label}: runner ready {r['runner_ready_s']:.2f} s after the kill; all continued "
            f"{r['continued_s']:.2f} s, all ended {r['ended_s']:.2f} s after the kill "
            f"({r['continued_s'] - r['runner_ready_s']:.2f} / "
            f"{r['ended_s'] - r['runner_ready_s']:.2f} s after it was ready)"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
