"""Every chunk's place held in memory (store/local/places.py): the hits it answers are the ones the
SQL join reads, field for field (pages, languages, databases written before those columns, chunks
whose document is gone), kept as hits on a small dataset or made from columns on a big one; a
database holding values ingest never writes is read from SQLite instead."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from mcpower.store import ChunkHit
from mcpower.store.local import places as places_module
from mcpower.store.local.places import Places
from mcpower.store.local.schema import TABLES, hit_sql, missing_columns


def database(path: Path, seed: int, chunks: int = 300) -> sqlite3.Connection:
    """Documents with sparse ids, chunks with large sparse ids, repeated headings, PDF pages on some,
    several languages; one chunk whose document row is not there."""
    rng = np.random.default_rng(seed)
    db = sqlite3.connect(path, check_same_thread=False)
    db.executescript(TABLES)
    doc_ids = sorted(rng.choice(10_000, 20, replace=False).tolist())
    db.executemany(
        "INSERT INTO documents VALUES (?, ?, ?, ?, ?, ?, 'hash', ?, 'content')",
        [
            (d, f"dir/doc{d}.md", f"Title {d}", "pdf" if d % 2 else "md", d * 7, d / 3, f"2026-11-{d % 28 + 1:02d}")
            for d in doc_ids
        ],
    )
    chunk_ids = sorted(rng.choice(2**40, chunks, replace=False).tolist())
    rows = []
    for n, i in enumerate(chunk_ids):
        doc = doc_ids[n % len(doc_ids)] if n else 10_001  # the first chunk's document is gone
        paged = doc % 2 == 1
        rows.append(
            (
                i,
                doc,
                n,
                f"Section {n % 7} > Part {n % 3}",
                n * 3,
                n * 3 + int(rng.integers(0, 9)),
                f"text {n}",
                n % 5 + 1 if paged else None,
                n % 5 + 2 if paged else None,
                ["en", "de", "ja", "und"][n % 4],
            )
        )
    db.executemany(
        "INSERT INTO chunks (id, document_id, ordinal, heading_path, start_line, end_line, text, page_start,"
        " page_end, language) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    db.commit()
    return db


def places_of(db: sqlite3.Connection) -> Places:
    @contextmanager
    def connection() -> Iterator[sqlite3.Connection]:
        yield db

    count = db.execute("SELECT count(*) FROM chunks").fetchone()[0]
    return Places(count, connection, missing_columns(db))


def joined(db: sqlite3.Connection, ids: list[int]) -> dict[int, ChunkHit]:
    """What LocalStore.chunks(ids, text=False) reads from SQLite."""
    sql = f"{hit_sql(missing_columns(db), text=False)} WHERE c.id IN ({','.join('?' * len(ids))})"
    return {hit.id: hit for hit in map(ChunkHit.of_row, db.execute(sql, ids).fetchall())}


def asked(db: sqlite3.Connection, seed: int) -> list[int]:
    """Every chunk, a few twice, and ids that are no chunk."""
    every = [r[0] for r in db.execute("SELECT id FROM chunks")]
    rng = np.random.default_rng(seed)
    return [*every, *rng.choice(every, 10).tolist(), 5, 2**41]


@pytest.mark.parametrize("made", ["hits kept", "from columns"])
@pytest.mark.parametrize("seed", range(3))
def test_every_place_is_what_the_join_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, made: str
) -> None:
    if made == "from columns":
        monkeypatch.setattr(places_module, "MAX_HITS_CHUNKS", 0)
    db = database(tmp_path / "meta.sqlite", seed)
    places = places_of(db)
    places.load()
    table = places.table()
    assert table is not None
    ids = asked(db, seed)
    expected = joined(db, ids)
    assert table.hits(ids) == expected
    assert any(h.page_start is not None for h in expected.values())
    assert any(h.page_start is None for h in expected.values())
    assert len(expected) == 299  # every chunk but the one whose document is gone
    some = ids[5:40:3]
    assert table.hits(some) == joined(db, some)
    assert table.hits([]) == {}


@pytest.mark.parametrize("made", ["hits kept", "from columns"])
def test_a_database_written_before_pages_and_languages_reads_their_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, made: str
) -> None:
    if made == "from columns":
        monkeypatch.setattr(places_module, "MAX_HITS_CHUNKS", 0)
    db = database(tmp_path / "meta.sqlite", 7)
    for column in ("page_start", "page_end", "language"):
        db.execute(f"ALTER TABLE chunks DROP COLUMN {column}")
    places = places_of(db)
    places.load()
    table = places.table()
    assert table is not None
    ids = asked(db, 7)
    hits = table.hits(ids)
    assert hits == joined(db, ids)
    assert {(h.page_start, h.page_end, h.language) for h in hits.values()} == {(None, None, "und")}


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("start_line", 3.5),  # a REAL the integer columns would truncate
        ("ordinal", "seven"),
        ("end_line", 2**40),  # past the column's range
        ("page_start", "two"),
        ("heading_path", b"\x00\x01"),  # a BLOB
        ("id", 2**62),  # fine for an id: read as ever
    ],
)
def test_values_ingest_never_writes_leave_the_places_in_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, column: str, value: object
) -> None:
    monkeypatch.setattr(places_module, "MAX_HITS_CHUNKS", 0)
    db = database(tmp_path / "meta.sqlite", 3)
    first = db.execute("SELECT min(id) FROM chunks WHERE id > (SELECT min(id) FROM chunks)").fetchone()[0]
    db.execute(f"UPDATE chunks SET {column} = ? WHERE id = ?", (value, first))
    places = places_of(db)
    places.load()
    table = places.table()
    if column == "id":
        assert table is not None
        ids = asked(db, 3)
        assert table.hits(ids) == joined(db, ids)
    else:
        assert table is None  # the store reads its places from SQLite, as a big dataset's


def test_a_dataset_too_big_to_hold_reads_from_sqlite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(places_module, "MAX_PLACES_CHUNKS", 299)
    places = places_of(database(tmp_path / "meta.sqlite", 1))
    places.load()
    assert places.table() is None


def test_no_chunks_no_places(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "meta.sqlite")
    db.executescript(TABLES)
    places = places_of(db)
    places.load()
    table = places.table()
    assert table is not None and table.hits([1, 2]) == {} and table.nbytes == 0
