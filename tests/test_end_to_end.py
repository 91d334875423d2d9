"""End to end with the real packaged model on the real FastAPI docs: ingest, validate, search."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mcpower.cli.app import app

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "bench" / "docs-fastapi" / "corpus"

# Questions a FastAPI user would ask, and the page that answers each.
QUESTIONS = {
    "How do I run a task after returning a response?": "tutorial/background-tasks.md",
    "How do I allow cross-origin requests from a browser frontend?": "tutorial/cors.md",
    "How do I receive uploaded files?": "tutorial/request-files.md",
    "How do I hash passwords and issue JWT tokens?": "tutorial/security/oauth2-jwt.md",
    "How do I serve static files like images and CSS?": "tutorial/static-files.md",
    "How can I test my application?": "tutorial/testing.md",
}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CORPUS.is_dir(), reason=f"bench corpus not found at {CORPUS}"),
]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("datasets")
    result = CliRunner().invoke(app, ["ingest", str(CORPUS), "--id", "fastapi", "--datasets-dir", str(root), "-q"])
    assert result.exit_code == 0, result.output
    assert "155 documents" in result.stdout
    return root


def test_the_dataset_validates(datasets: Path) -> None:
    result = CliRunner().invoke(app, ["validate", "--datasets-dir", str(datasets), "--json"])

    assert result.exit_code == 0
    assert json.loads(result.stdout)["ok"] is True


@pytest.mark.parametrize("mode", ["hybrid", "semantic", "keyword"])
def test_plain_questions_find_their_page_in_the_top_5(datasets: Path, mode: str) -> None:
    found = {}
    for question, page in QUESTIONS.items():
        result = CliRunner().invoke(
            app, ["search", "fastapi", question, "--mode", mode, "-k", "5", "--json", "--datasets-dir", str(datasets)]
        )
        assert result.exit_code == 0, result.output
        found[question] = page in [r["path"] for r in json.loads(result.stdout)["results"]]

    # Hybrid and semantic must answer every question; keyword search alone is allowed one miss.
    assert sum(found.values()) >= len(QUESTIONS) - (1 if mode == "keyword" else 0), found


def test_an_off_topic_question_is_flagged_low_confidence(datasets: Path) -> None:
    result = CliRunner().invoke(
        app, ["search", "fastapi", "how do I bake sourdough bread", "--json", "--datasets-dir", str(datasets)]
    )

    assert json.loads(result.stdout)["meta"]["low_confidence"] is True
