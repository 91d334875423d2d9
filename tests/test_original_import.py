"""`mcpower import`: a dataset of the original format converted into mcpower's, vectors kept, chunks,
titles and paths kept, published crash-safe under the dataset's lock."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import FakeEmbedder
from original_fixtures import RECORDS, embed, records, write_original
from typer.testing import CliRunner

import mcpower.layout
import mcpower.store.local.build
from mcpower.cli.app import app
from mcpower.errors import DatasetLockedError, IndexMismatchError, IngestError, InvalidManifestError
from mcpower.ingestion import IngestOptions, ingest
from mcpower.layout import STAGING_PREFIX, dataset_lock
from mcpower.manifest import MANIFEST_NAME, read_manifest
from mcpower.registry import Registry
from mcpower.search import search
from mcpower.store.original.convert import BACKUP_NAME, import_original
from mcpower.store.original.info import OriginalInfo

pytestmark = pytest.mark.usefixtures("fake_packaged")

QUERIES = ["quokka diagnostics", "install on windows", "harpsichord feature", "daemon port"]


def results(root: Path, dataset: str, mode: str) -> list[list[tuple[str, float, str, int, int]]]:
    registry = Registry(root, embedder_factory=lambda m: FakeEmbedder())
    try:
        return [
            [
                (r.result_id, r.score, r.path, r.lines.start, r.lines.end)
                for r in search(registry, q, dataset, top_k=6, mode=mode).results
            ]
            for q in QUERIES
        ]
    finally:
        registry.close()


def files(folder: Path) -> dict[str, bytes]:
    """Every file's bytes but the lock's (it names the last writer)."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def test_import_elsewhere_answers_exactly_as_the_served_original(tmp_path: Path) -> None:
    src = write_original(tmp_path / "old" / "orig")
    before = files(src)
    report = import_original(src, tmp_path / "datasets")

    assert (report.dataset_id, report.documents, report.chunks, report.embedded, report.in_place) == (
        "orig",
        3,
        6,
        0,
        False,
    )
    assert files(src) == before  # the source is only read
    manifest = read_manifest(tmp_path / "datasets" / "orig" / MANIFEST_NAME)
    assert manifest.chunking.chunker == "original-indexer" and manifest.embedding.model == "all-MiniLM-L6-v2"
    assert manifest.embedding.backend == "torch" and manifest.created_at.isoformat() == "2026-11-23T08:24:58+00:00"
    for mode in ("semantic", "keyword", "hybrid"):
        assert results(tmp_path / "datasets", "orig", mode) == results(tmp_path / "old", "orig", mode), mode


def test_vectors_chunks_titles_and_paths_are_kept(tmp_path: Path) -> None:
    src = write_original(tmp_path / "old" / "orig")
    import_original(src, tmp_path / "datasets")
    registry = Registry(tmp_path / "datasets", embedder_factory=lambda m: FakeEmbedder())
    store = registry.store("orig")
    got = [(d.path, c.ordinal, c.text) for d, cs in store.iter_documents() for c in cs]
    assert got == [
        ("guide/install.md", 0, RECORDS[0]["content"]),
        ("guide/install.md", 1, RECORDS[1]["content"]),
        ("guide/install.md", 2, RECORDS[2]["content"]),
        ("guide/usage.md", 0, RECORDS[3]["content"]),
        ("guide/usage.md", 1, RECORDS[4]["content"]),
        ("notes.txt", 0, RECORDS[5]["content"]),
    ]
    assert [d.title for d in store.documents()] == ["Installation", "Usage notes", "Meeting notes"]
    ids = [c.id for _, cs in store.iter_documents() for c in cs]
    assert np.array_equal(store.vectors(ids), embed([r["content"] for r in RECORDS]))
    registry.close()


def test_cli_upgrades_in_place_keeping_the_original_manifest(tmp_path: Path) -> None:
    root = tmp_path / "datasets"
    folder = write_original(root / "orig")
    old_manifest = (folder / MANIFEST_NAME).read_bytes()
    served = results(root, "orig", "hybrid")

    result = CliRunner().invoke(app, ["import", str(folder), "--datasets-dir", str(root)])

    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("orig: imported 3 documents, 6 chunks; vectors kept; ")
    assert f"dataset: {folder.resolve()}" in result.stdout
    assert "upgraded in place" in result.stderr and BACKUP_NAME in result.stderr
    assert (folder / BACKUP_NAME).read_bytes() == old_manifest
    assert (folder / "metadata.json").exists() and (folder / "index" / "docs.index").exists()
    registry = Registry(root, embedder_factory=lambda m: FakeEmbedder())
    entry = registry.entry("orig")
    assert entry.status == "ready" and entry.summary().format == "mcpower" and not isinstance(entry.info, OriginalInfo)
    assert entry.summary().file_types == {".md": 2, ".txt": 1}
    registry.close()
    assert results(root, "orig", "hybrid") == served  # the same result ids: clients' references stay valid
    assert CliRunner().invoke(app, ["validate", "--datasets-dir", str(root)]).exit_code == 0
    again = CliRunner().invoke(app, ["import", str(folder), "--datasets-dir", str(root)])
    assert again.exit_code == 1 and "already in mcpower's format" in again.stderr


