"""The embedding store (mcpower/embedding/store.py): vectors kept on disk, keyed by text and vector
space, read back only when sound, bounded, and never a reason for an ingest to fail."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import FakeEmbedder, write_files

from mcpower.defaults import DEFAULT_EMBEDDING_STORE_MB as STORE_MB
from mcpower.embedding.store import MAX_AGE_DAYS, EmbeddingStore, vector_space
from mcpower.ingestion import IngestOptions, ingest
from mcpower.plan import SLICE, IngestPlan, embed_new

TEXTS = [f"chunk {i} about the zephyrine daemon and quokka number {i}" for i in range(40)]
MANY = [f"chunk {i} about the zephyrine daemon and quokka number {i}" for i in range(SLICE + 6)]


def long_document() -> str:
    """More chunks than a slice: an ingest of it uses the store (a shorter one leaves it closed)."""
    return "# A\n\n" + "\n".join(
        f"## Part {p}\n\nThe zephyrine daemon of the alpha document runs part {p} at night.\n" for p in range(SLICE + 6)
    )


class Int8Fake(FakeEmbedder):
    backend = "onnx-int8"


def stored(cache: Path, emb: FakeEmbedder | None = None) -> EmbeddingStore:
    store = EmbeddingStore.open(cache, emb or FakeEmbedder())
    assert store is not None
    return store


def test_vectors_come_back_only_for_the_same_text_in_the_same_space(tmp_path: Path) -> None:
    emb = FakeEmbedder()
    with stored(tmp_path) as store:
        keys = store.keys(TEXTS)
        store.put(keys, emb.embed_documents(TEXTS))
    out = np.zeros((41, emb.dimension), np.float32)
    with stored(tmp_path) as store:  # reopened: on disk
        found = store.load(store.keys([*TEXTS[:3], "a text never stored"]), out, [5, 6, 7, 8])
    assert found.tolist() == [True, True, True, False]
    assert np.array_equal(out[5:8], emb.embed_documents(TEXTS[:3])) and not out[8].any()
    assert vector_space(Int8Fake()) != vector_space(emb)  # int8 vectors are other vectors
    with stored(tmp_path, Int8Fake()) as other:
        assert not other.load(other.keys(TEXTS[:3]), out, [0, 1, 2]).any()


def test_blocks_stream_vectors_in_order_without_holding_them_all(tmp_path: Path) -> None:
    emb = FakeEmbedder()
    with stored(tmp_path) as store:
        keys = store.keys(TEXTS)
        store.put(keys, emb.embed_documents(TEXTS))
        order = keys[::-1]
        blocks = list(store.blocks(order, size=16))
        assert [len(b) for b in blocks] == [16, 16, 8]
        assert np.array_equal(np.vstack(blocks), emb.embed_documents(TEXTS[::-1]))
        with pytest.raises(KeyError, match="1 vectors are not in the embedding store"):
            list(store.blocks([*keys[:2], store.keys(["never stored"])[0]]))


@pytest.mark.parametrize(
    "damage",
    [
        lambda v: v[:-4],  # short
        lambda v: np.full(len(v) // 4, np.nan, np.float32).tobytes(),  # not finite
        lambda v: (np.frombuffer(v, np.float32) * 2).astype(np.float32).tobytes(),  # not of unit length
        lambda v: "text",  # not bytes
    ],
    ids=["short", "nan", "not-unit", "not-bytes"],
)
def test_a_damaged_vector_is_never_used_and_is_embedded_again(tmp_path: Path, damage: object) -> None:
    emb = FakeEmbedder()
    with stored(tmp_path) as store:
        store.put(store.keys(MANY), emb.embed_documents(MANY))
        path = store.path
    db = sqlite3.connect(path)
    (blob,) = db.execute("SELECT vector FROM vectors LIMIT 1").fetchone()
    with db:
        db.execute("UPDATE vectors SET vector = ? WHERE rowid = (SELECT min(rowid) FROM vectors)", (damage(blob),))  # type: ignore[operator]
    db.close()

    fresh = FakeEmbedder()
    out = np.zeros((len(MANY), emb.dimension), np.float32)
    with stored(tmp_path) as store:
        embedded = embed_new(fresh, MANY, out, range(len(MANY)), lambda: store, IngestPlan())
        assert store.damaged == 1 and len(store) == len(MANY)  # deleted, then stored again
    assert embedded == 1 and len(fresh.embedded) == 1
    assert np.array_equal(out, emb.embed_documents(MANY))


def test_a_file_that_is_not_a_store_is_started_afresh(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with stored(tmp_path) as store:
        path = store.path
    path.write_bytes(b"this is not a database, but it has the store's name" * 100)
    with stored(tmp_path) as store:
        assert len(store) == 0
        store.put(store.keys(TEXTS[:1]), FakeEmbedder().embed_documents(TEXTS[:1]))
        assert len(store) == 1
    assert "was unreadable" in caplog.text and "starting it afresh" in caplog.text


def test_a_store_of_another_space_under_this_name_is_not_read(tmp_path: Path) -> None:
    with stored(tmp_path) as store:
        store.put(store.keys(TEXTS[:2]), FakeEmbedder().embed_documents(TEXTS[:2]))
        path = store.path
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE meta SET value = '0123' WHERE key = 'space'")
    db.close()
    with stored(tmp_path) as store:
        assert len(store) == 0


def test_an_unsafe_cache_folder_means_no_store_and_the_ingest_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = tmp_path / "cache"
    (cache / "embeddings").mkdir(parents=True)
    os.chmod(cache / "embeddings", 0o777)  # anyone could plant vectors here
    source = write_files(tmp_path / "docs", {"a.md": long_document()})

    report = ingest(
        source,
        tmp_path / "datasets",
        IngestOptions(cache_dir=cache, embedding_store_mb=STORE_MB),
        embedder=FakeEmbedder(),
    )

    assert report.documents == 1 and report.embedded == report.chunks > SLICE and report.plan.stored is False
    assert "no embedding store" in caplog.text and "writable by other users" in caplog.text
    assert os.listdir(cache / "embeddings") == []


def test_a_symlink_in_the_store_s_place_is_not_followed(tmp_path: Path) -> None:
    folder = tmp_path / "embeddings"
    folder.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    (folder / f"{vector_space(FakeEmbedder())}.sqlite").symlink_to(victim)
    assert EmbeddingStore.open(tmp_path, FakeEmbedder()) is None
    assert victim.read_text() == "keep me"


def test_trim_keeps_the_store_under_its_limit_dropping_the_least_recently_used(tmp_path: Path) -> None:
    emb = FakeEmbedder()
    with stored(tmp_path) as store:
        keys = store.keys(TEXTS)
        for i in range(0, 40, 10):  # older batches first
            store.put(keys[i : i + 10], emb.embed_documents(TEXTS[i : i + 10]))
            store._db.execute("UPDATE vectors SET used = ? WHERE used > ?", (1000 + i, 5000))  # type: ignore[union-attr]
            store._db.commit()  # type: ignore[union-attr]
        store.trim(25 * store.record_bytes, now=1040 + 86400)
        assert len(store) == 25
        out = np.zeros((40, emb.dimension), np.float32)
        found = store.load(keys, out, range(40))
        assert found[-20:].all() and not found[:10].any()  # the newest kept, the oldest gone
        store.trim(10**9, now=time.time() + (MAX_AGE_DAYS + 1) * 86400)  # unused for a month: all gone
        assert len(store) == 0


def test_trim_removes_other_models_stores_left_unused_but_nothing_else(tmp_path: Path) -> None:
    with stored(tmp_path, Int8Fake()) as old:
        old_path = old.path
    stranger = old_path.parent / "notes.sqlite"
    stranger.write_text("not ours to remove")
    month_ago = time.time() - (MAX_AGE_DAYS + 1) * 86400
    for p in (old_path, stranger):
        os.utime(p, (month_ago, month_ago))
    with stored(tmp_path) as store:
        store.trim(10**9)
        assert store.path.exists()
    assert not old_path.exists() and stranger.exists()


def test_no_store_when_turned_off(tmp_path: Path) -> None:
    source = write_files(tmp_path / "docs", {"a.md": long_document()})
    options = IngestOptions(cache_dir=tmp_path / "cache", embedding_store_mb=0)
    assert ingest(source, tmp_path / "datasets", options, embedder=FakeEmbedder()).embedded > SLICE
    assert not (tmp_path / "cache" / "embeddings").exists()
