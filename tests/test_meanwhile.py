"""meanwhile.both: a hybrid search's two sides at once — the same answers, errors from either
side raised, and both on the caller when every worker is busy."""

from __future__ import annotations

import gc
import os
import select
import signal
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import FakeEmbedder

from mcpower import meanwhile
from mcpower import search as search_module
from mcpower.errors import DatasetUnavailableError, EmbeddingModelError
from mcpower.registry import Registry
from mcpower.results import SearchFilters
from mcpower.search import search
from mcpower.store.local.store import LocalStore

# How long a test waits for the other thread before failing (never reached when the code is right).
PATIENCE = 30.0


def test_both_runs_there_on_a_worker_while_here_runs() -> None:
    started = threading.Event()

    def here() -> str:
        # Returns only once `there` has started: both were running at the same time.
        assert started.wait(PATIENCE), "the second part never started while the first ran"
        return "here"

    def there() -> int:
        started.set()
        return threading.get_ident()

    first, worker = meanwhile.both(here, there)

    assert first == "here"
    assert worker != threading.get_ident()


def test_every_call_gives_its_worker_back() -> None:
    caller = threading.get_ident()
    for _ in range(3 * meanwhile.WORKERS):  # a slot not given back would run the later ones here
        _, worker = meanwhile.both(lambda: None, threading.get_ident)
        assert worker != caller


