"""Document priors (issue 20, item 3): change notes — changelogs, release notes, porting and migration
guides, found by path, title or shape — rank below the page that documents a feature, unless the
question is about versions or changes; ``priors=False`` (tool, CLI) ranks by score alone."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from conftest import FakeEmbedder
from typer.testing import CliRunner

from mcpower import priors as priors_module
from mcpower.cli.app import app
from mcpower.ingestion import IngestOptions, ingest
from mcpower.priors import CHANGE_NOTES_FACTOR, about_changes, apply_priors, is_change_notes
from mcpower.registry import Registry
from mcpower.search import rank_paths, search
from mcpower.store import ChunkHit


@pytest.mark.parametrize(
    "path",
    [
        "release-notes.md",
        "docs/en/release_notes.md",
        "releases/4.2.txt",
        "CHANGES.rst",
        "changes.html",
        "HISTORY.md",
        "NEWS.txt",
        "whatsnew/3.11.rst",
        "changelog/2023.md",
        "changelog-2023.md",
        "guides/migrating-to-v2.md",
        "porting-guide.rst",
        "Upgrading.md",
    ],
)
def test_change_notes_by_path(path: str) -> None:
    assert is_change_notes(path, "", "")


@pytest.mark.parametrize(
    "path",
    [
        "tutorial/query-params.md",
        "topics/migrations.txt",  # database migrations are a feature, not a migration guide
        "ref/migration-operations.txt",
        "history-design-future.md",
        "advanced/response-change-status-code.md",
        "newsletter/index.md",
        "releasing.md",
    ],
)
def test_feature_pages_are_not_change_notes(path: str) -> None:
    assert not is_change_notes(path, "Some page", "Some page > Usage")


@pytest.mark.parametrize(
    "title", ["Release Notes", "Django 4.2 release notes", "What's New In Python 3.11", "Changelog", "Porting guide"]
)
def test_change_notes_by_title(title: str) -> None:
    assert is_change_notes("docs/page.md", title, title)


@pytest.mark.parametrize(
    "heading",
    [
        "0.100.0 (2023-07-07)",
        "Version 3.1.2",
        "Release 5.3.0 (released Oct 16, 2022)",
        "v2.0.1",
        "[1.2.0] - 2024-01-01",
        "2023-01-05, Version 19.4.0 (Current), @someone",
        "1.0.0rc1",
    ],
)
def test_change_notes_by_shape_a_version_heading_above_the_chunk(heading: str) -> None:
    assert is_change_notes("docs/project.md", "Project", f"Project > {heading} > Features")


@pytest.mark.parametrize(
    "heading",
    [
        "Python 3.10+",
        "Pydantic v2",
        "Step 2",
        "HTTP/1.1 keep-alive",
        "3 ways to run",
        "4.1. if Statements",
        "1.2 Setup",
    ],
)
def test_headings_that_mention_a_version_are_not_version_headings(heading: str) -> None:
    assert not is_change_notes("docs/page.md", "Page", f"Page > {heading}")


@pytest.mark.parametrize(
    "query",
    [
        "what changed in 0.100",
        "what is new in FastAPI",
        "new in version 2",
        "which parameters are deprecated",
        "when was the cookie option removed",
        "changelog of the router",
        "migrate from Pydantic v1",
        "since when does it support lifespan",
        "breaking release",
    ],
)
def test_questions_about_versions_or_changes(query: str) -> None:
    assert about_changes(query)


@pytest.mark.parametrize(
    "query",
    [
        "How do I change the response status code?",
        "make a query parameter optional",
        "remove a header",
        "upload a file",
    ],
)
def test_questions_about_features(query: str) -> None:
    assert not about_changes(query)


class Hit:
    def __init__(self, path: str, heading_path: str = "", title: str = "") -> None:
        self.path, self.heading_path, self.title = path, heading_path, title
        self.change_notes = is_change_notes(path, title, heading_path)


HITS = {1: Hit("release-notes.md"), 2: Hit("tutorial/query-params.md"), 3: Hit("tutorial/body.md")}


def fetcher(log: list[list[int]]) -> object:
    def fetch(ids: list[int]) -> dict[int, Hit]:
        log.append(ids)
        return {i: HITS[i] for i in ids if i in HITS}

    return fetch


def test_apply_priors_ranks_change_notes_down_and_the_switch_turns_it_off() -> None:
    ranked = [(1, 0.60), (2, 0.55), (3, 0.40)]
    on = apply_priors(ranked, fetcher([]), "optional query parameter", 2)  # type: ignore[arg-type]
    assert [(h.path, s) for h, s in on] == [("tutorial/query-params.md", 0.55), ("release-notes.md", 0.60 * 0.85)]
    off = apply_priors(ranked, fetcher([]), "optional query parameter", 2, enabled=False)  # type: ignore[arg-type]
    assert [h.path for h, _ in off] == ["release-notes.md", "tutorial/query-params.md"]
    asked = apply_priors(ranked, fetcher([]), "what changed in 0.95?", 2)  # type: ignore[arg-type]
    assert [(h.path, s) for h, s in asked] == [("release-notes.md", 0.60), ("tutorial/query-params.md", 0.55)]


def test_a_hits_kind_is_worked_out_once_and_is_no_field(monkeypatch: pytest.MonkeyPatch) -> None:
    # A store holding its places in memory hands the same hits to every search: each hit's kind is
    # worked out at its first search, not at every one (grouping asks ~60 candidates a search).
    asked: list[tuple[str, ...]] = []

    def counted(*location: str) -> bool:
        asked.append(location)
        return is_change_notes(*location)

    monkeypatch.setattr(priors_module, "is_change_notes", counted)
    notes = ChunkHit(
        1, 0, "Release Notes > 0.95.0", 1, 9, "", "docs/en/docs/release-notes.md", "Release Notes", ".md", 7
    )
    feature = dataclasses.replace(notes, path="tutorial/body.md", title="Body", heading_path="Body > Fields")

    assert [notes.change_notes, notes.change_notes, feature.change_notes, feature.change_notes] == [
        True,
        True,
        False,
        False,
    ]
    assert len(asked) == 2
    assert notes == dataclasses.replace(notes) and "change_notes" not in [f.name for f in dataclasses.fields(notes)]


def test_apply_priors_looks_up_only_the_candidates_that_can_reach_the_top_k() -> None:
    log: list[list[int]] = []
    ranked = [(2, 0.9), (3, 0.8)] + [(100 + i, 0.5 - i / 1000) for i in range(200)]
    out = apply_priors(ranked, fetcher(log), "a feature", 2)  # type: ignore[arg-type]
    assert [h.path for h, _ in out] == ["tutorial/query-params.md", "tutorial/body.md"]
    assert log == [[2, 3]]  # the top k alone, as without priors, not the 202 candidates


FEATURE = (
    "# Query parameters\n\nWhen you declare other function parameters that are not part of the path, they are "
    "interpreted as query parameters. Declare an optional query parameter with a default value of None, and FastAPI "
    "knows it is not required. Conversion and validation happen too, for each one of them.\n"
)
NOTES = "# Release Notes\n\n## 0.95.0\n\n* Optional query parameter default value fix.\n\n## 0.94.0\n\n* Docs: typos.\n"


@pytest.fixture
def docs(tmp_path: Path, fake_embedder: FakeEmbedder) -> Registry:
    folder = tmp_path / "docs"
    (folder / "tutorial").mkdir(parents=True)
    (folder / "tutorial" / "query-params.md").write_text(FEATURE)
    (folder / "release-notes.md").write_text(NOTES)
    datasets = tmp_path / "datasets"
    ingest(folder, datasets, IngestOptions(dataset_id="docs"), embedder=fake_embedder)
    return Registry(datasets, embedder_factory=lambda model: fake_embedder)


QUESTION = "optional query parameter default value"


def test_search_puts_the_feature_page_above_the_release_notes_that_mention_it(docs: Registry) -> None:
    off = search(docs, QUESTION, "docs", top_k=3, priors=False).results
    assert off[0].path == "release-notes.md"  # the notes out-score the page by themselves
    on = search(docs, QUESTION, "docs", top_k=3).results
    assert on[0].path == "tutorial/query-params.md"
    assert on[1].path == "release-notes.md"
    assert on[1].score == pytest.approx(off[0].score * CHANGE_NOTES_FACTOR, abs=1e-4)
    assert [r.score for r in on] == sorted((r.score for r in on), reverse=True)
    assert rank_paths(docs, QUESTION, "docs", 3)[0] == "tutorial/query-params.md"
    assert rank_paths(docs, QUESTION, "docs", 3, priors=False)[0] == "release-notes.md"


def test_a_question_about_a_version_still_finds_the_release_notes_first(docs: Registry) -> None:
    results = search(docs, "optional query parameter default value fix in 0.95.0", "docs", top_k=3).results
    assert results[0].path == "release-notes.md"


def test_the_cli_switch(docs: Registry, tmp_path: Path) -> None:
    args = ["search", "docs", QUESTION, "--datasets-dir", str(tmp_path / "datasets"), "--json", "-k", "2"]
    on = json.loads(CliRunner().invoke(app, args).stdout)
    off = json.loads(CliRunner().invoke(app, [*args, "--no-priors"]).stdout)
    assert on["results"][0]["path"] == "tutorial/query-params.md"
    assert off["results"][0]["path"] == "release-notes.md"


@pytest.mark.anyio
async def test_the_tool_argument(docs: Registry) -> None:
    from mcp import Client

    from mcpower.server.app import create_server

    async with Client(create_server(docs)) as client:
        for priors, first in ((True, "tutorial/query-params.md"), (False, "release-notes.md")):
            r = await client.call_tool("knowledge_search", {"query": QUESTION, "dataset": "docs", "priors": priors})
            assert not r.is_error, r.content
            assert r.structured_content is not None
            assert r.structured_content["results"][0]["path"] == first
        bad = await client.call_tool("knowledge_search", {"query": QUESTION, "priors": "no"})
        assert bad.is_error
