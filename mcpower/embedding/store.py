"""The embedding store: document vectors kept on disk as they are made, so an ingest that is
interrupted — Ctrl-C, a crash, a killed process, a laptop lid — resumes where it stopped instead of
embedding everything again, and a chunk met again (a file renamed, a dataset rebuilt under another
id) is not embedded twice.

    <cache dir>/embeddings/<space>.sqlite    one SQLite file per vector space, private (0600 in a 0700 folder)

A **vector space** is everything that decides a vector besides the text: the model's weights,
tokenizer and pooling (its fingerprint hashes those files), the backend's precision, the dimension
and the window the text is cut to (:func:`vector_space`). A vector is stored under a 16-byte hash
of its space and the exact text the model read (the chunk's heading path and text), so a key can
only ever find the vector that text gets from that model.

**Why the cache folder**, not the dataset's: it is this user's own (created 0700, refused if another
user owns it or can write it), while a datasets folder may be shared by a team or served to
others; it serves every catalog, a Milvus database included; and it is content-addressed, so what
one dataset embedded serves another. The dataset folder keeps only published versions.

**Crash-safe**: SQLite in WAL mode; each batch of vectors is one transaction, durable once
committed, so a kill loses at most the batch being embedded (WAL frames carry checksums: a torn
write at power loss is rolled back, never read). Nothing here is ever published: an ingest
publishes only once every vector is there.

**Never trusted blindly**: a vector read back must have the space's dimension, be finite and of
unit length (every embedder gives unit vectors), or it is deleted and embedded again; a file
that is not a store of this space is started afresh; any other SQLite error turns the store off
for the rest of that ingest, which goes on without it (logged once).

**Bounded**: after an ingest, vectors unused for ``MAX_AGE_DAYS`` go, then the least recently used
until the ones kept take at most the limit (``MCPOWER_EMBEDDING_STORE_MB``; freed pages go back to
the file system); a run's own vectors are never removed while it runs. Stores of other spaces
untouched that long are removed whole.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
import sqlite3
import stat
import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from mcpower.checksums import private_folder

if TYPE_CHECKING:
    from numpy.typing import NDArray

logger = logging.getLogger(__name__)

STORE_FOLDER = "embeddings"
SCHEMA = "1"
READ_BLOCK = 512  # keys per query: SQLite takes up to 32,766 variables; 512 vectors of 384 floats are 0.8 MB
MAX_AGE_DAYS = 30  # a vector unused this long is gone from the store at the next ingest's clean-up
NORM_TOLERANCE = 1e-3  # unit vectors, as every embedder gives them (float32 rounding is ~1e-7)
_NAME = re.compile(r"[0-9a-f]{32}\.sqlite")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class Space(Protocol):
    """What decides a vector besides its text (the parts of `mcpower.embedding.Embedder` used)."""

    model_name: str
    model_fingerprint: str
    backend: str
    dimension: int
    max_tokens: int


def vector_space(emb: Space) -> str:
    """The vector space of an embedder: 32 hex digits."""
    precision = "int8" if emb.backend == "onnx-int8" else emb.backend
    ident = f"{emb.model_fingerprint}|{precision}|{emb.dimension}|{emb.max_tokens}"
    return hashlib.sha256(ident.encode()).hexdigest()[:32]


class EmbeddingStore:
    """Vectors of one space on disk, written a batch at a time (module docstring). One thread."""

    def __init__(self, path: Path, db: sqlite3.Connection, space: str, dimension: int) -> None:
        self.path = path
        self.space = space
        self.dimension = dimension
        self._db: sqlite3.Connection | None = db
        self._prefix = space.encode() + b"\x00"
        self.damaged = 0  # vectors read back that failed a check, and were deleted

    @classmethod
    def open(cls, cache_dir: Path, emb: Space) -> EmbeddingStore | None:
        """The store of ``emb``'s space under ``cache_dir``, or None (logged) when it cannot be used."""
        space = vector_space(emb)
        try:
            folder = private_folder(cache_dir / STORE_FOLDER)
        except OSError as e:
            logger.warning(
                "no embedding store: %s is unusable (%s); an interrupted ingest will start over",
                cache_dir / STORE_FOLDER,
                e.strerror or e,
                extra={"event": "ingest.store_unusable"},
            )
            return None
        path = folder / f"{space}.sqlite"
        for attempt in (1, 2):
            try:
                return cls(path, _connect(path, space, emb), space, emb.dimension)
            except (sqlite3.DatabaseError, ValueError) as e:
                if attempt == 1:
                    logger.warning(
                        "embedding store %s was unreadable (%s): starting it afresh",
                        path,
                        e,
                        extra={"event": "ingest.store_reset"},
                    )
                    _remove(path)
                    continue
                reason = str(e)
            except OSError as e:
                reason = e.strerror or str(e)
            logger.warning(
                "no embedding store (%s: %s); an interrupted ingest will start over",
                path,
                reason,
                extra={"event": "ingest.store_unusable"},
            )
            break
        return None

    def __enter__(self) -> EmbeddingStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    @property
    def usable(self) -> bool:
        return self._db is not None

    def keys(self, texts: Sequence[str]) -> list[bytes]:
        """The key of each text's vector in this space."""
        p = self._prefix
        return [hashlib.sha256(p + t.encode("utf-8", "surrogatepass")).digest()[:16] for t in texts]

    def load(self, keys: Sequence[bytes], out: NDArray[np.float32], rows: Sequence[int]) -> NDArray[np.bool_]:
        """Copy the stored vector of ``keys[i]`` into ``out[rows[i]]`` where there is a sound one;
        which were copied. Read ``READ_BLOCK`` at a time; each one found is marked used."""
        found = np.zeros(len(keys), dtype=bool)
        now = int(time.time())
        for start in range(0, len(keys), READ_BLOCK):
            block = list(keys[start : start + READ_BLOCK])
            got = self._select(block)
            if got is None:
                break
            sound = []
            for i, key in enumerate(block):
                vector = got.get(key)
                if vector is not None:
                    out[rows[start + i]] = vector
                    found[start + i] = True
                    sound.append(key)
            self._touch(sound, now)
        return found

    def has(self, keys: Sequence[bytes]) -> NDArray[np.bool_]:
        """Which keys have a vector stored, unread and unchecked (a dry run's count)."""
        found = np.zeros(len(keys), dtype=bool)
        for start in range(0, len(keys), READ_BLOCK):
            block = list(keys[start : start + READ_BLOCK])
            rows = self._rows("key", block)
            if rows is None:
                break
            present = {k for (k,) in rows}
            found[start : start + len(block)] = [k in present for k in block]
        return found

    def blocks(self, keys: Sequence[bytes], size: int = READ_BLOCK) -> Iterator[NDArray[np.float32]]:
        """The vectors of ``keys`` in their order, ``size`` rows at a time, never all in memory:
        for an index build that streams them.

        Raises:
            KeyError: a key has no sound vector (store each one first, and check with ``load``).
        """
        for start in range(0, len(keys), size):
            block = list(keys[start : start + size])
            got = self._select(block)
            if got is None:
                raise KeyError("the embedding store became unusable while it was read")
            missing = [k for k in block if k not in got]
            if missing:
                raise KeyError(f"{len(missing)} vectors are not in the embedding store")
            yield np.vstack([got[k] for k in block]) if block else np.zeros((0, self.dimension), np.float32)

    def put(self, keys: Sequence[bytes], vectors: NDArray[np.float32]) -> None:
        """Store a batch of vectors in one transaction (a crash keeps all of it or none)."""
        if self._db is None or not len(keys):
            return
        now = int(time.time())
        data = np.ascontiguousarray(vectors, dtype=np.float32)
        unit = np.abs(np.linalg.norm(data, axis=1) - 1.0) <= NORM_TOLERANCE  # no other kind would be read back
        rows = [(k, data[i].tobytes(), now) for i, k in enumerate(keys) if unit[i]]
        try:
            with self._db:
                self._db.executemany("INSERT OR REPLACE INTO vectors (key, vector, used) VALUES (?, ?, ?)", rows)
        except sqlite3.Error as e:
            self._fail("written", e)

    def rate(self) -> tuple[float, str] | None:
        """(characters per second, when measured) of the last ingest embedding enough to time."""
        row = self._meta("rate")
        if row is None:
            return None
        try:
            value, when = row.split(" ", 1)
            per_second = float(value)
        except ValueError:
            return None
        return (per_second, when) if math.isfinite(per_second) and 0 < per_second < 1e9 else None

    def record_rate(self, chars: int, seconds: float) -> None:
        """Remember how fast this machine embedded (for the next ingest's estimate)."""
        if seconds <= 0 or chars <= 0 or self._db is None:
            return
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d")
        try:
            with self._db:
                self._db.execute("INSERT OR REPLACE INTO meta VALUES ('rate', ?)", (f"{chars / seconds:.6g} {stamp}",))
        except sqlite3.Error as e:
            self._fail("written", e)

    def trim(self, max_bytes: int, now: float | None = None) -> None:
        """Drop what has not been used for MAX_AGE_DAYS, then the least recently used until the
        vectors kept take at most ``max_bytes``; other spaces' stores untouched that long go too."""
        if self._db is None:
            return
        now = time.time() if now is None else now
        try:
            db = self._db
            with db:
                db.execute("DELETE FROM vectors WHERE used < ?", (int(now - MAX_AGE_DAYS * 86400),))
                excess = len(self) - max_bytes // self.record_bytes
                if excess > 0:
                    db.execute(
                        "DELETE FROM vectors WHERE rowid IN (SELECT rowid FROM vectors ORDER BY used, rowid LIMIT ?)",
                        (excess,),
                    )
            db.execute("PRAGMA incremental_vacuum").fetchall()  # a step per page freed
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as e:
            self._fail("cleaned up", e)
        _remove_stale(self.path.parent, self.path, now)

    @property
    def record_bytes(self) -> int:
        """What one vector takes on disk, about: its floats, its key and SQLite's own bytes."""
        return 4 * self.dimension + 64

    def __len__(self) -> int:
        if self._db is None:
            return 0
        return int(self._db.execute("SELECT count(*) FROM vectors").fetchone()[0])

    # ------------------------------------------------------------ inside

    def _select(self, block: list[bytes]) -> dict[bytes, NDArray[np.float32]] | None:
        """The sound vectors among ``block`` (None: the store is unusable); unsound ones are deleted."""
        rows = self._rows("key, vector", block)
        if rows is None:
            return None
        got: dict[bytes, NDArray[np.float32]] = {}
        bad = []
        for key, blob in rows:
            vector = self._check(blob)
            if vector is None:
                bad.append(key)
            else:
                got[key] = vector
        if bad and self._db is not None:
            self.damaged += len(bad)
            logger.warning(
                "%d vectors in the embedding store %s failed their checks: deleted, they are embedded again",
                len(bad),
                self.path,
                extra={"event": "ingest.store_damaged"},
            )
            try:
                with self._db:
                    self._db.executemany("DELETE FROM vectors WHERE key = ?", [(k,) for k in bad])
            except sqlite3.Error as e:
                self._fail("written", e)
        return got

    def _rows(self, columns: str, block: list[bytes]) -> list[Any] | None:
        """``columns`` of the rows of ``block``'s keys (None: the store is unusable)."""
        if self._db is None:
            return None
        try:
            marks = ",".join("?" * len(block))
            return self._db.execute(f"SELECT {columns} FROM vectors WHERE key IN ({marks})", block).fetchall()
        except sqlite3.Error as e:
            self._fail("read", e)
            return None

    def _check(self, blob: object) -> NDArray[np.float32] | None:
        if not isinstance(blob, bytes) or len(blob) != 4 * self.dimension:
            return None
        vector = np.frombuffer(blob, dtype=np.float32)
        if not np.isfinite(vector).all() or abs(float(np.linalg.norm(vector)) - 1.0) > NORM_TOLERANCE:
            return None
        return vector

    def _touch(self, keys: list[bytes], now: int) -> None:
        """Mark vectors used now (those marked within the hour are left alone: fewer writes)."""
        if self._db is None or not keys:
            return
        try:
            with self._db:
                marks = ",".join("?" * len(keys))
                self._db.execute(
                    f"UPDATE vectors SET used = ? WHERE used < ? AND key IN ({marks})", [now, now - 3600, *keys]
                )
        except sqlite3.Error as e:
            self._fail("written", e)

    def _meta(self, key: str) -> str | None:
        if self._db is None:
            return None
        try:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        except sqlite3.Error as e:
            self._fail("read", e)
            return None
        return row[0] if row and isinstance(row[0], str) else None

    def _fail(self, what: str, e: sqlite3.Error) -> None:
        """Turn the store off for the rest of this run; the ingest goes on without it."""
        logger.warning(
            "the embedding store %s cannot be %s (%s): this ingest goes on without it",
            self.path,
            what,
            e,
            extra={"event": "ingest.store_failed"},
        )
        self.close()


