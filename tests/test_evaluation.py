"""Retrieval metrics against hand-computed values, file loading, and `mcpower eval`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mcpower.cli.app import app
from mcpower.errors import McpowerError
from mcpower.evaluation import (
    doc_keys,
    evaluate,
    load_qrels,
    load_queries,
    mrr_at,
    ndcg_at,
    recall_at,
)


def test_ndcg_by_hand() -> None:
    judged = {"a": 3.0, "b": 1.0, "c": 2.0}
    ranked = ["b", "x", "a"]
    dcg = 1 / math.log2(2) + 0 + 3 / math.log2(4)
    idcg = 3 / math.log2(2) + 2 / math.log2(3) + 1 / math.log2(4)

    assert ndcg_at(ranked, judged, 10) == pytest.approx(dcg / idcg)
    assert ndcg_at(["a", "c", "b"], judged, 10) == pytest.approx(1.0)
    assert ndcg_at(["x"], judged, 10) == 0.0


def test_ndcg_cuts_at_k() -> None:
    assert ndcg_at(["x", "a"], {"a": 1.0}, 1) == 0.0


def test_recall_counts_only_positive_judgments() -> None:
    judged = {"a": 1.0, "b": 2.0, "z": 0.0}

    assert recall_at(["a", "z", "q"], judged, 10) == 0.5
    assert recall_at(["q", "a", "b"], judged, 2) == 0.5
    assert recall_at(["a"], {"z": 0.0}, 10) == 0.0


def test_mrr_is_the_reciprocal_rank_of_the_first_relevant() -> None:
    assert mrr_at(["x", "y", "a"], {"a": 1.0}, 10) == pytest.approx(1 / 3)
    assert mrr_at(["x", "a"], {"a": 1.0}, 1) == 0.0


def test_a_document_counts_once_at_its_best_chunk() -> None:
    # Chunks of doc "a" at ranks 1 and 2, doc "b" at rank 3: b is the second document.
    report = evaluate(lambda q, k: ["a.md", "a.md", "b.md"], {"1": "q"}, {"1": {"b": 1.0}})

    assert report.metrics["mrr@10"] == pytest.approx(1 / 2)
    assert report.queries == 1


def test_queries_without_relevant_documents_are_skipped() -> None:
    report = evaluate(lambda q, k: ["a.md"], {"1": "q", "2": "r"}, {"1": {"a": 1.0}, "2": {"a": 0.0}})

    assert report.queries == 1
    assert report.skipped_queries == 1


def test_doc_ids_match_by_path_without_suffix_or_stem() -> None:
    assert doc_keys("abstracts/12345.md") == ("abstracts/12345.md", "abstracts/12345", "12345")


def test_beir_files_load(tmp_path: Path) -> None:
    q = tmp_path / "q.jsonl"
    q.write_text('{"_id": "1", "text": "first"}\n\n{"id": 2, "text": "second"}\n')
    r = tmp_path / "r.tsv"
    r.write_text("query-id\tcorpus-id\tscore\n1\td1\t1\n1\td2\t2\n2 0 d3 1\n")

    assert load_queries(q) == {"1": "first", "2": "second"}
    assert load_qrels(r) == {"1": {"d1": 1.0, "d2": 2.0}, "2": {"d3": 1.0}}


@pytest.mark.parametrize("line", ['{"text": "no id"}', "[1, 2]", "not json", '{"_id": "1"}'])
def test_bad_query_lines_are_errors_naming_the_line(tmp_path: Path, line: str) -> None:
    q = tmp_path / "q.jsonl"
    q.write_text('{"_id": "1", "text": "ok"}\n' + line + "\n")

    with pytest.raises(McpowerError, match=r"q\.jsonl:2"):
        load_queries(q)


def test_bad_qrels_line_is_an_error(tmp_path: Path) -> None:
    r = tmp_path / "r.tsv"
    r.write_text("1\td1\t1\n1\td2\tmuch\n")

    with pytest.raises(McpowerError, match=r"r\.tsv:2"):
        load_qrels(r)


def test_eval_command_scores_a_dataset(ingested: tuple[Path, object], tmp_path: Path) -> None:
    datasets_dir, _ = ingested
    q = tmp_path / "q.jsonl"
    q.write_text('{"_id": "1", "text": "install on linux"}\n{"_id": "2", "text": "reference api"}\n')
    r = tmp_path / "r.tsv"
    r.write_text("1\tguide/install\t1\n2\treference\t1\n")

    result = CliRunner().invoke(
        app,
        [
            "eval",
            "docs",
            "--queries",
            str(q),
            "--qrels",
            str(r),
            "--mode",
            "all",
            "--json",
            "--datasets-dir",
            str(datasets_dir),
        ],
    )

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)  # one object, like every --json output
    assert (report["dataset"], report["judged_queries_not_asked"], report["relevant_documents_missing"]) == (
        "docs",
        0,
        0,
    )
    rows = report["runs"]
    assert [row["mode"] for row in rows] == ["keyword", "semantic", "hybrid"]
    assert all(0.0 <= row["ndcg@10"] <= 1.0 and row["queries"] == 2 and row["ms_per_query"] >= 0 for row in rows)
    assert max(row["recall@100"] for row in rows) > 0
    assert "warning" not in result.stderr  # every judged document is in the dataset


def test_eval_warns_when_judged_documents_are_missing(ingested: tuple[Path, object], tmp_path: Path) -> None:
    datasets_dir, _ = ingested
    (tmp_path / "q.jsonl").write_text('{"_id": "1", "text": "install on linux"}\n')
    (tmp_path / "r.tsv").write_text("1\tguide/install\t1\n1\tdoc-4711\t1\n1\tdoc-4712\t0\n")

    args = ["eval", "docs", "--queries", tmp_path / "q.jsonl", "--qrels", tmp_path / "r.tsv", "--datasets-dir"]
    result = CliRunner().invoke(app, [str(a) for a in [*args, datasets_dir]])

    assert result.exit_code == 0, result.output
    assert "warning: 1 of 2 relevant judged documents are not in docs (e.g. doc-4711)" in result.stderr


def test_eval_of_an_unknown_dataset_is_one_error_line(ingested: tuple[Path, object], tmp_path: Path) -> None:
    datasets_dir, _ = ingested
    (tmp_path / "q.jsonl").write_text("")
    (tmp_path / "r.tsv").write_text("")

    result = CliRunner().invoke(
        app,
        [
            "eval",
            "nope",
            "--queries",
            str(tmp_path / "q.jsonl"),
            "--qrels",
            str(tmp_path / "r.tsv"),
            "--datasets-dir",
            str(datasets_dir),
        ],
    )

    assert result.exit_code == 1
    assert result.stderr.startswith("Error: unknown dataset 'nope'")


def test_eval_warns_about_judged_queries_missing_from_the_queries_file(
    ingested: tuple[Path, object], tmp_path: Path
) -> None:
    datasets_dir, _ = ingested
    (tmp_path / "q.jsonl").write_text('{"_id": "1", "text": "install on linux"}\n')
    (tmp_path / "r.tsv").write_text("1\tguide/install\t1\n2\tguide/install\t1\n3\tguide/install\t1\n")

    args = ["eval", "docs", "--queries", tmp_path / "q.jsonl", "--qrels", tmp_path / "r.tsv", "--json"]
    result = CliRunner().invoke(app, [str(a) for a in [*args, "--datasets-dir", datasets_dir]])

    assert result.exit_code == 0, result.output
    assert "warning: 2 of 3 judged queries are not in q.jsonl (e.g. 2, 3); they are left out." in result.stderr
    assert json.loads(result.stdout)["judged_queries_not_asked"] == 2


def test_k_means_top_k_everywhere_and_eval_has_depth() -> None:
    result = CliRunner().invoke(app, ["eval", "--help"])
    assert "--depth" in result.stdout and " -k" not in result.stdout
