"""The writer's disk spool: encoded batches kept while the database is unreachable or behind,
one file per batch (written, fsync'd, renamed), deleted only after its commit; bounded in bytes.
"""

# A writer owns its own subdirectory (flock'd); files left by a writer that died are adopted and
# replayed by the next writer of that run.

from __future__ import annotations

import bisect
import fcntl
import os
import struct
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

from loadgen.errors import SpoolFullError, StoreError
from workers.store.copyenc import REQUEST_LAYOUTS, REQUESTS_LAYOUT

MAGIC = b"PLSPOOL3"
# older files are still replayed: their requests payload has copyenc layout 1 (no connection or
# server timing columns); version 1 also has no request_blocks payload
MAGIC_V2 = b"PLSPOOL2"
MAGIC_V1 = b"PLSPOOL1"
# magic, n_records, n_ticks, len(requests, ticks, blocks), the requests payload's layout
_HEAD = struct.Struct(">8sIIQQQH")
_HEAD_V2 = struct.Struct(">8sIIQQQ")
_HEAD_V1 = struct.Struct(">8sIIQQ")
_HEADS = {MAGIC: _HEAD, MAGIC_V2: _HEAD_V2, MAGIC_V1: _HEAD_V1}
SUFFIX = ".batch"
FRESH = "-fresh"  # never attempted: replay may COPY it straight into the tables


@dataclass(frozen=True, slots=True)
class EncodedBatch:
    """What one transaction writes: binary COPY payloads of requests, ticks and request_blocks
    (b"" when there are none), the row counts of the first two, and the columns the requests
    payload has (a `copyenc.REQUEST_LAYOUTS` key)."""

    requests: bytes
    ticks: bytes
    n_records: int
    n_ticks: int
    blocks: bytes = b""
    layout: int = REQUESTS_LAYOUT

    @property
    def nbytes(self) -> int:
        return _HEAD.size + len(self.requests) + len(self.ticks) + len(self.blocks)

    def to_bytes(self) -> bytes:
        lens = (len(self.requests), len(self.ticks), len(self.blocks))
        head = _HEAD.pack(MAGIC, self.n_records, self.n_ticks, *lens, self.layout)
        return head + self.requests + self.ticks + self.blocks

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> EncodedBatch:
        head = _HEADS.get(bytes(data[:8]))
        if head is None:
            raise StoreError(f"spool file {where} is not a peakload spool batch")
        if len(data) < head.size:
            raise StoreError(f"spool file {where} is truncated")
        _, n_rec, n_ticks, len_req, len_ticks, *rest = head.unpack_from(data)
        len_blocks = rest[0] if rest else 0
        layout = rest[1] if len(rest) > 1 else 1
        if len(data) != head.size + len_req + len_ticks + len_blocks:
            raise StoreError(f"spool file {where} is not a complete peakload spool batch")
        if layout not in REQUEST_LAYOUTS:
            raise StoreError(f"spool file {where}: unknown requests layout {layout}")
        body = memoryview(data)[head.size :]
        a, b = len_req, len_req + len_ticks
        return cls(bytes(body[:a]), bytes(body[a:b]), n_rec, n_ticks, bytes(body[b:]), layout)


class Spool:
    """This writer's spool directory under `root`, holding at most `max_bytes` of batches."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.dir = root / f"w-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.dir.mkdir(mode=0o700)
        self._lock_fd = os.open(self.dir / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._seq = 0
        self.bytes = 0
        self._lock = threading.Lock()  # the encoder (spilling) and the writer thread share it
        self._pending: list[Path] = []  # batches on disk, oldest first
        self.adopt_orphans()

    def adopt_orphans(self) -> int:
        """Move batches of dead writers (their lock is free) into this spool, keeping their
        order ahead of ours. Returns how many files were adopted."""
        adopted = 0
        for other in sorted(p for p in self.root.glob("w-*") if p.is_dir() and p != self.dir):
            lock = other / ".lock"
            try:
                fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue  # a live writer owns it
            try:
                for f in sorted(other.glob("*" + SUFFIX)):
                    self._seq += 1
                    dest = self.dir / f"{self._seq:012d}-adopted{SUFFIX}"
                    f.rename(dest)
                    self.bytes += dest.stat().st_size
                    self._pending.append(dest)
                    adopted += 1
                for leftover in other.iterdir():
                    leftover.unlink()  # .lock and *.tmp from an interrupted write
                other.rmdir()
            finally:
                os.close(fd)
        if adopted:
            _fsync_dir(self.dir)
        return adopted

    def files(self) -> list[Path]:
        """Pending batches, oldest first."""
        with self._lock:
            return list(self._pending)

    def __len__(self) -> int:
        return len(self._pending)

    def reserve(self) -> int:
        """A place in the replay order: batches replay by this number, whenever spooled."""
        with self._lock:
            self._seq += 1
            return self._seq

    def put(self, batch: EncodedBatch, order: int | None = None, *, fresh: bool = False) -> Path:
        """Write a batch durably (tmp file, fsync, rename, fsync dir) at its place `order` (from
        `reserve`; default: last). Raises SpoolFullError, writing nothing, when it would take
        the spool past `max_bytes`. `fresh`: no attempt to commit it was made yet, so none of
        its rows can exist (see `is_fresh`)."""
        with self._lock:
            return self._put(batch, order, fresh)

    @staticmethod
    def is_fresh(path: Path) -> bool:
        return path.name.endswith(FRESH + SUFFIX)

    def _put(self, batch: EncodedBatch, order: int | None, fresh: bool) -> Path:
        size = batch.nbytes
        if self.bytes + size > self.max_bytes:
            raise SpoolFullError(
                f"store spool full: {self.bytes + size} bytes needed, limit {self.max_bytes} "
                f"(spool_max_bytes) at {self.dir}; the database has been unreachable too long "
                f"and {batch.n_records} records of this run could not be kept"
            )
        if order is None:
            self._seq += 1
            order = self._seq
        final = self.dir / f"{order:012d}{FRESH if fresh else ''}{SUFFIX}"
        tmp = final.with_suffix(".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                view = memoryview(batch.to_bytes())
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            tmp.rename(final)
            _fsync_dir(self.dir)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise SpoolFullError(f"cannot write the store spool at {self.dir}: {e}") from e
        self.bytes += size
        bisect.insort(self._pending, final)
        return final

    def read(self, path: Path) -> EncodedBatch:
        return EncodedBatch.from_bytes(path.read_bytes(), str(path))

    def remove(self, path: Path) -> None:
        """Forget a batch whose rows are committed."""
        with self._lock:
            size = path.stat().st_size
            path.unlink()
            self.bytes = max(0, self.bytes - size)
            self._pending.remove(path)

    def set_aside(self, path: Path) -> Path:
        """Keep a batch the database rejects for good (`.rejected`), out of the replay order."""
        with self._lock:
            self._pending.remove(path)
            dest = path.with_suffix(".rejected")
            path.rename(dest)
            return dest

    def close(self) -> None:
        """Release the directory: removed when it holds no batches (pending or rejected), else
        left, unlocked, for the next writer of the run to adopt."""
        if not any(p.suffix in (SUFFIX, ".rejected") for p in self.dir.iterdir()):
            for leftover in self.dir.iterdir():
                leftover.unlink()
            self.dir.rmdir()
        os.close(self._lock_fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