def _connect(path: Path, space: str, emb: Space) -> sqlite3.Connection:
    """The store's connection, its file created private and not through a symlink, its schema
    checked (ValueError: it belongs to another space or schema)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o600)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (hasattr(os, "getuid") and st.st_uid != os.getuid()):
            raise OSError(1, "not a regular file of this user")
    finally:
        os.close(fd)
    db = sqlite3.connect(path, timeout=30)  # `with db:` makes one transaction of each batch
    try:
        db.execute("PRAGMA auto_vacuum = INCREMENTAL")  # before the first table: freed pages go back
        if db.execute("PRAGMA journal_mode = WAL").fetchone()[0].lower() != "wal":
            raise ValueError("cannot use write-ahead logging")
        db.execute("PRAGMA synchronous = NORMAL")  # WAL: durable against a crash, one fsync per checkpoint
        with db:
            db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            db.execute(
                "CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vector BLOB NOT NULL, used INTEGER NOT NULL)"
            )
            db.execute("CREATE INDEX IF NOT EXISTS vectors_used ON vectors (used)")
            want = {"schema": SCHEMA, "space": space, "dimension": str(emb.dimension), "model": emb.model_name[:200]}
            have = dict(db.execute("SELECT key, value FROM meta WHERE key IN ('schema', 'space', 'dimension')"))
            if not have:
                db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", list(want.items()))
            elif any(have.get(k) != want[k] for k in ("schema", "space", "dimension")):
                raise ValueError(f"it is not a store of this model (schema {have.get('schema')!r})")
    except BaseException:
        db.close()
        raise
    return db


def _remove(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        try:
            os.unlink(f"{path}{suffix}")
        except FileNotFoundError:
            pass
        except OSError as e:
            logger.debug("cannot remove %s%s: %s", path, suffix, e)


def _remove_stale(folder: Path, keep: Path, now: float) -> None:
    """Remove other spaces' stores (only files named as stores are) untouched for MAX_AGE_DAYS."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if not _NAME.fullmatch(name) or folder / name == keep:
            continue
        try:
            st = os.stat(folder / name, follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and now - st.st_mtime > MAX_AGE_DAYS * 86400:
            _remove(folder / name)
