"""What telemetry costs a text turn: the code before it, telemetry off, telemetry on, in one run.

    python bench/telemetry.py [--base REV] [--rounds 3] [--turns 1000]

Three sides, alternated `--rounds` times (the machines are shared and drift, so only
neighbouring runs compare), each `bench/turns.py`'s text turn with every service a
process (as `turnstream up` runs them), measured as `bench/compare.py` does (K = 1 p50,
turns/s and each process's CPU per turn at K = 50):

  base  the services of `--base` (default: where this branch left `main`), extracted with
        `git archive` into a temporary directory: no telemetry code at all
  off   this checkout, `OTEL_EXPORTER_OTLP_ENDPOINT` unset (the default)
  on    this checkout exporting spans and metrics over OTLP/HTTP to a sink in this
        process (which reads each request and answers 200, as a collector would)

Ratios are geometric means of neighbouring runs' ratios. Then, in this process, what the
hooks cost when off: each one's time per call (the bound on a turn's extra work is that
times the calls a turn makes, well under a microsecond per event).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import socketserver
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import timeit
from collections.abc import Iterator
from contextlib import contextmanager
from io import BytesIO
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))
import stack
from compare import measure
from turns import SCRIPTS

console = Console(highlight=False)
ROOT = Path(__file__).parents[1]
SIDES = ("base", "off", "on")


def one_run(turns: int) -> None:
    """Run the services of whichever `turnstream` is importable; print one JSON line."""
    from turnstream.bus.embedded import EmbeddedServer

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        stack.workspace(root, "auto")
        (root / "script.yaml").write_text(SCRIPTS["text"])
        with (
            EmbeddedServer(root / "nats") as server,
            stack.running(server, root, root / "script.yaml", console) as supervisor,
        ):
            pids = stack.pids(supervisor, server)
            result = asyncio.run(measure(server.url, pids, turns))
            result["events_per_turn"] = asyncio.run(events_per_turn(server.url, turns))
            print(json.dumps(result))


async def events_per_turn(url: str, turns: int) -> float:
    """Log events per turn over `measure`'s turns (200 warm-up, 100 at K = 1, `turns`)."""
    from turnstream.bus import connect
    from turnstream.core.subjects import Subjects

    bus = await connect(url, Subjects("ts"))
    try:
        info = await bus.js.stream_info(bus.subjects.log_stream)
    finally:
        await bus.close()
    return float(info.state.messages) / (300 + turns // 50 * 50)


@contextmanager
def otlp_sink() -> Iterator[tuple[str, dict[str, int]]]:
    """An OTLP/HTTP endpoint that takes everything: (its URL, requests and bytes taken).
    Plain HTTP/1.1 on `socketserver`."""
    taken = {"requests": 0, "bytes": 0}

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            while True:  # keep-alive: one request after another on the connection
                size = 0
                line = self.rfile.readline()
                if not line:
                    return
                while line not in (b"\r\n", b"\n", b""):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        size = int(value.strip())
                    line = self.rfile.readline()
                self.rfile.read(size)
                taken["requests"] += 1
                taken["bytes"] += size
                self.wfile.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\n"
                    b"Content-Length: 0\r\n\r\n"
                )

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", taken
    finally:
        server.shutdown()
        server.server_close()


