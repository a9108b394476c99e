"""`turnstream status` with no session: how full the log is (docs/operations.md, "The log
full")."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from turnstream.cli.common import console, run_on_bus

if TYPE_CHECKING:
    from turnstream.bus import Bus
    from turnstream.settings import Settings


def show_storage(settings: Settings, as_json: bool) -> bool:
    """Print each stream against its limit and every process's alarm; whether the log is
    full (a process's appends are refused, or a stream or the account is at its limit)."""
    import orjson

    async def work(bus: Bus) -> dict[str, Any]:
        return await bus.storage_usage()

    usage = run_on_bus(settings, work)
    refusing = [p for p in usage["processes"] if p.get("full")]
    account = usage["account"]
    full = bool(refusing or usage["atLimit"])
    if as_json:
        sys.stdout.write(orjson.dumps({**usage, "full": full}).decode() + "\n")
        return full
    if full:
        console.print(
            "[bold red]the log is full[/]: JetStream refuses appends; free space "
            "(docs/operations.md, 'The log full')"
        )
    else:
        console.print("[green]the log takes appends[/]")
    for s in usage["streams"]:
        limit = s["maxBytes"]
        share = f" ({100 * s['bytes'] / limit:.0f}% of {_size(limit)})" if limit > 0 else ""
        mark = "  [red]at its limit[/]" if s["stream"] in usage["atLimit"] else ""
        console.print(f"  {s['stream']:<24} {_size(s['bytes']):>10}{share}{mark}")
    limit = account["maxBytes"]
    of = f" of {_size(limit)}" if limit and limit > 0 else " (no account limit)"
    console.print(f"  account storage          {_size(account['bytes']):>10}{of}")
    now = time.time()
    for p in refusing:
        kinds = ", ".join(
            f"{kind}.* for {now - since:.0f} s" for kind, since in p.get("refusing", {}).items()
        )
        console.print(
            f"  [red]{p.get('source')}[/]: appends refused ({kinds}); "
            f"{p.get('refused')} refused in all; last: {p.get('lastError')}"
        )
    if not usage["processes"]:
        console.print("  (no service answered: are they running?)")
    return full


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"
