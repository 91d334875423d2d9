"""ingest -> store -> registry: reports, manifests, incremental updates, locking and crash safety."""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import CORPUS_DOCUMENTS, FakeEmbedder, write_files

import mcpower.ingestion as ingest_module
from mcpower.discover import discover
from mcpower.errors import DatasetLockedError, IngestError
from mcpower.ingestion import IngestOptions, ingest
from mcpower.layout import STAGING_PREFIX, VERSION_PREFIX, dataset_lock
from mcpower.manifest import MANIFEST_NAME, Manifest, read_manifest, slugify
from mcpower.registry import Registry
from mcpower.search import resolve, search
from mcpower.store.local import build as build_module
from mcpower.store.local.store import LocalStore


def run(corpus: Path, datasets_dir: Path, **kwargs: Any) -> ingest_module.IngestReport:
    """Ingest with IngestOptions from ``kwargs`` (dataset id 'docs' unless given) and the fake embedder."""
    embedder = kwargs.pop("embedder", FakeEmbedder())
    progress = kwargs.pop("progress", None)
    kwargs.setdefault("dataset_id", "docs")
    return ingest(corpus, datasets_dir, IngestOptions(**kwargs), embedder=embedder, progress=progress)


def manifest_of(datasets_dir: Path, dataset_id: str = "docs") -> Manifest:
    return read_manifest(datasets_dir / dataset_id / MANIFEST_NAME)


def chunk_ids(store: LocalStore) -> dict[str, list[int]]:
    """Chunk ids by document path."""
    return {d.path: [c.id for c in chunks] for d, chunks in store.iter_documents()}


def versions(datasets_dir: Path, dataset_id: str = "docs") -> list[str]:
    return sorted(p.name for p in (datasets_dir / dataset_id).iterdir() if p.name.startswith(VERSION_PREFIX))


def leftovers(datasets_dir: Path, dataset_id: str = "docs") -> list[str]:
    return [p.name for p in (datasets_dir / dataset_id).iterdir() if p.name.startswith(STAGING_PREFIX)]


# ------------------------------------------------------------------ first ingest


def test_report_counts_and_skips(corpus: Path, datasets_dir: Path) -> None:
    fake = FakeEmbedder()

    report = run(corpus, datasets_dir, embedder=fake)

    assert report.dataset_id == "docs"
    assert report.location == str(datasets_dir.resolve() / "docs")
    assert report.documents == 5
    assert report.added == 5
    assert (report.changed, report.removed, report.unchanged) == (0, 0, 0)
    assert report.chunks >= 5
    assert report.embedded == report.chunks == len(fake.embedded)
    assert report.full_rebuild is True
    assert report.rebuild_reason == ""
    skipped = dict(report.skipped)
    assert set(skipped) == {"binary.md", "latin1.md"}  # hidden, ignored, unsupported: not even listed
    assert "binary" in skipped["binary.md"]
    assert "UTF-8" in skipped["latin1.md"]


def test_store_holds_the_documents_with_titles_and_types(
    corpus: Path, datasets_dir: Path, make_registry: Callable[[], Registry]
) -> None:
    run(corpus, datasets_dir)

    store = make_registry().store("docs")

    docs = {d.path: (d.title, d.file_type) for d in store.documents()}
    assert sorted(docs) == CORPUS_DOCUMENTS
    assert docs["guide/install.md"] == ("Installation", ".md")
    assert docs["guide/usage.md"] == ("Usage notes", ".md")  # front-matter title
    assert docs["notes.txt"] == ("notes", ".txt")
    assert docs["intro.rst"] == ("Introduction", ".rst")
    install = store.document("guide/install.md")
    assert install is not None
    assert install.content == (corpus / "guide/install.md").read_text()
    assert install.content_hash == hashlib.sha256((corpus / "guide/install.md").read_bytes()).hexdigest()
    headings = {c.heading_path for _, chunks in store.iter_documents() for c in chunks}
    assert "Installation > Linux" in headings
    assert "API reference > Functions > connect()" in headings