def base_tree(rev: str, into: Path) -> Path:
    """The `turnstream` package of `rev`, extracted (no git worktree is made)."""
    archive = subprocess.run(
        ["git", "archive", rev, "services"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "services"


def run_side(side: str, base_path: Path, endpoint: str, turns: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if side == "base":
        env["PYTHONPATH"] = str(base_path)
    if side == "on":
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    command = [sys.executable, __file__, "--one", "--turns", str(turns)]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def report(runs: dict[str, list[dict[str, Any]]], rev: str) -> None:
    table = Table(
        "text turns", f"base {rev}", "off", "on", "off / base", "on / base", title="medians"
    )

    def row(label: str, values: dict[str, list[float]], fmt: str) -> None:
        ratios = [
            geomean(
                [
                    max(y, 1e-3) / max(x, 1e-3)
                    for x, y in zip(values["base"], values[s], strict=True)
                ]
            )
            for s in ("off", "on")
        ]
        medians = [format(statistics.median(values[s]), fmt) for s in SIDES]
        table.add_row(label, *medians, *(f"{r:.3f}" for r in ratios))

    for process in runs["base"][0]["cpu"]:
        row(
            f"{process} CPU ms/turn",
            {s: [r["cpu"][process] for r in runs[s]] for s in SIDES},
            ".3f",
        )
    row("total CPU ms/turn", {s: [sum(r["cpu"].values()) for r in runs[s]] for s in SIDES}, ".3f")
    row("turns/s at K = 50", {s: [r["turns_per_s"] for r in runs[s]] for s in SIDES}, ".0f")
    row("p50 ms at K = 1", {s: [r["k1_p50_ms"] for r in runs[s]] for s in SIDES}, ".2f")
    console.print(table)


def hooks_off(events: float, base_cpu_ms: float) -> None:
    """Each hook's time per call with telemetry off, against the code it replaced, and
    what that bounds a text turn's extra work at (`events` appended per turn, at most one
    decision handed to `turn_events` per event)."""
    from datetime import UTC, datetime

    from turnstream.bus.tracing import msg_headers
    from turnstream.core.events import TurnEnded, TurnEndedData
    from turnstream.runtime import telemetry

    assert not telemetry.enabled()
    event = TurnEnded(
        id="0",
        time=datetime.now(UTC),
        session_id="s",
        chat_id="c",
        turn_id="t",
        trace_id="x",
        correlation_id="k",
        source="bench",
        data=TurnEndedData(status="completed"),
    )
    decision = [event] * 4
    cases = {
        'msg_headers(e) vs {"Nats-Msg-Id": e.id}': (
            lambda: msg_headers(event),
            lambda: {"Nats-Msg-Id": event.id},
        ),
        "telemetry.turn_events(decision) vs nothing": (
            lambda: telemetry.turn_events(decision),
            lambda: None,
        ),
        "with telemetry.tool_span(...) vs nothing": (_tool_span_off, lambda: None),
    }
    table = Table("hook, telemetry off", "ns per call", "replaced code ns", "extra ns")
    n = 200_000
    extra: dict[str, float] = {}
    for label, (hook, before) in cases.items():
        took = min(timeit.repeat(hook, number=n, repeat=5)) / n * 1e9
        was = min(timeit.repeat(before, number=n, repeat=5)) / n * 1e9
        extra[label] = max(took - was, 0.0)
        table.add_row(label, f"{took:.0f}", f"{was:.0f}", f"{took - was:.0f}")
    console.print(table)
    headers, decisions = list(extra.values())[:2]
    bound_us = events * (headers + decisions) / 1000
    console.print(
        f"a text turn appends {events:.1f} events: telemetry off adds at most "
        f"{bound_us:.1f} µs of work per turn, {bound_us / 10 / base_cpu_ms:.3f}% of the "
        f"{base_cpu_ms:.2f} CPU ms a turn costs the base"
    )


def _tool_span_off() -> None:
    from turnstream.runtime import telemetry

    with telemetry.tool_span(None, None):  # type: ignore[arg-type]
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="the revision before telemetry (default: fork point)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--turns", type=int, default=1000, help="turns of each K = 50 run")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one_run(args.turns)
        return
    if args.base is None:
        args.base = (
            subprocess.run(
                ["git", "merge-base", "HEAD", "main"], cwd=ROOT, capture_output=True, text=True
            ).stdout.strip()
            or "HEAD~1"
        )
    rev = subprocess.run(
        ["git", "rev-parse", "--short", args.base], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory() as tmp, otlp_sink() as (endpoint, taken):
        base_path = base_tree(args.base, Path(tmp))
        for n in range(args.rounds):
            for side in SIDES:
                runs[side].append(run_side(side, base_path, endpoint, args.turns))
            totals = ", ".join(f"{s} {sum(runs[s][-1]['cpu'].values()):.2f}" for s in SIDES)
            console.print(f"round {n + 1}/{args.rounds}: total CPU ms per turn {totals}")
    console.print(
        f"[bold]text turns[/], {args.rounds} rounds of {args.turns} at K = 50, base = "
        f"{args.base} ({rev}); the sink took {taken['requests']} OTLP requests, "
        f"{taken['bytes'] / 1e6:.1f} MB"
    )
    report(runs, rev)
    events = statistics.median(r["events_per_turn"] for r in runs["off"])
    hooks_off(events, statistics.median(sum(r["cpu"].values()) for r in runs["base"]))


if __name__ == "__main__":
    main()
