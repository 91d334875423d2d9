"""What a security review found (issue 10): each hole, and the test that fails without its fix.

Manifests, symlinks, caches and client input are untrusted; docs/robustness.md has the policy.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from conftest import FakeEmbedder, write_files

from mcpower.discover import discover
from mcpower.errors import EmbeddingModelError
from mcpower.ingestion import IngestOptions, IngestReport, ingest
from mcpower.manifest import MANIFEST_NAME
from mcpower.registry import Registry
from mcpower.search import search


def rewrite_manifest(folder: Path, **changes: object) -> None:
    path = folder / MANIFEST_NAME
    data = json.loads(path.read_text())
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.split("__")
        for p in parents:
            node = node[p]
        node[last] = value
    path.write_text(json.dumps(data))


# ---------------------------------------------------------------- 1. a manifest names the model


@pytest.mark.parametrize("named", ["/tmp/evil-model", "~/evil-model", "evil-model", "../../evil"])
def test_a_model_a_manifest_names_is_not_loaded_unless_allowed(
    corpus: Path, datasets_dir: Path, tmp_path: Path, named: str
) -> None:
    ingest(corpus, datasets_dir, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    rewrite_manifest(datasets_dir / "docs", embedding__model=named)
    loaded: list[str] = []

    def loader(model: str) -> FakeEmbedder:
        from mcpower import embedding

        loaded.append(model)
        return embedding.load_query_embedder(model, tmp_path / "cache")  # type: ignore[return-value]

    registry = Registry(datasets_dir, embedder_factory=loader)
    with pytest.raises(EmbeddingModelError, match="MCPOWER_ALLOWED_MODELS"):
        search(registry, "zephyrine", dataset="docs", mode="semantic")
    assert search(registry, "zephyrine", dataset="docs", mode="keyword").results  # the rest still works


def test_an_allowed_model_folder_is_tried(corpus: Path, datasets_dir: Path, tmp_path: Path) -> None:
    from mcpower import embedding

    folder = tmp_path / "my-model"
    folder.mkdir()

    with pytest.raises(EmbeddingModelError, match="not available offline"):  # allowed: it gets as far as loading
        embedding.load_query_embedder(str(folder), tmp_path / "cache", allowed=[str(folder)])
    with pytest.raises(EmbeddingModelError, match="MCPOWER_ALLOWED_MODELS"):
        embedding.load_query_embedder(str(folder), tmp_path / "cache", allowed=[])


# ---------------------------------------------------------------- 2. symlinks and the ignore rules


def test_a_symlink_cannot_smuggle_in_a_hidden_or_excluded_file(tmp_path: Path) -> None:
    root = write_files(
        tmp_path / "project",
        {
            ".env": "OPENAI_API_KEY=sk-secret\n",
            "secrets/prod.txt": "password=hunter2\n",
            "docs/real.md": "# Real\n\nfine\n",
        },
    )
    (root / "docs" / "config.md").symlink_to(root / ".env")
    (root / "notes.txt").symlink_to(root / "secrets" / "prod.txt")
    (root / "ok.md").symlink_to(root / "docs" / "real.md")

    files, skipped = discover(root, exclude=["secrets/"])

    assert sorted(f.rel for f in files) == ["docs/real.md", "ok.md"]
    reasons = dict(skipped)
    assert "hidden" in reasons["docs/config.md"] and "excluded" in reasons["notes.txt"]


def test_a_symlink_out_of_the_folder_to_a_dotfile_is_not_followed_even_when_asked(tmp_path: Path) -> None:
    secret = write_files(tmp_path / "home", {".ssh/notes.txt": "private\n", "public/notes.txt": "public\n"})
    root = write_files(tmp_path / "docs", {"a.md": "# A\n"})
    (root / "keys.txt").symlink_to(secret / ".ssh" / "notes.txt")
    (root / "pub.txt").symlink_to(secret / "public" / "notes.txt")

    without, _ = discover(root)
    followed, skipped = discover(root, follow_symlinks=True)

    assert [f.rel for f in without] == ["a.md"]
    assert [f.rel for f in followed] == ["a.md", "pub.txt"]
    assert "keys.txt" in dict(skipped)


def test_a_fifo_swapped_in_after_discovery_does_not_hang_ingest(
    corpus: Path, datasets_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mcpower.ingestion
    from mcpower import discover as discover_module

    real = discover_module.discover

    def then_swap(*args: object, **kwargs: object) -> tuple[list[discover_module.SourceFile], list[tuple[str, str]]]:
        found = real(*args, **kwargs)  # type: ignore[arg-type]
        (corpus / "notes.txt").unlink()
        os.mkfifo(corpus / "notes.txt")  # nobody will ever write to it
        return found

    monkeypatch.setattr(mcpower.ingestion, "discover", then_swap)
    reports: list[IngestReport] = []
    worker = threading.Thread(
        target=lambda: reports.append(
            ingest(corpus, datasets_dir, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
        )
    )
    worker.start()
    worker.join(timeout=60)
    if worker.is_alive():  # the bug: blocked opening the FIFO; unblock it so the test fails instead of hanging
        with open(corpus / "notes.txt", "w") as fifo:
            fifo.write("x")
        worker.join()
        pytest.fail("ingest blocked on a FIFO")
    [report] = reports

    assert dict(report.skipped)["notes.txt"].startswith("cannot read: no longer a regular file")
    assert report.documents == 4