def test_chunk_lines_point_at_the_source(
    corpus: Path, datasets_dir: Path, make_registry: Callable[[], Registry]
) -> None:
    run(corpus, datasets_dir)
    store = make_registry().store("docs")

    for doc, chunks in store.iter_documents():
        if doc.file_type in (".md", ".txt"):  # text formats are stored as written; reST as rendered text
            assert doc.content == (corpus / doc.path).read_text()
        lines = doc.content.split("\n")
        for c in chunks:
            assert 1 <= c.start_line <= c.end_line <= len(lines)
            assert c.text.split("\n")[0] == lines[c.start_line - 1]
            assert c.text.split("\n")[-1] == lines[c.end_line - 1]


def test_manifest_records_what_was_built(corpus: Path, datasets_dir: Path) -> None:
    report = run(corpus, datasets_dir, chunk_tokens=100, overlap=10, default_top_k=7, description="Widget docs")

    m = manifest_of(datasets_dir)
    folder = datasets_dir / "docs"
    assert m.id == "docs"
    assert m.name == "corpus"
    assert m.description == "Widget docs"
    assert m.default_top_k == 7
    assert (m.counts.documents, m.counts.chunks) == (report.documents, report.chunks)
    assert m.checksums.index == hashlib.sha256((folder / m.index).read_bytes()).hexdigest()
    assert m.checksums.metadata == hashlib.sha256((folder / m.metadata).read_bytes()).hexdigest()
    assert m.embedding.model == FakeEmbedder.model_name
    assert m.embedding.model_fingerprint == FakeEmbedder.model_fingerprint
    assert m.embedding.dimension == FakeEmbedder.dimension
    assert (m.chunking.chunk_tokens, m.chunking.overlap) == (100, 10)
    assert m.vector_index.kind == "flat"
    assert len(m.fingerprint) == 32
    assert m.index.startswith(VERSION_PREFIX) and m.index.endswith("/index.faiss")
    assert m.created_at == m.updated_at


def test_defaults_for_id_name_and_description(tmp_path: Path, datasets_dir: Path) -> None:
    source = write_files(tmp_path / "My Docs_v2", {"a.md": "# A\n\ntext\n"})

    report = ingest(source, datasets_dir, embedder=FakeEmbedder())

    m = manifest_of(datasets_dir, "my-docs-v2")
    assert report.dataset_id == m.id == "my-docs-v2"
    assert m.name == "My Docs_v2"
    assert m.description == "Documents from My Docs_v2"
    assert m.default_top_k == 5


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("My Docs_v2", "my-docs-v2"),
        ("--x--", "x"),
        ("Ünï", "uni"),
        ("Café Notes", "cafe-notes"),
        ("日本語", ""),
        ("a" * 80, "a" * 64),
    ],
)
def test_slugify(name: str, slug: str) -> None:
    assert slugify(name) == slug


def test_chunk_size_is_lowered_to_the_model_window(corpus: Path, datasets_dir: Path) -> None:
    run(corpus, datasets_dir, chunk_tokens=1000, overlap=500)

    chunking = manifest_of(datasets_dir).chunking
    assert chunking.chunk_tokens == FakeEmbedder.max_tokens - 2
    assert chunking.overlap < chunking.chunk_tokens


def test_progress_reports_both_phases(corpus: Path, datasets_dir: Path) -> None:
    calls: list[tuple[str, int, int]] = []

    report = run(corpus, datasets_dir, progress=lambda *a: calls.append(a))

    files = [c for c in calls if c[0] == "files"]
    chunks = [c for c in calls if c[0] == "chunks"]
    assert files[-1] == ("files", 5 + 2, 5 + 2)  # the two skipped files are read, then skipped
    assert chunks[-1] == ("chunks", report.embedded, report.embedded)


# ------------------------------------------------------------------ re-ingest


