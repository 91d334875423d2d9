"""The local store's SQLite connections: one per concurrent reader, reused, closed with the store."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from mcpower.errors import IndexMismatchError
from mcpower.store.local.pool import ConnectionPool


@pytest.fixture
def uri(tmp_path: Path) -> str:
    path = tmp_path / "meta.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (x)")
        db.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(10)])
    db.close()
    return f"{path.as_uri()}?mode=ro&immutable=1"


def test_concurrent_readers_get_their_own_connection_and_reuse_it(uri: str) -> None:
    first = sqlite3.connect(uri, uri=True, check_same_thread=False)
    pool = ConnectionPool(uri, first)
    holding, done = threading.Event(), threading.Event()
    seen: list[sqlite3.Connection] = []

    def reader() -> None:
        with pool.connection() as db:
            seen.append(db)
            holding.set()
            done.wait(30)

    thread = threading.Thread(target=reader)
    thread.start()
    assert holding.wait(30)
    with pool.connection() as db:  # the other reader still holds its connection
        assert db is not seen[0]
        assert db.execute("SELECT count(*) FROM t").fetchone() == (10,)
        seen.append(db)
    done.set()
    thread.join()
    for _ in range(3):  # no third connection: both are reused
        with pool.connection() as db:
            assert any(db is s for s in seen)
    pool.close()


def test_close_closes_idle_and_returned_connections(uri: str) -> None:
    pool = ConnectionPool(uri, sqlite3.connect(uri, uri=True, check_same_thread=False))
    with pool.connection() as db:
        idle = db
    with pool.connection() as borrowed:
        pool.close()
        assert borrowed.execute("SELECT 1").fetchone() == (1,)  # still usable until given back
    for db in (idle, borrowed):
        with pytest.raises(sqlite3.ProgrammingError):
            db.execute("SELECT 1")
    with pytest.raises(sqlite3.ProgrammingError), pool.connection():
        pass


def test_without_a_uri_readers_share_the_one_connection() -> None:
    only = sqlite3.connect(":memory:", check_same_thread=False)
    pool = ConnectionPool(None, only)
    for _ in range(2):
        with pool.connection() as db:
            assert db is only
    pool.close()


def test_a_page_found_damaged_while_read_is_an_error_naming_the_dataset(tmp_path: Path) -> None:
    # Opening reads the schema and counts, not every page: a page damaged past them (a forged checksum)
    # fails only when a query reads it, and must say so as opening does, not as a raw sqlite3 error.
    path = tmp_path / "meta.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA page_size = 512")
        db.execute("CREATE TABLE t (x)")
        db.executemany("INSERT INTO t VALUES (?)", [(f"row {i} " * 10,) for i in range(200)])
    db.close()
    data = bytearray(path.read_bytes())
    data[-512:] = b"\xff" * 512  # the last page: one of t's leaves
    path.write_bytes(bytes(data))
    uri = f"{path.as_uri()}?mode=ro&immutable=1"
    pool = ConnectionPool(uri, sqlite3.connect(uri, uri=True, check_same_thread=False), source="docs: v1/meta.sqlite")

    with pool.connection() as db:  # what opening reads still reads
        assert db.execute("SELECT name FROM sqlite_master").fetchall() == [("t",)]
    expected = r"^docs: v1/meta.sqlite is not a readable SQLite database .*ingest"
    with pytest.raises(IndexMismatchError, match=expected), pool.connection() as db:
        db.execute("SELECT x FROM t").fetchall()
    with pool.connection() as db:  # the connection goes back to the pool, still usable
        assert db.execute("SELECT 1").fetchone() == (1,)
    unnamed = ConnectionPool(uri, sqlite3.connect(uri, uri=True, check_same_thread=False))
    with pytest.raises(sqlite3.DatabaseError), unnamed.connection() as db:
        db.execute("SELECT x FROM t").fetchall()
    pool.close()
    unnamed.close()
