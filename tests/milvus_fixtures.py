"""Milvus for the tests: one milvus-lite file per test session (its engine starts once), emptied
before each test. Tests that need it are skipped, saying why, when the `milvus` extra is absent;
CI installs the extra (noxfile.py), so there they run."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

HAVE_MILVUS = all(importlib.util.find_spec(m) is not None for m in ("pymilvus", "milvus_lite"))
needs_milvus = pytest.mark.skipif(
    not HAVE_MILVUS, reason="the milvus extra is not installed: pip install -e '.[milvus]'"
)


@pytest.fixture(scope="session")
def milvus_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The session's milvus-lite file (its name short and plain: milvus-lite 2.5's rule)."""
    if not HAVE_MILVUS:
        pytest.skip("the milvus extra is not installed: pip install -e '.[milvus]'")
    from mcpower.store.milvus import MilvusCatalog

    path = str(tmp_path_factory.mktemp("milvus") / "tests.db")
    keeper = MilvusCatalog(path, cache_dir=tmp_path_factory.mktemp("milvus-cache"))
    keeper.client(create=True)
    yield path
    keeper.close()


@pytest.fixture
def milvus_catalog(milvus_db: str) -> Iterator[object]:
    """A catalog over the session's file, every collection dropped first; searches re-read the
    pointer every time and the lease takes no settle pause (one process: nothing races)."""
    from mcpower.store.milvus import MilvusCatalog

    catalog = MilvusCatalog(milvus_db, refresh_seconds=0, settle_seconds=0)
    client = catalog.client()
    for name in client.list_collections():
        client.drop_collection(name)
    yield catalog


def fresh_db(tmp_path: Path) -> str:
    """A milvus-lite file no process has open (for a `mcpower` subprocess to own)."""
    return str(tmp_path / "cli.db")
