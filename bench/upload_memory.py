"""The HTTP face's memory while a large file is uploaded as a multipart message: flat?

    python bench/upload_memory.py [--mb 50] [--small-mb 5]

Starts an embedded nats-server and the services as separate processes (as `turnstream up`
does), the HTTP face among them, then uploads a file of `--small-mb` and one of `--mb`
(random bytes, `application/pdf`) to `POST /v1/sessions/{id}/messages` as
multipart/form-data, from a file on disk (httpx streams it). Printed: the face's resident
set size idle, and its peak (`VmHWM`: the kernel's high-water mark, so nothing between two
samples is missed) after each upload. A face that holds a file whole grows by about the
file's size (more: the parser's copies); one that streams it grows by a few chunks,
whatever the size. A JSON body cannot carry it (inline attachments stop at 128 KiB, the
command at `TURNSTREAM_MAX_INPUT_BYTES`): that baseline is the whole file held, at least.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import tempfile
import time
from pathlib import Path

import httpx
import stack
from rich.console import Console

from turnstream.bus.embedded import EmbeddedServer

console = Console(highlight=False, width=120)
SCRIPT = 'replies:\n  - {text: "noted", chunks: whole}\n'


def status_mib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def upload(url: str, path: Path, session: str) -> tuple[int, float]:
    """Status and seconds of one multipart message carrying the file at `path`."""
    async with httpx.AsyncClient(base_url=url, timeout=600) as http:
        started = time.perf_counter()
        with path.open("rb") as f:
            r = await http.post(
                f"/v1/sessions/{session}/messages",
                data={"text": "here is the file"},
                files={"files": (path.name, f, "application/pdf")},
            )
        took = time.perf_counter() - started
    if r.status_code != 202:
        raise SystemExit(f"upload refused: {r.status_code} {r.text[:300]}")
    return r.status_code, took


def a_file(root: Path, mib: int) -> Path:
    path = root / f"file-{mib}mb.pdf"
    with path.open("wb") as f:
        for _ in range(mib):
            f.write(os.urandom(1024 * 1024))
    return path


async def until_ready(url: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=5) as http:
        for _ in range(300):
            try:
                if (await http.get("/readyz")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
    raise SystemExit("the HTTP face did not come up")


async def measure(url: str, pid: int, root: Path, small: int, large: int) -> None:
    await until_ready(url)
    await upload(url, a_file(root, 1), "warm-up")  # the first request's imports and buffers
    await asyncio.sleep(1)
    idle, idle_peak = status_mib(pid, "VmRSS"), status_mib(pid, "VmHWM")
    console.print(f"HTTP face idle: RSS {idle:.1f} MiB, peak so far {idle_peak:.1f} MiB")
    for mib in (small, large):
        path = a_file(root, mib)
        _, took = await upload(url, path, f"upload-{mib}")
        peak, now = status_mib(pid, "VmHWM"), status_mib(pid, "VmRSS")
        console.print(
            f"after {mib:>3} MiB ({mib / took:.1f} MiB/s): peak {peak:.1f} MiB "
            f"(+{peak - idle:.1f} over idle RSS), RSS now {now:.1f} MiB"
        )
        path.unlink()
    console.print(
        "[dim]holding the file whole would add at least its size; machine load from other "
        "processes changes the speed, not the peak[/]"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--small-mb", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(Path(tmp) / "nats") as server:
        root = Path(tmp)
        script = root / "script.yaml"
        script.write_text(SCRIPT)
        port = free_port()
        os.environ["TURNSTREAM_HTTP_ADDR"] = f"127.0.0.1:{port}"
        os.environ["TURNSTREAM_LOG_LEVEL"] = "WARNING"
        os.environ["TURNSTREAM_ATTACHMENT_MAX_BYTES"] = str((args.mb + 1) * 1024 * 1024)
        stack.workspace(root, "auto")
        with stack.running(server, root, script, console) as supervisor:
            pid = supervisor.children["http"].pid
            asyncio.run(measure(f"http://127.0.0.1:{port}", pid, root, args.small_mb, args.mb))


if __name__ == "__main__":
    main()
