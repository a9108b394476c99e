"""How long `turnstream` takes to start: `--help`, `send --help` and `tail --help`, each
run side by side with `python -c pass` (the interpreter's own start), interleaved, and the
median of each; the target is at most 0.3 s over the interpreter (issue 28).

    .venv/bin/python bench/cli_start.py [--runs 15]
    .venv/bin/python bench/cli_start.py --importtime   # what each start imports, largest first

Run it on an idle machine: the figures are wall-clock times of whole processes.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS: dict[str, list[str]] = {
    "python -c pass": ["-c", "pass"],
    "turnstream --help": ["-m", "turnstream.cli", "--help"],
    "turnstream send --help": ["-m", "turnstream.cli", "send", "--help"],
    "turnstream tail --help": ["-m", "turnstream.cli", "tail", "--help"],
}
TARGET_S = 0.3


def once(args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, capture_output=True)
    return time.perf_counter() - started


def importtime(args: list[str], top: int) -> None:
    """The `-X importtime` tree's top-level entries by cumulative time (a hint of what to
    import lazily: the counts matter more than these times on a loaded machine)."""
    run = subprocess.run(
        [sys.executable, "-X", "importtime", *args], capture_output=True, text=True, check=True
    )
    rows = []
    for line in run.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            name = parts[2]
            depth = (len(name) - len(name.lstrip())) // 2
            rows.append((int(parts[1]), depth, name.strip()))
    print(f"  {len(rows)} modules imported; largest (cumulative µs, depth ≤ 2):")
    for cumulative, depth, name in sorted((r for r in rows if r[1] <= 2), reverse=True)[:top]:
        print(f"    {cumulative:>9}  {'  ' * depth}{name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--importtime", action="store_true", help="print the import trees")
    args = parser.parse_args()
    if args.importtime:
        for name, argv in COMMANDS.items():
            print(name)
            importtime(argv, 15)
        return
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for argv in COMMANDS.values():  # warm the file cache first
        once(argv)
    for _ in range(args.runs):
        for name, argv in COMMANDS.items():
            times[name].append(once(argv))
    base = statistics.median(times["python -c pass"])
    print(f"{'command':<26} {'median':>9} {'over python':>12}  (target ≤ {TARGET_S:g} s over)")
    for name, values in times.items():
        median = statistics.median(values)
        over = median - base
        mark = "" if name.startswith("python") else ("  ok" if over <= TARGET_S else "  SLOW")
        print(f"{name:<26} {median * 1000:>7.0f}ms {over * 1000:>10.0f}ms{mark}")


if __name__ == "__main__":
    main()