def test_reingest_unchanged_reuses_everything(
    corpus: Path, datasets_dir: Path, make_registry: Callable[[], Registry]
) -> None:
    run(corpus, datasets_dir)
    registry = make_registry()
    before = chunk_ids(registry.store("docs"))
    created = manifest_of(datasets_dir).created_at
    fake = FakeEmbedder()

    report = run(corpus, datasets_dir, embedder=fake)

    assert (report.added, report.changed, report.removed, report.unchanged) == (0, 0, 0, 5)
    assert report.embedded == 0 and fake.embedded == []
    assert report.full_rebuild is False
    assert chunk_ids(registry.store("docs")) == before
    assert manifest_of(datasets_dir).created_at == created


def test_result_ids_are_stable_across_reingest(
    corpus: Path, datasets_dir: Path, make_registry: Callable[[], Registry]
) -> None:
    run(corpus, datasets_dir)
    registry = make_registry()
    first = search(registry, "zephyrine daemon", dataset="docs", top_k=3)

    run(corpus, datasets_dir, full=True)

    second = search(registry, "zephyrine daemon", dataset="docs", top_k=3)
    assert [r.result_id for r in second.results] == [r.result_id for r in first.results]
    assert resolve(registry, first.results[0].result_id)[1].path == "guide/install.md"


def test_editing_one_file_reembeds_only_its_chunks(
    corpus: Path, datasets_dir: Path, make_registry: Callable[[], Registry]
) -> None:
    run(corpus, datasets_dir)
    registry = make_registry()
    before = chunk_ids(registry.store("docs"))
    (corpus / "notes.txt").write_text("New notes about the ocarina.\n\nA second paragraph.\n")
    fake = FakeEmbedder()

    report = run(corpus, datasets_dir, embedder=fake)

    assert (report.added, report.changed, report.removed, report.unchanged) == (0, 1, 0, 4)
    assert report.full_rebuild is False
    after = chunk_ids(registry.store("docs"))
    assert report.embedded == len(after["notes.txt"]) == len(fake.embedded)
    assert all("ocarina" in t or "second paragraph" in t for t in fake.embedded)
    assert after["notes.txt"] != before["notes.txt"]
    assert {p: ids for p, ids in after.items() if p != "notes.txt"} == {
        p: ids for p, ids in before.items() if p != "notes.txt"
    }
    hits = search(registry, "ocarina", dataset="docs", mode="keyword").results
    assert [h.path for h in hits] == ["notes.txt"]
    assert search(registry, "harpsichord", dataset="docs", mode="keyword").results == []


def test_carried_vectors_still_find_their_chunks(
    corpus: Path, datasets_dir: Path, make_registry: Callable[[], Registry]
) -> None:
    run(corpus, datasets_dir)
    (corpus / "notes.txt").write_text("Changed.\n")
    run(corpus, datasets_dir)
    registry = make_registry()

    top = search(registry, "marmalade server session", dataset="docs", mode="semantic", top_k=1).results[0]

    assert top.path == "api/reference.md"


def test_deleting_a_file_removes_its_chunks(
    corpus: Path, datasets_dir: Path, make_registry: Callable[[], Registry]
) -> None:
    run(corpus, datasets_dir)
    registry = make_registry()
    old_ids = chunk_ids(registry.store("docs"))["api/reference.md"]
    (corpus / "api/reference.md").unlink()

    report = run(corpus, datasets_dir)

    assert (report.removed, report.unchanged, report.embedded, report.documents) == (1, 4, 0, 4)
    store = registry.store("docs")
    assert "api/reference.md" not in chunk_ids(store)
    assert store.chunks(old_ids) == {}
    assert search(registry, "marmalade", dataset="docs", mode="keyword").results == []


def test_adding_a_file(corpus: Path, datasets_dir: Path) -> None:
    run(corpus, datasets_dir)
    write_files(corpus, {"guide/new.md": "# New\n\nFresh text.\n"})
    fake = FakeEmbedder()

    report = run(corpus, datasets_dir, embedder=fake)

    assert (report.added, report.unchanged, report.documents) == (1, 5, 6)
    assert report.embedded == 1 and fake.embedded == ["New\n# New\n\nFresh text."]


