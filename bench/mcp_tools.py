"""(Not `bench/mcp.py`: run as a script, that name would shadow the `mcp` SDK.)

An MCP read-only tool over stdio vs a built-in read-only tool, per call, in one run.

    python bench/mcp_tools.py [--calls 300]

Both are called as the tool-executor calls them (`tool.run(args, ctx)`), interleaved so
machine load falls on both alike: `read_file` on a small file, and `t__echo` of the SDK
test server (`tests/mcp/server.py`) over stdio. Prints p50/p90 per call, the ratio and the
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


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


async def main(calls: int) -> None:
    logging.getLogger("mcp").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        (workspace / "notes.txt").write_text("the secret word is turnip\n")
        ctx = ToolContext(workspace, "bench", "inv")
        read_file = next(t for t in builtin_tools() if t.spec.name == "read_file")
        config = McpStdioServer(command=sys.executable, args=[str(SERVER), "stdio"])
        async with McpTools({"t": config}, lambda _: None) as mcp:
            echo = next(t for t in mcp.tools() if t.spec.name == "t__echo")
            for _ in range(20):  # warm up both
                await echo.run({"text": "turnip"}, ctx)
                await read_file.run({"path": "notes.txt"}, ctx)
            builtin_ms: list[float] = []
            mcp_ms: list[float] = []
            for _ in range(calls):
                start = time.perf_counter()
                await read_file.run({"path": "notes.txt"}, ctx)
                builtin_ms.append((time.perf_counter() - start) * 1000)
                start = time.perf_counter()
                await echo.run({"text": "turnip"}, ctx)
                mcp_ms.append((time.perf_counter() - start) * 1000)
    b50, m50 = statistics.median(builtin_ms), statistics.median(mcp_ms)
    print(f"calls each: {calls}")
    print(f"built-in read_file   p50 {b50:.3f} ms  p90 {pct(builtin_ms, 90):.3f} ms")
    print(f"MCP t__echo (stdio)  p50 {m50:.3f} ms  p90 {pct(mcp_ms, 90):.3f} ms")
    print(f"ratio MCP/built-in p50: {m50 / b50:.1f}x; MCP adds {m50 - b50:.3f} ms p50 per call")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    asyncio.run(main(parser.parse_args().calls))
