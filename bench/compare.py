"""This checkout against a baseline revision, side by side: CPU per turn of each process.

    python bench/compare.py [--base REV] [--rounds 4] [--turns 1500] [--script one-tool]
                            [--new-sessions]

The machines are shared and their speed drifts by a quarter within minutes, so two
benchmark runs minutes apart do not compare. This alternates short runs of the baseline
(a `git worktree` of REV) and of this checkout, `--rounds` times, each one
`bench/turns.py`'s K = 50 measurement (what each process spent per turn, the turns/s) and
K = 1's (p50, the runner's and the total CPU per turn), and reports each process's ratio
as the geometric mean of the ratios of neighbouring runs. `--new-sessions`: every turn
opens a new session (so each is a first load of its session, as a chat whose turns are
further apart than a lease's renewal is).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))
import stack
from turns import SCRIPTS, TurnWatcher, concurrent, cpu_seconds

console = Console(highlight=False)
ROOT = Path(__file__).parents[1]
K1_TURNS = 300
"""Turns one after the other at K = 1: what each process spends is read in 10 ms ticks, so
enough of them that a tick is a few percent of the runner's."""


async def measure(url: str, pids: dict[str, int], turns: int, new: bool) -> dict[str, Any]:
    from turnstream.bus import connect
    from turnstream.bus.streams import StreamLimits
    from turnstream.core.subjects import Subjects

    bus = await connect(url, Subjects("ts"), ensure=StreamLimits())
    watcher = TurnWatcher(bus)
    await watcher.start()
    try:
        await concurrent(watcher, 10, 200, "warm")
        before = cpu_seconds(pids)
        k1 = await concurrent(watcher, 1, K1_TURNS, "k1", new_sessions=new)
        after_k1 = cpu_seconds(pids)
        k50 = await concurrent(watcher, 50, turns, "k50", new_sessions=new)
        after = cpu_seconds(pids)
    finally:
        await bus.close()
    cpu = {p: (after[p] - after_k1[p]) * 1000 / k50["turns"] for p in pids}
    cpu_k1 = {p: (after_k1[p] - before[p]) * 1000 / k1["turns"] for p in pids}
    return {
        "k1_p50_ms": k1["p50_ms"],
        "turns_per_s": k50["turns_per_s"],
        "cpu": cpu,
        "cpu_k1": cpu_k1,
    }


def one_run(script: str, turns: int, new_sessions: bool) -> None:
    """Run the services of whichever `turnstream` is importable; print one JSON line."""
    from turnstream.bus.embedded import EmbeddedServer

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        stack.workspace(root, "auto")
        (root / "script.yaml").write_text(SCRIPTS[script])
        with (
            EmbeddedServer(root / "nats") as server,
            stack.running(server, root, root / "script.yaml", console) as supervisor,
        ):
            pids = stack.pids(supervisor, server)
            result = asyncio.run(measure(server.url, pids, turns, new_sessions))
            print(json.dumps(result))


def run_side(pythonpath: str | None, script: str, turns: int, new_sessions: bool) -> dict[str, Any]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    command = [sys.executable, __file__, "--one", script, "--turns", str(turns)]
    command += ["--new-sessions"] if new_sessions else []
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    # the last JSON line: the supervisor may say something after it (a service that did not
    # serve, e.g. the HTTP face's port taken by another stack on a shared machine)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def report(base: list[dict[str, Any]], head: list[dict[str, Any]], rev: str) -> None:
    table = Table("per one turn at K = 50", f"base {rev} (median)", "this (median)", "this / base")
    for process in base[0]["cpu"]:
        b = [r["cpu"][process] for r in base]
        h = [r["cpu"][process] for r in head]
        ratio = geomean([max(y, 1e-3) / max(x, 1e-3) for x, y in zip(b, h, strict=True)])
        table.add_row(
            f"{process} CPU ms",
            f"{statistics.median(b):.2f}",
            f"{statistics.median(h):.2f}",
            f"{ratio:.2f}",
        )
    rows: tuple[tuple[str, Callable[[dict[str, Any]], float]], ...] = (
        ("total CPU ms", lambda r: sum(r["cpu"].values())),
        ("turns/s at K = 50", lambda r: r["turns_per_s"]),
        ("p50 ms at K = 1", lambda r: r["k1_p50_ms"]),
        ("turn_runner CPU ms at K = 1", lambda r: r["cpu_k1"]["turn_runner"]),
        ("total CPU ms at K = 1", lambda r: sum(r["cpu_k1"].values())),
    )
    for label, of in rows:
        b = [of(r) for r in base]
        h = [of(r) for r in head]
        ratio = geomean([y / x for x, y in zip(b, h, strict=True)])
        table.add_row(
            label, f"{statistics.median(b):.2f}", f"{statistics.median(h):.2f}", f"{ratio:.2f}"
        )
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="HEAD~1", help="the baseline git revision")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--turns", type=int, default=1500, help="turns of each K = 50 run")
    parser.add_argument("--script", choices=list(SCRIPTS), default="one-tool")
    parser.add_argument("--new-sessions", action="store_true", help="every turn a new session")
    parser.add_argument("--one", choices=list(SCRIPTS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one_run(args.one, args.turns, args.new_sessions)
        return
    rev = subprocess.run(
        ["git", "rev-parse", "--short", args.base], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        tree, package = Path(tmp) / "tree", Path(tmp) / "package"
        subprocess.run(
            ["git", "worktree", "add", "--detach", "-q", str(tree), args.base], cwd=ROOT, check=True
        )
        try:
            package.mkdir()
            nested = tree / "services" / "turnstream"  # the layout since bd8b635
            (package / "turnstream").symlink_to(nested if nested.is_dir() else tree / "services")
            base, head = [], []
            for n in range(args.rounds):
                base.append(run_side(str(package), args.script, args.turns, args.new_sessions))
                head.append(run_side(None, args.script, args.turns, args.new_sessions))
                console.print(
                    f"round {n + 1}/{args.rounds}: total CPU ms per turn "
                    f"base {sum(base[-1]['cpu'].values()):.2f}, "
                    f"this {sum(head[-1]['cpu'].values()):.2f}"
                )
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT)
    sessions = ", each on a new session" if args.new_sessions else ""
    console.print(
        f"[bold]{args.script} turns[/]{sessions}, {args.rounds} rounds, base = {args.base}"
    )
    report(base, head, rev)


if __name__ == "__main__":
    main()