def test_touching_a_file_changes_nothing(corpus: Path, datasets_dir: Path) -> None:
    run(corpus, datasets_dir)
    os.utime(corpus / "notes.txt", (1, 1))

    report = run(corpus, datasets_dir)

    assert (report.changed, report.unchanged, report.embedded) == (0, 5, 0)


def test_repeated_text_gets_distinct_chunk_ids(
    tmp_path: Path, datasets_dir: Path, make_registry: Callable[[], Registry]
) -> None:
    same = "## Note\n\nThe same words again, in both files on purpose."
    source = write_files(tmp_path / "src", {"a.md": f"{same}\n\n{same}\n", "b.md": f"{same}\n"})

    report = run(source, datasets_dir, chunk_tokens=16, overlap=0)

    ids = chunk_ids(make_registry().store("docs"))
    assert len(ids["a.md"]) == 2 and len(ids["b.md"]) == 1
    assert len({*ids["a.md"], *ids["b.md"]}) == 3 == report.chunks


def test_full_reembeds_everything(corpus: Path, datasets_dir: Path) -> None:
    first = run(corpus, datasets_dir)

    report = run(corpus, datasets_dir, full=True)

    assert report.full_rebuild is True
    assert report.rebuild_reason == ""
    assert report.embedded == first.chunks
    assert report.added == 5  # nothing reused, so every file counts as new


def test_changing_chunk_size_forces_a_full_rebuild(corpus: Path, datasets_dir: Path) -> None:
    run(corpus, datasets_dir, chunk_tokens=100)

    report = run(corpus, datasets_dir, chunk_tokens=50)

    assert report.full_rebuild is True
    assert "chunking" in report.rebuild_reason
    assert report.embedded == report.chunks
    assert manifest_of(datasets_dir).chunking.chunk_tokens == 50


def test_changing_the_model_forces_a_full_rebuild(corpus: Path, datasets_dir: Path) -> None:
    run(corpus, datasets_dir)

    class OtherModel(FakeEmbedder):
        model_fingerprint = "another-model"

    report = run(corpus, datasets_dir, embedder=OtherModel())

    assert report.full_rebuild is True
    assert "model" in report.rebuild_reason
    assert manifest_of(datasets_dir).embedding.model_fingerprint == "another-model"


def test_metadata_survives_reingest_unless_given(corpus: Path, datasets_dir: Path) -> None:
    run(corpus, datasets_dir, description="First description", default_top_k=9)

    run(corpus, datasets_dir)
    assert (manifest_of(datasets_dir).description, manifest_of(datasets_dir).default_top_k) == (
        "First description",
        9,
    )

    run(corpus, datasets_dir, description="Second", default_top_k=3)
    assert (manifest_of(datasets_dir).description, manifest_of(datasets_dir).default_top_k) == ("Second", 3)


def test_only_the_current_and_previous_versions_are_kept(corpus: Path, datasets_dir: Path) -> None:
    seen = []
    for n in range(4):
        (corpus / "notes.txt").write_text(f"Version {n} of the notes.\n")
        run(corpus, datasets_dir)
        seen.append(Path(manifest_of(datasets_dir).index).parts[0])

    assert versions(datasets_dir) == sorted(seen[-2:])


def test_a_loaded_store_keeps_working_after_a_new_version(
    corpus: Path, datasets_dir: Path, make_registry: Callable[[], Registry]
) -> None:
    run(corpus, datasets_dir)
    registry = make_registry()
    old = registry.store("docs")
    (corpus / "notes.txt").write_text("Replaced.\n")

    run(corpus, datasets_dir)

    assert registry.store("docs") is not old
    assert old.documents()  # the previous version's files are still there
    assert "notes.txt" in chunk_ids(old)
    old.close()


def test_an_unusable_previous_version_is_rebuilt(corpus: Path, datasets_dir: Path) -> None:
    run(corpus, datasets_dir)
    m = manifest_of(datasets_dir)
    (datasets_dir / "docs" / m.index).write_bytes(b"garbage")

    report = run(corpus, datasets_dir)

    assert report.full_rebuild is True
    assert report.embedded == report.chunks


# ------------------------------------------------------------------ locking and crash safety


