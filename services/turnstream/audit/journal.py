"""The audit file on disk: append-only JSONL, hash-chained (`chain.py`), one line per event.

Opening an existing file continues its chain from the last line. A record is written only
for a sequence past the last one in the file, so a redelivered event is not recorded
twice. A line cut short by a crash (no newline) is dropped on open: its event was not
acknowledged, so it is delivered and recorded again.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from turnstream.audit.chain import GENESIS, Recorded, raw_record_line, record_line, unseal

log = logging.getLogger("turnstream.audit")
_TAIL_CHUNK = 64 * 1024


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.head = GENESIS
        self.last_seq = 0
        self._buffer: list[bytes] = []
        self._file: BinaryIO | None = None

    def open(self) -> Journal:
        if not self.try_open():
            raise BlockingIOError(f"{self.path} is open in another process")
        return self

    def try_open(self) -> bool:
        """`open`, unless another process (or another `Journal`) has the file open: False.

        An exclusive `flock` for as long as it is open, so two audit instances sharing a
        data dir (`turnstream up`, tests) never write one chain at once; the lock goes with
        its process, however that ends."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        file = open(self.path, "ab+")  # closed by close()
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.close()
            return False
        try:
            last = self._last_line(file)
            if last is not None:
                record, self.head = unseal(last)  # broken: refuse to chain onto it
                seq = record.get("seq")
                if not isinstance(seq, int):
                    raise ValueError("the last record has no sequence")
                self.last_seq = seq
        except ValueError as exc:
            file.close()
            raise ValueError(f"{self.path}: {exc}; `turnstream audit verify` it") from exc
        self._file = file
        return True

    def add(self, seq: int, event: Recorded, raw: bytes) -> bool:
        """Record the event at `seq` unless the file already has it."""
        if seq <= self.last_seq:
            return False
        line, self.head = record_line(self.head, seq, event, raw)
        self._buffer.append(line)
        self.last_seq = seq
        return True

    def add_raw(self, seq: int, subject: str, raw: bytes) -> bool:
        """Record a message that is not a valid event (so the file still covers it)."""
        if seq <= self.last_seq:
            return False
        line, self.head = raw_record_line(self.head, seq, subject, raw)
        self._buffer.append(line)
        self.last_seq = seq
        return True

    def flush(self, *, sync: bool = False) -> None:
        """Write what was added (one write), hand it to the OS; `sync` also fsyncs."""
        assert self._file is not None, "Journal.flush before open()"
        if self._buffer:
            self._file.write(b"\n".join(self._buffer) + b"\n")
            self._buffer.clear()
            self._file.flush()
        if sync:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self.flush(sync=True)
            self._file.close()
            self._file = None

    def __enter__(self) -> Journal:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _last_line(self, file: BinaryIO) -> bytes | None:
        """The last complete line; a torn one after it is cut off."""
        size = file.seek(0, os.SEEK_END)
        if size == 0:
            return None
        tail, start = b"", size
        while start > 0:
            start = max(0, start - _TAIL_CHUNK)
            file.seek(start)
            tail = file.read(size - start)
            # the last line is complete when the file ends with a newline; look for the
            # newline before it (or the start of the file)
            if tail.count(b"\n") >= 2 or start == 0:
                break
        if not tail.endswith(b"\n"):
            cut = tail.rfind(b"\n") + 1
            log.warning("%s: dropping a torn last line (%d bytes)", self.path, len(tail) - cut)
            file.truncate(start + cut)
            tail = tail[:cut]
        lines = tail.splitlines()
        return lines[-1] if lines else None


JOURNAL_FILE = "audit.jsonl"
"""The audit file of a log of one partition (`TURNSTREAM_LOG_PARTITIONS` 1, the default):
the one file of every earlier version, continued."""
PARTITIONS_DIR = "audit"
"""With more partitions, partition k's audit file is `audit/<k>.jsonl`."""


def chain_path(data_dir: Path, partitions: int, k: int) -> Path:
    """Where the audit file of log partition `k` (of `partitions`) is kept in `data_dir`."""
    if partitions == 1:
        return data_dir / JOURNAL_FILE
    return data_dir / PARTITIONS_DIR / f"{k}.jsonl"


def chains_in(data_dir: Path) -> list[tuple[int | None, Path]]:
    """Every audit file in `data_dir`: `audit.jsonl` (partition None: a log of one
    partition), then `audit/<k>.jsonl` by k. Files kept aside (`audit-<time>.jsonl`, a
    chain of a log that is gone) are not listed."""
    found: list[tuple[int | None, Path]] = []
    if (data_dir / JOURNAL_FILE).is_file():
        found.append((None, data_dir / JOURNAL_FILE))
    folder = data_dir / PARTITIONS_DIR
    if folder.is_dir():
        numbered = [(int(f.stem), f) for f in folder.glob("*.jsonl") if f.stem.isdigit()]
        found += sorted(numbered)
    return found