def test_cli_json_and_another_id_beside_the_original(tmp_path: Path) -> None:
    root = tmp_path / "datasets"
    folder = write_original(root / "orig")
    result = CliRunner().invoke(app, ["import", str(folder), "--id", "orig-new", "--datasets-dir", str(root), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data == {
        "dataset": "orig-new",
        "path": str((root / "orig-new").resolve()),
        "documents": 3,
        "chunks": 6,
        "embedded": 0,
        "reason": None,
        "in_place": False,
        "seconds": data["seconds"],
    }
    registry = Registry(root, embedder_factory=lambda m: FakeEmbedder())
    assert {e.id: e.summary().format for e in registry.entries()} == {"orig": "original", "orig-new": "mcpower"}
    registry.close()


def test_an_existing_dataset_is_never_overwritten(tmp_path: Path, corpus: Path) -> None:
    root = tmp_path / "datasets"
    ingest(corpus, root, IngestOptions(dataset_id="orig"), embedder=FakeEmbedder())
    before = files(root / "orig")
    src = write_original(tmp_path / "old" / "orig")
    with pytest.raises(IngestError, match=r"dataset 'orig' already exists in .*; pass --id"):
        import_original(src, root)
    write_original(root / "other")  # another original dataset under the target id
    with pytest.raises(IngestError, match="dataset 'other' already exists"):
        import_original(write_original(tmp_path / "old" / "other"), root)
    assert files(root / "orig") == before


def test_what_is_not_an_original_dataset(tmp_path: Path, corpus: Path) -> None:
    folder = tmp_path / "x"
    folder.mkdir()
    with pytest.raises(IngestError, match=r"no manifest\.json there; pass the folder of a dataset in the original"):
        import_original(folder, tmp_path / "datasets")
    (folder / MANIFEST_NAME).write_text('{"id": "x", "evil": 1}')
    with pytest.raises(InvalidManifestError, match=r"neither the original system's format .* nor mcpower's"):
        import_original(folder, tmp_path / "datasets")
    assert not (tmp_path / "datasets").exists()
    ingest(corpus, tmp_path / "native", IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    with pytest.raises(IngestError, match="docs: already in mcpower's format; there is nothing to import"):
        import_original(tmp_path / "native" / "docs", tmp_path / "datasets")


def test_an_unknown_model_is_embedded_again_never_loaded(tmp_path: Path, fake_embedder: FakeEmbedder) -> None:
    model_dir = tmp_path / "models" / "all-MiniLM-L6-v2"  # a real folder: still never loaded
    model_dir.mkdir(parents=True)
    src = write_original(tmp_path / "old" / "orig", model=str(model_dir))
    report = import_original(src, tmp_path / "datasets")
    assert report.embedded == 6 and "not available offline here" in report.reason
    assert fake_embedder.load_calls == [("all-MiniLM-L6-v2", "onnx")]  # type: ignore[attr-defined]
    assert fake_embedder.embedded == [r["content"] for r in RECORDS]
    assert read_manifest(tmp_path / "datasets" / "orig" / MANIFEST_NAME).embedding.model == "fake-hash-embedder"


def test_re_embed_and_vectors_that_cannot_be_kept(tmp_path: Path, fake_embedder: FakeEmbedder) -> None:
    src = write_original(tmp_path / "old" / "orig", vectors=embed([r["content"] for r in RECORDS]) * 2)
    with pytest.raises(IndexMismatchError, match=r"length 2, not 1 .* `mcpower import --re-embed`"):
        import_original(src, tmp_path / "datasets")
    report = import_original(src, tmp_path / "datasets", re_embed=True)
    assert (report.embedded, report.reason) == (6, "--re-embed")


def test_a_held_lock_fails_fast(tmp_path: Path) -> None:
    src = write_original(tmp_path / "old" / "orig")
    (tmp_path / "datasets").mkdir()
    with dataset_lock(tmp_path / "datasets" / "orig"), pytest.raises(DatasetLockedError):
        import_original(src, tmp_path / "datasets")


def _enospc(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def _interrupt(*args: object, **kwargs: object) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize(
    ("module", "target", "failure"),
    [
        (mcpower.store.local.build, "write_metadata", _enospc),
        (mcpower.store.local.build, "write_vectors", _interrupt),
        (mcpower.layout, "fsync_path", _enospc),
        (mcpower.layout, "write_manifest", _interrupt),
    ],
)
def test_a_failed_in_place_upgrade_leaves_the_original_serving(
    tmp_path: Path, module: object, target: str, failure: object
) -> None:
    root = tmp_path / "datasets"
    folder = write_original(root / "orig")
    manifest = (folder / MANIFEST_NAME).read_bytes()
    served = results(root, "orig", "hybrid")
    with pytest.MonkeyPatch.context() as patch, pytest.raises((IngestError, KeyboardInterrupt)):
        patch.setattr(module, target, failure)
        import_original(folder, root)
    assert (folder / MANIFEST_NAME).read_bytes() == manifest
    assert not [p for p in folder.iterdir() if p.name.startswith((STAGING_PREFIX, "v-"))]
    assert results(root, "orig", "hybrid") == served
    import_original(folder, root)  # and it succeeds afterwards
    assert results(root, "orig", "hybrid") == served


def test_an_ingest_after_an_import_rebuilds_fully(tmp_path: Path, corpus: Path) -> None:
    src = write_original(tmp_path / "old" / "orig", records("orig"))
    import_original(src, tmp_path / "datasets")
    report = ingest(corpus, tmp_path / "datasets", IngestOptions(dataset_id="orig"), embedder=FakeEmbedder())
    assert report.full_rebuild and report.rebuild_reason == "the model or chunking settings changed"
