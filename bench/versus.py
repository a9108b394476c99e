"""turnstream against the LangGraph peer, side by side in one run: issue 25's goal table.

    python bench/versus.py --peer-python /path/to/peer/.venv/bin/python [--turns 1000]

Runs `bench/turns.py`, then the peer (`langgraph_turns.py --repeat 1`, in its own venv
made from its lock file: LangGraph is not a dependency of this project), then
`bench/turns.py` again, and prints the three peer goals as ratios of turnstream's figure
(both of its runs) to the peer's InMemory figure from between them, and the other three
(first turn, text turn, depth) as turnstream's own ratios. The peer's K = 1 p50 is its
`seq_new` (a new thread per turn); its p50 inside its K = 1 throughput worker is printed
too. The machines are shared and drift, so only ratios from one such run compare.

Make the peer's venv once:
    python3 -m venv /tmp/peer
    /tmp/peer/bin/pip install -r ../shared/bench/peers/requirements-lock.txt
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

console = Console(highlight=False)
ROOT = Path(__file__).parents[1]
PEERS = ROOT.parent / "shared" / "bench" / "peers"


def ours(turns: int, out: Path) -> dict[str, Any]:
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "turns.py"), "--turns", str(turns), "--json", out],
        check=True,
        cwd=ROOT,
    )
    return json.loads(out.read_text())


def peer(python: str, peers: Path, out: Path) -> dict[str, Any]:
    subprocess.run(
        [python, str(peers / "langgraph_turns.py"), "--repeat", "1", "--out", out],
        check=True,
        cwd=peers,
    )
    mem = json.loads(out.read_text())["summary"]["mem"]
    return {
        "k1_p50_ms": mem["seq_new"]["p50_ms"]["median"],
        "k1_worker_p50_ms": mem["tput_k1"]["p50_ms"]["median"],
        "k50_turns_per_s": mem["tput_k50"]["turns_per_s"]["median"],
        "cpu_ms_per_turn": mem["tput_k50"]["cpu_util"]["median"]
        * 1000
        / mem["tput_k50"]["turns_per_s"]["median"],
    }


def figures(run: dict[str, Any]) -> dict[str, float]:
    tool, text = run["one-tool"], run["text"]
    k50 = next(r for r in tool["turns"] if r["k"] == 50)
    k1 = next(r for r in tool["turns"] if r["k"] == 1)
    cpu = sum(tool["cpu_ms_per_turn_k50"].values())
    return {
        "k50_turns_per_s": k50["turns_per_s"],
        "k1_p50_ms": k1["p50_ms"],
        "cpu_ms_per_turn": cpu,
        "first_vs_later": tool["first_turns_k50"]["cpu_ms_per_turn"]
        / tool["cpu_ms_per_turn_total_by_k"]["50"],
        "text_vs_tool": sum(text["cpu_ms_per_turn_k50"].values()) / cpu,
        "depth": text["depth"]["ratio"],
    }


def report(a: dict[str, float], b: dict[str, float], p: dict[str, float]) -> None:
    table = Table(
        "one-tool turn", "turnstream (run 1 / run 2)", "LangGraph InMemory", "ratio", "goal"
    )
    rows = [
        ("turns/s at K = 50", "k50_turns_per_s", "{:.0f}", "≥ 2×"),
        ("p50 at K = 1, ms", "k1_p50_ms", "{:.2f}", "≤ 1×"),
        ("CPU per turn, ms (all processes)", "cpu_ms_per_turn", "{:.2f}", "≤ 1×"),
    ]
    for label, key, fmt, goal in rows:
        ratios = [a[key] / p[key], b[key] / p[key]]
        table.add_row(
            label,
            f"{fmt.format(a[key])} / {fmt.format(b[key])}",
            fmt.format(p[key]),
            " / ".join(f"{r:.2f}×" for r in ratios),
            goal,
        )
    console.print(table)
    console.print(
        f"peer's K = 1 p50 inside its throughput worker: {p['k1_worker_p50_ms']:.2f} ms "
        f"(turnstream / that: {a['k1_p50_ms'] / p['k1_worker_p50_ms']:.2f}× / "
        f"{b['k1_p50_ms'] / p['k1_worker_p50_ms']:.2f}×)"
    )
    for label, key, goal in [
        ("first turn of a session / later turn, CPU", "first_vs_later", "≤ 1.2×"),
        ("text turn / one-tool turn, CPU", "text_vs_tool", "≤ 0.5×"),
        ("depth: text turns 46-50 / 1-5, p50", "depth", "flat"),
    ]:
        console.print(f"{label}: {a[key]:.2f}× / {b[key]:.2f}× (goal {goal})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer-python", required=True, help="python of the peer's venv")
    parser.add_argument("--peers", type=Path, default=PEERS, help="where langgraph_turns.py is")
    parser.add_argument("--turns", type=int, default=1000, help="turns per K>1 run")
    parser.add_argument("--json", type=Path, default=Path("bench/results/versus.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        first = ours(args.turns, Path(tmp) / "a.json")
        theirs = peer(args.peer_python, args.peers, Path(tmp) / "peer.json")
        second = ours(args.turns, Path(tmp) / "b.json")
    a, b = figures(first), figures(second)
    report(a, b, theirs)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    both = {"turnstream": [a, b], "langgraph_in_memory": theirs}
    args.json.write_text(json.dumps(both, indent=2))
    console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