def test_concurrent_ingest_is_refused_naming_the_holder(corpus: Path, datasets_dir: Path) -> None:
    run(corpus, datasets_dir)
    fake = FakeEmbedder()

    with dataset_lock(datasets_dir.resolve() / "docs"), pytest.raises(DatasetLockedError) as info:
        run(corpus, datasets_dir, embedder=fake)

    assert f"pid {os.getpid()}" in info.value.message
    assert "docs" in info.value.message
    assert info.value.code == "DATASET_LOCKED"
    assert fake.embedded == []
    run(corpus, datasets_dir)  # released: the next ingest goes ahead


class FailingEmbedder(FakeEmbedder):
    def embed_documents(self, texts, progress=None):  # type: ignore[no-untyped-def]
        raise RuntimeError("the model crashed")


def test_failure_while_embedding_keeps_the_previous_version(
    corpus: Path, datasets_dir: Path, make_registry: Callable[[], Registry]
) -> None:
    run(corpus, datasets_dir)
    before = (datasets_dir / "docs" / MANIFEST_NAME).read_bytes()
    (corpus / "notes.txt").write_text("Changed notes about the ocarina.\n")

    with pytest.raises(RuntimeError, match="the model crashed"):
        run(corpus, datasets_dir, embedder=FailingEmbedder())

    assert (datasets_dir / "docs" / MANIFEST_NAME).read_bytes() == before
    assert leftovers(datasets_dir) == []
    hits = search(make_registry(), "harpsichord", dataset="docs", mode="keyword").results
    assert [h.path for h in hits] == ["notes.txt"]


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), IngestError),
        (OSError(errno.EACCES, "Permission denied"), IngestError),
        (KeyboardInterrupt(), KeyboardInterrupt),
    ],
)
def test_failure_while_writing_leaves_no_staging_folder(
    corpus: Path,
    datasets_dir: Path,
    make_registry: Callable[[], Registry],
    monkeypatch: pytest.MonkeyPatch,
    error: BaseException,
    expected: type[BaseException],
) -> None:
    run(corpus, datasets_dir)
    before = versions(datasets_dir)
    (corpus / "notes.txt").write_text("Changed.\n")

    def broken(*args: object) -> None:
        raise error

    monkeypatch.setattr(build_module, "write_vectors", broken)
    with pytest.raises(expected) as info:
        run(corpus, datasets_dir)

    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        assert "disk full" in str(info.value)
    assert leftovers(datasets_dir) == []
    assert versions(datasets_dir) == before
    assert search(make_registry(), "harpsichord", dataset="docs", mode="keyword").results


def test_leftover_staging_folders_are_removed(corpus: Path, datasets_dir: Path) -> None:
    run(corpus, datasets_dir)
    stale = datasets_dir / "docs" / f"{STAGING_PREFIX}99999-dead"
    stale.mkdir()
    (stale / "meta.sqlite").write_bytes(b"half written")

    run(corpus, datasets_dir)

    assert not stale.exists()


def test_staging_folders_are_invisible_to_the_registry(
    corpus: Path, datasets_dir: Path, make_registry: Callable[[], Registry]
) -> None:
    run(corpus, datasets_dir)
    stale = datasets_dir / "docs" / f"{STAGING_PREFIX}1-x"
    stale.mkdir()
    (stale / MANIFEST_NAME).write_text("{}")

    assert make_registry().ready_ids() == ["docs"]


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize("dataset_id", ["Bad_ID", "has space", "", "x" * 65, "../escape"])
def test_bad_dataset_id(corpus: Path, datasets_dir: Path, dataset_id: str) -> None:
    with pytest.raises(IngestError, match="invalid dataset id"):
        run(corpus, datasets_dir, dataset_id=dataset_id)
    assert not datasets_dir.exists()


def test_a_folder_name_without_latin_letters_asks_for_an_id(tmp_path: Path, datasets_dir: Path) -> None:
    folder = tmp_path / "日本語"
    folder.mkdir()
    (folder / "a.md").write_text("# Title\n\nSome text.\n")
    with pytest.raises(
        IngestError, match=r"cannot derive a dataset id from the folder name '日本語'; pass one with --id"
    ):
        run(folder, datasets_dir, dataset_id=None)
    assert not datasets_dir.exists()


