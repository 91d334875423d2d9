"""An ingest's plan (mcpower/plan.py): said before a long embedding, with a time from this
machine's rate; `--dry-run` gives it without embedding or publishing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import INSTALL_MD, NOTES_TXT, REFERENCE_MD, USAGE_MD, FakeEmbedder, write_files
from typer.testing import CliRunner

from mcpower.cli.app import app
from mcpower.defaults import DEFAULT_EMBEDDING_STORE_MB as STORE_MB
from mcpower.embedding.store import STORE_FOLDER, EmbeddingStore
from mcpower.ingestion import IngestOptions, ingest
from mcpower.manifest import MANIFEST_NAME
from mcpower.plan import MEASURE, SLICE


def long_corpus(root: Path, files: int = 12) -> Path:
    """About 10 chunks a file (more than a slice in all)."""
    return write_files(
        root,
        {
            f"doc{n:02d}.md": f"# Document {n}\n\n"
            + "\n".join(
                f"## Part {p}\n\nThe zephyrine daemon of document {n} runs part {p} at night.\n" for p in range(10)
            )
            for n in range(files)
        },
    )


def plain_corpus(root: Path) -> Path:
    """Five documents read in this process (no reST or HTML: no reader process to start)."""
    return write_files(
        root,
        {
            "guide/install.md": INSTALL_MD,
            "guide/usage.md": USAGE_MD,
            "api/reference.md": REFERENCE_MD,
            "notes.txt": NOTES_TXT,
            "intro.md": "# Intro\n\nThe zephyrine daemon keeps the widgets in tune.\n",
        },
    )


def test_a_dry_run_plans_and_publishes_nothing(tmp_path: Path, datasets_dir: Path, fake_embedder: FakeEmbedder) -> None:
    corpus = plain_corpus(tmp_path / "corpus")
    first = CliRunner().invoke(app, ["ingest", str(corpus), "--id", "docs", "--datasets-dir", str(datasets_dir), "-q"])
    assert first.exit_code == 0, first.output
    manifest = (datasets_dir / "docs" / MANIFEST_NAME).read_bytes()
    (corpus / "guide" / "usage.md").unlink()
    parts = "\n".join(f"## Step {p}\n\nStop the zephyrine daemon, then upgrade part {p} of it.\n" for p in range(80))
    write_files(corpus, {"guide/upgrade.md": f"# Upgrade\n\n{parts}"})
    fake_embedder.embedded.clear()
    argv = ["ingest", str(corpus), "--id", "docs", "--datasets-dir", str(datasets_dir), "--dry-run"]

    planned = CliRunner().invoke(app, [*argv, "--json"])

    assert planned.exit_code == 0, planned.output
    data = json.loads(planned.stdout)
    plan, new = data["plan"], data["plan"]["to_embed"]
    assert data["dry_run"] is True and data["published"] is False
    assert (plan["read"], plan["unchanged"], plan["removed"]) == (1, 4, ["guide/usage.md"])
    assert new > SLICE and plan["carried"] == data["chunks"] - new and plan["from_store"] == 0
    # No rate recorded yet (the first ingest embedded too little to time): a sample was timed, and kept.
    assert plan["sampled"] == MEASURE and plan["sample_kept"] is True and plan["estimate_seconds"] is not None
    assert f"measured on {MEASURE} chunks" in plan["rate_basis"]
    assert len(fake_embedder.embedded) == MEASURE
    assert (datasets_dir / "docs" / MANIFEST_NAME).read_bytes() == manifest  # nothing published

    text = CliRunner().invoke(app, argv).stdout
    assert "docs: dry run, nothing published" in text
    assert "would remove 1 document: guide/usage.md" in text
    carried = plan["carried"]
    assert (
        f"{new - MEASURE} to embed, {carried} kept from the previous version, {MEASURE} from the embedding store"
        in text
    )
    assert f"those {MEASURE} chunks were embedded to time the model, and are kept" in text

    fake_embedder.embedded.clear()
    real = ingest(
        corpus, datasets_dir, IngestOptions(dataset_id="docs", embedding_store_mb=STORE_MB), embedder=fake_embedder
    )
    assert real.plan.from_store == 2 * MEASURE and real.embedded == new - 2 * MEASURE  # no sample embedded twice
    assert real.removed == 1 and real.added == 1


def test_a_short_embedding_leaves_the_store_closed(
    tmp_path: Path, datasets_dir: Path, fake_embedder: FakeEmbedder
) -> None:
    """At most a slice to embed: an interruption loses no more without the store (a save under
    --watch costs no store file, no transaction, no fsync)."""
    cache = tmp_path / "cache"
    report = ingest(
        plain_corpus(tmp_path / "corpus"),
        datasets_dir,
        IngestOptions(cache_dir=cache, embedding_store_mb=STORE_MB),
        embedder=fake_embedder,
    )
    assert 0 < report.embedded <= SLICE and report.plan.stored is False
    assert not (cache / STORE_FOLDER).exists()


def test_the_estimate_is_this_machine_s_recorded_rate(
    tmp_path: Path, datasets_dir: Path, fake_embedder: FakeEmbedder
) -> None:
    source = long_corpus(tmp_path / "docs")
    cache = tmp_path / "cache"
    measuring = FakeEmbedder()
    ingest(source, tmp_path / "elsewhere", IngestOptions(), embedder=measuring)
    chars = sum(len(t) for t in measuring.embedded)  # what the model reads: heading paths and texts
    store = EmbeddingStore.open(cache, fake_embedder)
    assert store is not None
    store.record_rate(chars=500, seconds=2.0)  # 250 characters a second
    store.close()

    report = ingest(
        source,
        datasets_dir,
        IngestOptions(cache_dir=cache, dry_run=True, embedding_store_mb=STORE_MB),
        embedder=fake_embedder,
    )

    plan = report.plan
    assert plan.estimate_seconds == pytest.approx(chars / 250)
    assert plan.chunks_per_second == pytest.approx(plan.to_embed / (chars / 250))
    assert plan.rate_basis.startswith("recorded on this machine on ")
    assert fake_embedder.embedded == [] and plan.sampled == 0  # a rate is known: nothing embedded at all
    assert not (datasets_dir / "docs").exists()


def test_a_long_embedding_is_announced_before_it_starts(tmp_path: Path, fake_embedder: FakeEmbedder) -> None:
    source = long_corpus(tmp_path / "docs")
    datasets = tmp_path / "datasets"

    result = CliRunner().invoke(app, ["ingest", str(source), "--datasets-dir", str(datasets)])

    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    (plan,) = [i for i, line in enumerate(lines) if line.startswith("plan: ")]
    assert lines.index("read 12 files") < plan < lines.index("embedding 120 chunks…")
    assert lines[plan].startswith("plan: 12 documents, 120 chunks, 120 to embed, ~")
    assert f"(measured on {MEASURE} chunks)" in lines[plan] and "the same command resumes" in lines[plan]
    assert json.loads(
        CliRunner().invoke(app, ["ingest", str(source), "--datasets-dir", str(datasets), "--full", "--json"]).stdout
    )["plan"]["rate_basis"].startswith("recorded on this machine")  # the first run's rate, kept

    short = CliRunner().invoke(app, ["ingest", str(plain_corpus(tmp_path / "short")), "--datasets-dir", str(datasets)])
    assert short.exit_code == 0, short.output
    assert "plan: " not in short.stderr and "chunks" in short.stderr  # a few chunks: not worth a line