def test_both_run_on_the_caller_when_every_worker_is_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    busy = threading.BoundedSemaphore(1)
    busy.acquire()  # the one slot taken, as by another search
    monkeypatch.setattr(meanwhile, "_free", busy)
    order: list[str] = []

    def there() -> int:
        order.append("there")
        return threading.get_ident()

    _, worker = meanwhile.both(lambda: order.append("here"), there)

    assert worker == threading.get_ident()
    assert order == ["here", "there"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_gets_workers_of_its_own() -> None:
    meanwhile.both(lambda: None, lambda: None)  # the parent's pool exists
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's threads are not here; a search must not wait on them
        try:
            _, worker = meanwhile.both(lambda: None, threading.get_ident)
            os.write(write, b"ok" if worker != threading.get_ident() else b"inline")
        finally:
            os._exit(0)
    os.close(write)
    if not select.select([read], [], [], PATIENCE)[0]:  # the child hangs on a worker that is not there
        os.kill(pid, signal.SIGKILL)
    with os.fdopen(read, "rb") as answer:
        said = answer.read()
    os.waitpid(pid, 0)
    assert said == b"ok"


def test_an_error_on_the_worker_is_raised_to_the_caller() -> None:
    def there() -> None:
        raise EmbeddingModelError("the model broke")

    with pytest.raises(EmbeddingModelError, match="the model broke"):
        meanwhile.both(lambda: 1, there)
    _, worker = meanwhile.both(lambda: None, threading.get_ident)  # and its slot was given back
    assert worker != threading.get_ident()


def test_an_error_here_is_raised_and_the_worker_finishes_on_its_own() -> None:
    finished = threading.Event()

    def here() -> None:
        raise DatasetUnavailableError("the index broke")

    with pytest.raises(DatasetUnavailableError, match="the index broke"):
        meanwhile.both(here, finished.set)
    assert finished.wait(PATIENCE)


# ------------------------------------------------------------------ one part in pieces


def two_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(meanwhile, "cpus", lambda: 2)  # a worker to share with, whatever runs the tests


def test_shared_does_every_piece_once_and_a_free_worker_takes_them_from_the_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    two_cpus(monkeypatch)
    last_done = threading.Event()
    done: list[tuple[int, int]] = []

    def piece(i: int) -> None:
        if i == 0:  # returns only once the last piece has run: a worker took it meanwhile
            assert last_done.wait(PATIENCE), "no worker took a piece"
        done.append((i, threading.get_ident()))
        if i == 5:
            last_done.set()

    meanwhile.shared(piece, 6)

    assert sorted(i for i, _ in done) == list(range(6))
    assert dict(done)[0] == threading.get_ident()
    assert dict(done)[5] != threading.get_ident()


@contextmanager
def every_worker_busy() -> Iterator[None]:
    """Every worker of the pool kept busy (each has begun a task that waits) until the block ends."""
    release = threading.Event()
    busy = [threading.Event() for _ in range(meanwhile.WORKERS)]

    def occupy(started: threading.Event) -> None:
        started.set()
        release.wait(PATIENCE)

    for started in busy:
        meanwhile._executor().submit(occupy, started)
    try:
        assert all(started.wait(PATIENCE) for started in busy)
        yield
    finally:
        release.set()


def test_shared_does_every_piece_here_when_every_worker_is_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    two_cpus(monkeypatch)
    done: list[tuple[int, int]] = []
    with every_worker_busy():
        meanwhile.shared(lambda i: done.append((i, threading.get_ident())), 8)  # does not wait for them
    assert done == [(i, threading.get_ident()) for i in range(8)]


def test_pieces_taken_back_hold_nothing_of_the_work_once_it_is_done(monkeypatch: pytest.MonkeyPatch) -> None:
    # The pieces a caller took back wait, cancelled, in the workers' queue until a worker comes to
    # them: they must not keep the count's arrays (8 MB at a million chunks) alive meanwhile.
    two_cpus(monkeypatch)

    class Work:  # what a count's pieces hold: its arrays
        def __init__(self) -> None:
            self.done: list[int] = []

        def piece(self, i: int) -> None:
            self.done.append(i)

    with every_worker_busy():
        work = Work()
        gone = weakref.ref(work)
        meanwhile.shared(work.piece, 8)
        assert work.done == list(range(8))
        del work
        gc.collect()
        assert gone() is None  # while its pieces still wait in the queue behind the busy workers


def test_shared_does_every_piece_here_with_one_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(meanwhile, "cpus", lambda: 1)
    done: list[tuple[int, int]] = []
    meanwhile.shared(lambda i: done.append((i, threading.get_ident())), 4)
    assert done == [(i, threading.get_ident()) for i in range(4)]


def test_an_error_in_a_piece_on_the_worker_is_raised_here(monkeypatch: pytest.MonkeyPatch) -> None:
    two_cpus(monkeypatch)
    failed = threading.Event()

    def piece(i: int) -> None:
        if i == 0:
            assert failed.wait(PATIENCE)
        if i == 3:
            failed.set()
            raise DatasetUnavailableError("a piece broke")

    with pytest.raises(DatasetUnavailableError, match="a piece broke"):
        meanwhile.shared(piece, 4)


def test_an_error_in_a_piece_here_is_raised_and_no_piece_runs_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    two_cpus(monkeypatch)
    done: list[int] = []

    def piece(i: int) -> None:
        done.append(i)
        if i == 1:
            raise DatasetUnavailableError("a piece broke")

    with pytest.raises(DatasetUnavailableError, match="a piece broke"):
        meanwhile.shared(piece, 8)
    meanwhile.both(lambda: None, lambda: None)  # the pool has run or dropped what was queued
    assert len(done) == len(set(done)) and {0, 1} <= set(done)


# ------------------------------------------------------------------ in a search


@pytest.mark.parametrize("filters", [None, SearchFilters(folder="guide"), SearchFilters(file_type="md")], ids=str)
def test_a_hybrid_search_embeds_on_a_worker_and_answers_as_one_after_the_other(
    ingested: tuple[Path, Registry],
    fake_embedder: FakeEmbedder,
    monkeypatch: pytest.MonkeyPatch,
    filters: SearchFilters | None,
) -> None:
    _, registry = ingested
    threads: list[int] = []
    embed = fake_embedder.embed_query

    def recorded(text: str):  # type: ignore[no-untyped-def]
        threads.append(threading.get_ident())
        return embed(text)

    monkeypatch.setattr(fake_embedder, "embed_query", recorded)
    at_once = search(registry, "install the quokka guide", dataset="docs", mode="hybrid", filters=filters)
    assert threads and threads[0] != threading.get_ident()  # embedded beside the keyword side

    monkeypatch.setattr(search_module, "both", lambda here, there: (here(), there()))
    in_turn = search(registry, "install the quokka guide", dataset="docs", mode="hybrid", filters=filters)

    assert at_once.results, "the question should find something"
    assert [(r.result_id, r.score, r.snippet) for r in at_once.results] == [
        (r.result_id, r.score, r.snippet) for r in in_turn.results
    ]
    assert at_once.meta.low_confidence == in_turn.meta.low_confidence


def test_a_model_failing_on_the_worker_fails_the_search_as_before(
    ingested: tuple[Path, Registry], fake_embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, registry = ingested

    def broken(text: str) -> None:
        raise EmbeddingModelError("the query model cannot run: reinstall it")

    monkeypatch.setattr(fake_embedder, "embed_query", broken)
    with pytest.raises(EmbeddingModelError, match="reinstall it"):
        search(registry, "quokka", dataset="docs", mode="hybrid")
    assert search(registry, "quokka", dataset="docs", mode="keyword").results  # the keyword side alone still answers


def test_a_keyword_side_failing_fails_the_search_as_before(
    ingested: tuple[Path, Registry], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, registry = ingested

    def damaged(self: LocalStore, query: str, where: SearchFilters | None = None) -> None:
        raise DatasetUnavailableError("dataset 'docs' is damaged: run mcpower validate")

    monkeypatch.setattr(LocalStore, "keyword", damaged)
    with pytest.raises(DatasetUnavailableError, match="run mcpower validate"):
        search(registry, "quokka", dataset="docs", mode="hybrid")


def test_the_keyword_candidates_vectors_are_read_while_the_query_is_embedded_and_once(
    ingested: tuple[Path, Registry], fake_embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, registry = ingested
    reads: list[tuple[int, list[int]]] = []
    embedded: list[int] = []
    read = threading.Event()
    real_vectors, embed = LocalStore.vectors, fake_embedder.embed_query

    def vectors(self: LocalStore, ids):  # type: ignore[no-untyped-def]
        reads.append((threading.get_ident(), list(ids)))
        read.set()
        return real_vectors(self, ids)

    def recorded(text: str):  # type: ignore[no-untyped-def]
        embedded.append(threading.get_ident())
        # The query is embedded only once the keyword side has read its candidates' vectors: they
        # are read while it is embedded, not after.
        assert read.wait(PATIENCE), "the keyword candidates' vectors were not read beside the model"
        return embed(text)

    monkeypatch.setattr(LocalStore, "vectors", vectors)
    monkeypatch.setattr(fake_embedder, "embed_query", recorded)
    # Grouping asks deeper when the first candidates fall into few passages: a search of several steps.
    found = search(registry, "install the quokka guide", dataset="docs", mode="hybrid", top_k=8)
    assert found.results
    assert reads and reads[0][0] == threading.get_ident() != embedded[0]  # on the search's thread, beside the model
    every = [i for _, ids in reads for i in ids]
    assert len(every) == len(set(every))  # no chunk's vector read twice in one search
