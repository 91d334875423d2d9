"""The original system's two real seed datasets with the real packaged model: listed as ready,
searched from the CLI and over MCP, imported with `mcpower import`; semantic search returns the
original system's own results (FAISS inner product over the seed's vectors, computed here), and
hybrid search ranks the judged FastAPI questions better than it (benchmarks/original_seeds.py
prints the figures)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from mcp import Client
from original_fixtures import SEEDS, copy_seed
from typer.testing import CliRunner

from mcpower.cli.app import app
from mcpower.evaluation import evaluate, load_qrels, load_queries
from mcpower.registry import Registry
from mcpower.search import rank_paths, search
from mcpower.server.app import create_server

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "data"
QUESTIONS = load_queries(BENCH / "fastapi_questions.jsonl")
QRELS = load_qrels(BENCH / "fastapi_qrels.tsv")
SAMPLE_QUERIES = [
    "How do I get started?",
    "How to configure a dataset",
    "What tools are available?",
    "Troubleshooting search issues",
]

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not SEEDS.is_dir(), reason=f"no seed datasets at {SEEDS}")]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")  # the ONNX export, made once for the module


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("served")
    for name in ("sample-docs", "fastapi-seed"):
        copy_seed(name, root)
    return root


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory, cache: Path) -> Path:
    root = tmp_path_factory.mktemp("imported")
    for name in ("sample-docs", "fastapi-seed"):
        result = CliRunner().invoke(
            app, ["import", str(SEEDS / name), "--datasets-dir", str(root)], env={"MCPOWER_CACHE_DIR": str(cache)}
        )
        assert result.exit_code == 0, result.output
        assert result.stdout.startswith(f"{name}: imported ") and "vectors kept" in result.stdout
    return root


@pytest.fixture(scope="module")
def registries(served: Path, imported: Path, cache: Path) -> Iterator[dict[str, Registry]]:
    made = {"served": Registry(served, cache_dir=cache), "imported": Registry(imported, cache_dir=cache)}
    yield made
    for registry in made.values():
        registry.close()


def oracle(name: str, qvec: np.ndarray, k: int) -> list[tuple[str, int, float]]:
    """The original system's search (python/bridge.py): FAISS inner product over the seed's own
    index file, rows mapped to records; as (path, position of the record in its document, score)."""
    import faiss

    index = faiss.read_index(str(SEEDS / name / "index" / "docs.index"))
    meta = json.loads((SEEDS / name / "metadata.json").read_text(encoding="utf-8"))
    docs = meta if isinstance(meta, list) else meta["documents"]
    position, seen = [], {}
    for d in docs:
        seen[d["path"]] = seen.get(d["path"], 0) + 1
        position.append(seen[d["path"]])
    scores, rows = index.search(qvec.reshape(1, -1).astype(np.float32), k)
    return [(docs[i]["path"], position[i], float(s)) for s, i in zip(scores[0], rows[0]) if i >= 0]


def cli(root: Path, cache: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, [*args, "--datasets-dir", str(root)], env={"MCPOWER_CACHE_DIR": str(cache)})
    return result.exit_code, result.stdout, result.stderr


def test_both_are_listed_ready_and_validate(served: Path, cache: Path) -> None:
    code, out, _ = cli(served, cache, "datasets", "--json")
    rows = {d["id"]: d for d in json.loads(out)["datasets"]}
    assert code == 0
    assert {i: (d["status"], d["format"], d["documents"], d["chunks"]) for i, d in rows.items()} == {
        "fastapi-seed": ("ready", "original", 155, 441),
        "sample-docs": ("ready", "original", 5, 5),
    }
    code, out, err = cli(served, cache, "validate")
    assert code == 0 and out.splitlines() == [
        "ready  fastapi-seed: 155 documents, 441 chunks",
        "ready  sample-docs: 5 documents, 5 chunks",
    ]
    assert err.count("the format has no checksums") == 2


@pytest.mark.parametrize("which", ["served", "imported"])
def test_searched_from_the_cli(served: Path, imported: Path, cache: Path, which: str) -> None:
    root = served if which == "served" else imported
    code, out, _ = cli(root, cache, "search", "fastapi-seed", "How do I set a cookie in the response?", "--json")
    assert code == 0 and json.loads(out)["results"][0]["path"] == "advanced/response-cookies.md"
    code, out, _ = cli(root, cache, "search", "sample-docs", "Troubleshooting search issues", "--json")
    assert code == 0 and json.loads(out)["results"][0]["path"] == "docs/troubleshooting.md"
    code, out, _ = cli(root, cache, "search", "fastapi-seed", "cors middleware", "-k", "3")
    assert code == 0 and "tutorial/cors.md:" in out


@pytest.mark.anyio
@pytest.mark.parametrize("which", ["served", "imported"])
async def test_searched_over_mcp(registries: dict[str, Registry], which: str) -> None:
    async with Client(create_server(registries[which])) as client:
        listed = (await client.call_tool("knowledge_list_datasets", {})).structured_content
        assert listed is not None
        formats = {d["id"]: (d["status"], d["format"]) for d in listed["datasets"]}
        fmt = "original" if which == "served" else "mcpower"
        assert formats == {"fastapi-seed": ("ready", fmt), "sample-docs": ("ready", fmt)}
        r = await client.call_tool(
            "knowledge_search", {"query": "How do I upload a file to my API?", "dataset": "fastapi-seed"}
        )
        assert not r.is_error and r.structured_content is not None
        top = r.structured_content["results"][0]
        assert top["path"] == "tutorial/request-files.md" and top["title"].startswith("Request Files")
        source = (await client.call_tool("knowledge_get_source", {"result_id": top["result_id"]})).structured_content
        assert source is not None and "UploadFile" in source["content"]
        r = await client.call_tool("knowledge_search", {"query": "What tools are available?"})
        assert not r.is_error and r.structured_content is not None
        assert {x["dataset"] for x in r.structured_content["results"]} <= {"fastapi-seed", "sample-docs"}


@pytest.mark.parametrize("which", ["served", "imported"])
def test_semantic_search_is_the_original_systems_search(registries: dict[str, Registry], which: str) -> None:
    registry = registries[which]
    embedder = registry.embedder_for(registry.store("fastapi-seed").info)
    asked = [("fastapi-seed", q) for q in QUESTIONS.values()] + [("sample-docs", q) for q in SAMPLE_QUERIES]
    for dataset, query in asked:
        got = search(registry, query, dataset, top_k=10, mode="semantic").results
        want = oracle(dataset, embedder.embed_query(query), 10)
        assert [(r.path, r.lines.start) for r in got] == [(p, n) for p, n, _ in want], query
        assert [r.score for r in got] == pytest.approx([min(max(s, 0.0), 1.0) for _, _, s in want], abs=1e-4)


def test_served_and_imported_answer_alike(registries: dict[str, Registry]) -> None:
    for mode in ("hybrid", "semantic", "keyword"):
        for query in list(QUESTIONS.values())[:10]:
            a, b = (
                [
                    (r.result_id, r.score)
                    for r in search(registries[w], query, "fastapi-seed", top_k=10, mode=mode).results
                ]
                for w in ("served", "imported")
            )
            assert a == b, (mode, query)


@pytest.mark.parametrize("which", ["served", "imported"])
def test_hybrid_ranks_the_judged_questions_better_than_semantic(registries: dict[str, Registry], which: str) -> None:
    registry = registries[which]
    metrics = {
        mode: evaluate(
            lambda text, k, m=mode: rank_paths(registry, text, "fastapi-seed", k, m), QUESTIONS, QRELS, 100
        ).metrics
        for mode in ("semantic", "hybrid")
    }
    assert metrics["hybrid"]["ndcg@10"] > metrics["semantic"]["ndcg@10"], metrics
    assert metrics["hybrid"]["mrr@10"] > metrics["semantic"]["mrr@10"], metrics
    assert metrics["hybrid"]["recall@10"] >= metrics["semantic"]["recall@10"], metrics