def test_an_accented_folder_name_gives_its_ascii_id(tmp_path: Path, datasets_dir: Path) -> None:
    folder = tmp_path / "Café Notes"
    folder.mkdir()
    (folder / "a.md").write_text("# Title\n\nSome text.\n")
    assert run(folder, datasets_dir, dataset_id=None).dataset_id == "cafe-notes"


def test_missing_folder(tmp_path: Path, datasets_dir: Path) -> None:
    with pytest.raises(IngestError, match="no such folder"):
        run(tmp_path / "nowhere", datasets_dir)


def test_a_file_is_not_a_folder(corpus: Path, datasets_dir: Path) -> None:
    with pytest.raises(
        IngestError, match=r"notes.txt is a file; pass the folder it is in \(with --include 'notes.txt'"
    ):
        run(corpus / "notes.txt", datasets_dir)


def test_empty_folder(tmp_path: Path, datasets_dir: Path) -> None:
    (tmp_path / "empty").mkdir()

    with pytest.raises(IngestError, match="no documents"):
        run(tmp_path / "empty", datasets_dir)


def test_folder_where_every_file_is_skipped(tmp_path: Path, datasets_dir: Path) -> None:
    source = write_files(
        tmp_path / "bad", {"a.md": b"\x00\x01", "b.md": b"\xff\xfe bad", "c.md": b"\xff bad", "d.txt": b"\xc3"}
    )

    with pytest.raises(IngestError, match="every file was skipped") as info:
        run(source, datasets_dir)
    assert "not UTF-8 (3 files: b.md, c.md, d.txt)" in info.value.message  # every reason, not just the first
    assert "binary file (contains NUL bytes) (1 file: a.md)" in info.value.message
    assert not (datasets_dir / "docs").exists()


@pytest.mark.parametrize(("chunk_tokens", "overlap"), [(10, 2), (0, 0), (100, 100), (100, -1), (9000, 10)])
def test_bad_chunking_settings_fail_before_embedding(
    corpus: Path, datasets_dir: Path, chunk_tokens: int, overlap: int
) -> None:
    fake = FakeEmbedder()

    with pytest.raises(IngestError, match="chunk-tokens"):
        run(corpus, datasets_dir, chunk_tokens=chunk_tokens, overlap=overlap, embedder=fake)
    assert fake.embedded == []


def test_ingest_loads_the_embedder_when_none_is_given(
    corpus: Path, datasets_dir: Path, fake_embedder: FakeEmbedder
) -> None:
    report = ingest(corpus, datasets_dir, IngestOptions(dataset_id="docs", model="some-model", backend="onnx-int8"))

    assert fake_embedder.load_calls == [("some-model", "onnx-int8")]  # type: ignore[attr-defined]
    assert len(fake_embedder.embedded) == report.embedded


