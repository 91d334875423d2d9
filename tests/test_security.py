"""What a security review found (issue 10): each hole, and the test that fails without its fix.

Manifests, symlinks, caches and client input are untrusted; docs/robustness.md has the policy.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import FakeEmbedder, write_files
from mcp import Client

from mcpower.discover import discover
from mcpower.errors import (
    DatasetNotFoundError,
    DatasetUnavailableError,
    EmbeddingModelError,
    IngestError,
    ResultNotFoundError,
)
from mcpower.ingestion import IngestOptions, IngestReport, ingest
from mcpower.manifest import MANIFEST_NAME
from mcpower.registry import Registry
from mcpower.search import search
from mcpower.server.app import create_server


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


# ---------------------------------------------------------------- 3. a copy cannot take an id


def test_a_nested_copy_never_takes_the_id_of_the_folder_that_owns_it(
    corpus: Path, datasets_dir: Path, make_registry: Callable[[], Registry]
) -> None:
    ingest(corpus, datasets_dir, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    shutil.copytree(datasets_dir / "docs", datasets_dir / "backup" / "docs")  # "backup" sorts first
    rewrite_manifest(datasets_dir / "backup" / "docs", description="the copy")

    registry = make_registry()

    by_id = {e.id: e for e in registry.entries()}
    assert by_id["docs"].status == "ready" and by_id["docs"].location == "docs"
    assert by_id["docs"].info is not None and by_id["docs"].info.description != "the copy"
    assert by_id["docs@backup/docs"].status == "error"
    assert "already used by docs" in str(by_id["docs@backup/docs"].error)


# ---------------------------------------------------------------- 6. one broken dataset, the rest fine


def symlink_loop_as_index(folder: Path) -> None:
    index = folder / json.loads((folder / MANIFEST_NAME).read_text())["index"]
    index.unlink()
    loop_a, loop_b = index.parent / "loop-a", index.parent / "loop-b"
    loop_a.symlink_to(loop_b)
    loop_b.symlink_to(loop_a)
    index.symlink_to(loop_a)


def test_a_symlink_loop_breaks_only_its_own_dataset(
    corpus: Path, datasets_dir: Path, make_registry: Callable[[], Registry], capsys: pytest.CaptureFixture[str]
) -> None:
    for ds in ("alpha", "broken", "zulu"):
        ingest(corpus, datasets_dir, IngestOptions(dataset_id=ds), embedder=FakeEmbedder())
    symlink_loop_as_index(datasets_dir / "broken")
    registry = make_registry()

    everything = search(registry, "zephyrine daemon")
    registry.warm_up()  # logs the broken one and goes on with the next
    loaded = [ds for ds in ("alpha", "zulu") if registry.store(ds)]

    assert everything.meta.datasets == ["alpha", "zulu"]
    assert loaded == ["alpha", "zulu"]
    with pytest.raises(DatasetUnavailableError) as info:
        registry.store("broken")
    assert str(datasets_dir.resolve()) not in info.value.message


def test_validate_reports_a_symlink_loop_without_a_traceback(corpus: Path, datasets_dir: Path) -> None:
    from typer.testing import CliRunner

    from mcpower.cli.app import app

    for ds in ("broken", "fine"):
        ingest(corpus, datasets_dir, IngestOptions(dataset_id=ds), embedder=FakeEmbedder())
    symlink_loop_as_index(datasets_dir / "broken")

    result = CliRunner().invoke(app, ["validate", "--datasets-dir", str(datasets_dir)])

    assert result.exit_code == 1
    assert "Traceback" not in result.output
    lines = result.stdout.splitlines()
    assert any(line.startswith("error  broken:") for line in lines)
    assert any(line.startswith("ready  fine:") for line in lines)
    assert sum("broken" in line for line in lines) == 1 and "broken" not in result.stderr  # once, where it belongs


# ---------------------------------------------------------------- 8. the lock and the temporary manifest


def test_ingest_does_not_write_through_a_symlinked_lock(corpus: Path, datasets_dir: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (datasets_dir / "docs").mkdir(parents=True)
    (datasets_dir / "docs" / ".lock").symlink_to(victim)

    with pytest.raises(IngestError, match="symlink"):
        ingest(corpus, datasets_dir, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    assert victim.read_text() == "precious\n"


def test_the_temporary_manifest_cannot_be_redirected(corpus: Path, datasets_dir: Path, tmp_path: Path) -> None:
    from mcpower.layout import write_manifest
    from mcpower.manifest import read_manifest

    ingest(corpus, datasets_dir, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    folder = datasets_dir / "docs"
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    for name in (f".manifest.json.{os.getpid()}.tmp", ".manifest.json.tmp"):  # the old, predictable names
        (folder / name).symlink_to(victim)

    write_manifest(read_manifest(folder / MANIFEST_NAME), folder)

    assert victim.read_text() == "precious\n"


def test_a_failed_first_ingest_leaves_no_empty_dataset_folder(tmp_path: Path, datasets_dir: Path) -> None:
    source = write_files(tmp_path / "src", {"binary.md": b"\x00\x01 not text"})

    with pytest.raises(IngestError, match="every file was skipped"):
        ingest(source, datasets_dir, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    assert not (datasets_dir / "docs").exists()


# ---------------------------------------------------------------- 9, 13. result ids and unknown datasets


@pytest.mark.parametrize("result_id", ["docs:8000000000000000", "docs:ffffffffffffffff"])
def test_a_result_id_beyond_int64_is_not_found(ingested: tuple[Path, Registry], result_id: str) -> None:
    from mcpower.search import get_source

    _, registry = ingested
    with pytest.raises(ResultNotFoundError, match="not a result id"):
        get_source(registry, result_id)


def test_an_unknown_id_does_not_rescan_every_dataset(
    ingested: tuple[Path, Registry], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcpower.store.local import catalog

    _, registry = ingested
    walks: list[Path] = []
    real = catalog.find_manifests
    monkeypatch.setattr(catalog, "find_manifests", lambda root: walks.append(root) or real(root))

    for n in range(20):
        with pytest.raises(DatasetNotFoundError):
            registry.store(f"no-such-dataset-{n}")

    assert walks == []


def test_dataset_not_found_names_at_most_twenty_ids() -> None:
    error = DatasetNotFoundError("nope", [f"ds-{i:03d}" for i in range(500)])

    assert "ds-019" in error.message and "ds-020" not in error.message
    assert "and 480 more" in error.message and len(error.message) < 500


# ---------------------------------------------------------------- the server: what clients read


@pytest.fixture
def served(ingested: tuple[Path, Registry]) -> Registry:
    return ingested[1]


@pytest.mark.anyio
async def test_no_prompts_capability_is_advertised(served: Registry) -> None:
    async with Client(create_server(served)) as client:
        capabilities = client.server_capabilities

    assert capabilities is not None and capabilities.prompts is None
    assert capabilities.tools is not None and capabilities.resources is not None


@pytest.mark.anyio
async def test_a_huge_resource_uri_is_refused_without_echoing_it(served: Registry) -> None:
    from mcp.shared.exceptions import MCPError

    uri = "mcpower://docs/" + "a" * 2_000_000
    async with Client(create_server(served)) as client:
        with pytest.raises(MCPError) as info:
            await client.read_resource(uri)

    assert len(str(info.value)) < 300
    assert "4096" in str(info.value)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("path", "mime"),
    [("intro.rst", "text/markdown"), ("notes.txt", "text/plain"), ("guide/install.md", "text/markdown")],
)
async def test_each_document_is_served_with_its_own_mime_type(served: Registry, path: str, mime: str) -> None:
    async with Client(create_server(served)) as client:
        listed = {str(r.uri): r.mime_type for r in (await client.list_resources()).resources}
        read = await client.read_resource(f"mcpower://docs/{path}")

    assert listed[f"mcpower://docs/{path}"] == mime
    assert read.contents[0].mime_type == mime


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("arguments", "code", "says"),
    [
        ({"query": "x", "top_k": True}, "INVALID_TOP_K", "top_k must be a whole number from 1 to 100; got true"),
        ({"query": "x", "top_k": 0}, "INVALID_TOP_K", "top_k must be a whole number from 1 to 100; got 0"),
        (
            {"query": "x", "mode": "fuzzy"},
            "INVALID_QUERY",
            'mode must be one of hybrid, semantic, keyword; got "fuzzy"',
        ),
        ({}, "INVALID_QUERY", "query is required; query must be text of 1 to 1024 characters"),
    ],
)
async def test_schema_errors_are_said_plainly(
    served: Registry, arguments: dict[str, object], code: str, says: str
) -> None:
    async with Client(create_server(served)) as client:
        result = await client.call_tool("knowledge_search", arguments)

    assert result.is_error
    assert result.structured_content == {"status": "error", "error": {"code": code, "message": says}}


def test_absolute_paths_never_reach_a_client() -> None:
    from mcpower.server.responses import redact_paths  # what the server's RedactPaths does to messages

    home = str(Path.home())
    text = redact_paths(
        f"EMBEDDING_MODEL: cannot load {home}/.cache/mcpower/onnx/x/model.onnx, nor /opt/models/m/config.json; "
        "see mcpower://docs/a/b",
    )

    assert home not in text and "/opt/models" not in text
    assert "~/.cache" not in text or "<path>" in text
    assert "mcpower://docs/a/b" in text  # URIs and relative paths are left alone
