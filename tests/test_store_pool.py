"""The local store's SQLite connections: one per concurrent reader, reused, closed with the store."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

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
