"""(Not `bench/mcp.py`: run as a script, that name would shadow the `mcp` SDK.)

An MCP read-only tool over stdio vs a built-in read-only tool, per call, in one run.

    python bench/mcp_tools.py [--calls 300]

Both are called as the tool-executor calls them (`tool.run(args, ctx)`), interleaved so
machine load falls on all alike: `read_file` on a small file; `t__echo` of the SDK test
server (`tests/mcp/server.py`, FastMCP) over stdio; and `raw__echo` of a minimal stdio
server without the SDK (`bench/mcp_raw_server.py`), which shows what the client and the
pipe cost apart from a server's own time. Prints p50/p90 per call, the ratio and the
difference of the p50s in ms (issue 16: at most 1.5 ms over the built-in).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

from turnstream.settings import McpStdioServer
from turnstream.tools import ToolContext, builtin_tools
from turnstream.tools.mcp import McpTools

SERVER = Path(__file__).resolve().parent.parent / "tests" / "mcp" / "server.py"
RAW = Path(__file__).resolve().parent / "mcp_raw_server.py"


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


async def main(calls: int) -> None:
    logging.getLogger("mcp").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        (workspace / "notes.txt").write_text("the secret word is turnip\n")
        ctx = ToolContext(workspace, "bench", "inv")
        read_file = next(t for t in builtin_tools() if t.spec.name == "read_file")
        servers = {
            "t": McpStdioServer(command=sys.executable, args=[str(SERVER), "stdio"]),
            "raw": McpStdioServer(command=sys.executable, args=[str(RAW)]),
        }
        async with McpTools(servers, lambda _: None) as mcp:
            tools = {t.spec.name: t for t in mcp.tools()}
            runs = {
                "built-in read_file": (read_file, {"path": "notes.txt"}),
                "MCP t__echo (SDK FastMCP server, stdio)": (tools["t__echo"], {"text": "turnip"}),
                "MCP raw__echo (minimal server, stdio)": (tools["raw__echo"], {"text": "turnip"}),
            }
            times: dict[str, list[float]] = {name: [] for name in runs}
            for i in range(calls + 20):  # the first 20 warm up
                for name, (tool, args) in runs.items():
                    start = time.perf_counter()
                    await tool.run(args, ctx)
                    if i >= 20:
                        times[name].append((time.perf_counter() - start) * 1000)
    print(f"calls each: {calls}")
    base = statistics.median(times["built-in read_file"])
    for name, values in times.items():
        p50 = statistics.median(values)
        print(
            f"{name:42} p50 {p50:7.3f} ms  p90 {pct(values, 90):7.3f} ms  "
            f"ratio {p50 / base:5.1f}x  adds {p50 - base:6.3f} ms"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    asyncio.run(main(parser.parse_args().calls))