def test_an_update_keeps_the_backend_its_dataset_was_built_with(
    corpus: Path, datasets_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """int8 and fp32 vectors are never mixed: a plain update of an int8 dataset embeds in int8 and
    reuses its vectors; naming another backend rebuilds it whole in that precision."""
    from mcpower import embedding

    calls: list[str] = []

    def load(
        model: str = embedding.DEFAULT_MODEL, backend: str = "onnx", cache_dir: Path | None = None
    ) -> FakeEmbedder:
        calls.append(backend)
        fake = FakeEmbedder()
        fake.backend = backend
        return fake

    monkeypatch.setattr(embedding, "load_embedder", load)
    opts = {"dataset_id": "docs", "model": FakeEmbedder.model_name}
    ingest(corpus, datasets_dir, IngestOptions(**opts, backend="onnx-int8"))
    (corpus / "guide" / "install.md").write_text("# Installation\n\nA changed page about zephyrine.\n")

    kept = ingest(corpus, datasets_dir, IngestOptions(**opts))
    assert calls == ["onnx-int8", "onnx-int8"]
    assert kept.full_rebuild is False and kept.rebuild_reason == ""
    assert read_manifest(datasets_dir / "docs" / MANIFEST_NAME).embedding.backend == "onnx-int8"

    switched = ingest(corpus, datasets_dir, IngestOptions(**opts, backend="onnx"))
    assert calls[-1] == "onnx" and switched.full_rebuild is True
    assert switched.rebuild_reason == "the model or chunking settings changed"
    assert read_manifest(datasets_dir / "docs" / MANIFEST_NAME).embedding.backend == "onnx"

    ingest(corpus, datasets_dir, IngestOptions(dataset_id="new", model=FakeEmbedder.model_name))
    assert calls[-1] == "onnx"  # a new dataset: the default (fp32)


# ------------------------------------------------------------------ discovery


def test_include_and_exclude_globs(corpus: Path, datasets_dir: Path) -> None:
    included = run(corpus, datasets_dir, dataset_id="inc", include=["guide/*.md"])
    excluded = run(corpus, datasets_dir, dataset_id="exc", exclude=["guide/", "*.txt"])

    assert included.documents == 2
    assert excluded.documents == 2
    registry = Registry(datasets_dir, allowed_models=[FakeEmbedder.model_name])
    try:
        assert sorted(d.path for d in registry.store("inc").documents()) == ["guide/install.md", "guide/usage.md"]
        assert sorted(d.path for d in registry.store("exc").documents()) == ["api/reference.md", "intro.rst"]
    finally:
        registry.close()


def test_discover_honours_nested_gitignore(tmp_path: Path) -> None:
    root = write_files(
        tmp_path / "src",
        {
            "keep.md": "k",
            "sub/.gitignore": "drafts/\n*.tmp.md\n",
            "sub/drafts/a.md": "d",
            "sub/b.tmp.md": "t",
            "sub/c.md": "c",
            "other/b.tmp.md": "kept: the rule is sub/'s",
        },
    )

    files, skipped = discover(root)

    assert [f.rel for f in files] == ["keep.md", "other/b.tmp.md", "sub/c.md"]
    assert skipped == []


def test_symlink_outside_the_folder_is_skipped_unless_followed(tmp_path: Path, datasets_dir: Path) -> None:
    outside = write_files(tmp_path / "outside", {"secret.md": "# Secret\n\nsecret words\n"})
    source = write_files(tmp_path / "src", {"a.md": "# A\n\ntext\n"})
    (source / "link.md").symlink_to(outside / "secret.md")
    (source / "inner.md").symlink_to(source / "a.md")

    report = run(source, datasets_dir)

    assert dict(report.skipped) == {"link.md": "symlink pointing outside the folder (use --follow-symlinks)"}
    assert report.documents == 1  # a.md; the link to it inside the folder is the same file
    assert [(d.path, d.kept) for d in report.duplicates] == [("inner.md", "a.md")]
    followed = run(source, datasets_dir, follow_symlinks=True, full=True)
    assert followed.documents == 2
    assert followed.skipped == []


def test_symlinked_directories_are_not_walked(tmp_path: Path) -> None:
    outside = write_files(tmp_path / "outside", {"secret.md": "s"})
    source = write_files(tmp_path / "src", {"a.md": "a"})
    (source / "linked").symlink_to(outside, target_is_directory=True)

    files, _ = discover(source)

    assert [f.rel for f in files] == ["a.md"]


def test_file_over_the_size_limit_is_skipped(corpus: Path, datasets_dir: Path) -> None:
    (corpus / "big.md").write_text("# Big\n\n" + "word " * 400)

    report = run(corpus, datasets_dir, max_file_bytes=1000)

    reasons = dict(report.skipped)
    assert "big.md" in reasons and "limit" in reasons["big.md"]
    assert report.documents == 5


def test_the_datasets_folder_inside_the_source_is_not_ingested(corpus: Path) -> None:
    inside = corpus / "datasets"
    run(corpus, inside)
    (inside / "docs" / "stray.md").write_text("# Stray\n\nnot a document\n")

    report = run(corpus, inside)

    assert report.documents == 5
    assert "datasets/docs/stray.md" not in dict(report.skipped)


# ------------------------------------------------------------------ what --watch relies on


def test_the_source_folder_and_its_options_are_recorded(corpus: Path, datasets_dir: Path) -> None:
    run(corpus, datasets_dir, include=["guide/*"], exclude=["*.rst"], follow_symlinks=True, max_file_bytes=5000)

    source = manifest_of(datasets_dir).source
    assert source is not None
    assert source.path == str(corpus.resolve())
    assert (source.include, source.exclude, source.follow_symlinks, source.max_file_bytes) == (
        ("guide/*",),
        ("*.rst",),
        True,
        5000,
    )


def test_a_source_too_big_to_record_is_left_out_with_a_note(corpus: Path, datasets_dir: Path) -> None:
    report = run(corpus, datasets_dir, exclude=[f"never-{n}-{'x' * 200}" for n in range(40)])

    assert manifest_of(datasets_dir).source is None
    assert report.notes and "source folder not recorded" in report.notes[0] and "--watch" in report.notes[0]
    assert report.documents == 5  # the ingest itself went through


def test_skip_unchanged_publishes_nothing_when_nothing_changed(corpus: Path, datasets_dir: Path) -> None:
    run(corpus, datasets_dir, name="Notes", description="My notes")
    before = (versions(datasets_dir), manifest_of(datasets_dir))

    report = run(corpus, datasets_dir, name="Notes", description="My notes", skip_unchanged=True)

    assert report.published is False and (report.unchanged, report.documents) == (5, 5)
    assert (versions(datasets_dir), manifest_of(datasets_dir)) == before


@pytest.mark.parametrize("change", ["touch", "options"])
def test_skip_unchanged_still_publishes_new_file_times_and_options(
    corpus: Path, datasets_dir: Path, change: str
) -> None:
    run(corpus, datasets_dir)
    kwargs: dict[str, Any] = {}
    if change == "touch":
        st = (corpus / "notes.txt").stat()
        os.utime(corpus / "notes.txt", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    else:
        kwargs["exclude"] = ["*.rst"]

    report = run(corpus, datasets_dir, skip_unchanged=True, **kwargs)

    assert report.published is True and report.embedded == 0
    assert report.touched == (1 if change == "touch" else 0)


def test_an_edited_file_keeps_the_vectors_of_its_unchanged_chunks(
    tmp_path: Path, datasets_dir: Path, make_registry: Callable[[], Registry]
) -> None:
    sections = {n: f"## Part {n}\n\nThe ocarina lesson number {n} covers scales and breathing.\n" for n in range(6)}
    src = write_files(tmp_path / "src", {"book.md": "# Book\n\n" + "\n".join(sections.values())})
    run(src, datasets_dir, chunk_tokens=24, overlap=0)
    store = make_registry().store("docs")
    before = {c.id: c for _, cs in store.iter_documents() for c in cs}
    assert len(before) >= 6
    sections[3] = "## Part 3\n\nThe harpsichord replaces the ocarina in lesson three.\n"
    (src / "book.md").write_text("# Book\n\n" + "\n".join(sections.values()))
    fake = FakeEmbedder()

    report = run(src, datasets_dir, chunk_tokens=24, overlap=0, embedder=fake)

    assert report.changed == 1 and 1 <= report.embedded < len(before)
    assert all("harpsichord" in t for t in fake.embedded)
    registry = make_registry()
    after = {c.id: c for _, cs in registry.store("docs").iter_documents() for c in cs}
    kept = [i for i in after if i in before]
    assert len(kept) == len(after) - report.embedded
    # Carried vectors are the ones the text would get anyway.
    vectors = registry.store("docs").vectors(kept)
    expected = FakeEmbedder().embed_documents([f"{after[i].heading_path}\n{after[i].text}" for i in kept])
    assert np.allclose(vectors, expected)
    assert [h.path for h in search(registry, "harpsichord", dataset="docs", mode="keyword").results] == ["book.md"]
