"""`mcpower search` and `mcpower eval`: query a dataset, or measure its retrieval quality."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Annotated

import typer

from mcpower.cli import preload
from mcpower.cli.common import (
    DatasetsDir,
    JsonFlag,
    MilvusUri,
    no_datasets,
    one_of,
    open_registry,
    print_json,
    settings,
    setup_logging,
)
from mcpower.cli.progress import plural
from mcpower.defaults import DEFAULT_PER_DOCUMENT, MAX_OFFSET, MAX_PER_DOCUMENT, MAX_TOP_K, SPREAD_HEAD


def search(
    dataset: Annotated[str, typer.Argument(help="Dataset id (see `mcpower datasets`); with --all, the query.")],
    query: Annotated[
        str | None, typer.Argument(help="What to look for, in plain words (1-1024 characters).", show_default=False)
    ] = None,
    every: Annotated[bool, typer.Option("--all", help="Search every dataset: `mcpower search --all QUERY`.")] = False,
    top_k: Annotated[
        int | None,
        typer.Option(
            "-k",
            "--top-k",
            min=1,
            max=MAX_TOP_K,
            metavar="N",
            help=f"Number of results, 1-{MAX_TOP_K} [default: the dataset's].",
            show_default=False,
        ),
    ] = None,
    mode: Annotated[
        str,
        typer.Option(
            metavar="[hybrid|semantic|keyword]",
            callback=one_of("hybrid", "semantic", "keyword"),
            help="How to rank: both sides fused (hybrid), meaning only, or words only.",
        ),
    ] = "hybrid",
    path: Annotated[str | None, typer.Option("--path", help="Only this document (exact relative path).")] = None,
    folder: Annotated[str | None, typer.Option("--folder", help="Only documents under this folder.")] = None,
    file_type: Annotated[str | None, typer.Option("--type", help="Only this file type, e.g. .md")] = None,
    min_score: Annotated[
        float, typer.Option(min=0.0, max=1.0, metavar="SCORE", help="Drop results scoring below this (0-1).")
    ] = 0.0,
    offset: Annotated[
        int | None,
        typer.Option(
            min=0, max=MAX_OFFSET, metavar="N", help="Skip this many results (the next page).", show_default=False
        ),
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            min=1,
            metavar="N",
            help="Approximate token budget for the JSON answer (see docs/search.md).",
            show_default=False,
        ),
    ] = None,
    priors: Annotated[
        bool,
        typer.Option(
            "--priors/--no-priors",
            help="Rank changelogs and release notes below the pages that document a feature, unless the "
            "query is about versions or changes (see docs/search.md).",
        ),
    ] = True,
    group: Annotated[
        str,
        typer.Option(
            "--group",
            metavar="[passages|none]",
            callback=one_of("passages", "none"),
            help="passages: overlapping or adjacent chunks of a document are one result; none: raw chunks.",
        ),
    ] = "passages",
    per_document: Annotated[
        int | None,
        typer.Option(
            "--per-document",
            min=1,
            max=MAX_PER_DOCUMENT,
            metavar="N",
            help=f"At most N results from one document [default: {DEFAULT_PER_DOCUMENT} among the first {SPREAD_HEAD} "
            "with passages, a long document's other places after them; none: no limit].",
            show_default=False,
        ),
    ] = None,
    datasets_dir: DatasetsDir = None,
    milvus_uri: MilvusUri = None,
    as_json: JsonFlag = False,
) -> None:
    """Search a dataset (or --all of them): hybrid keyword + semantic ranking, filters applied before the top k.

    A result marked "stale" comes from a file that has changed or vanished since it was indexed.
    """
    from mcpower.errors import NO_DATASETS_YET, InvalidQueryError

    if every and query is not None:
        raise InvalidQueryError("with --all, give only the query: `mcpower search --all QUERY`")
    if not every and query is None:
        raise InvalidQueryError("give a dataset and a query (`mcpower search DATASET QUERY`), or `--all QUERY`")
    target: str | None = None if every else dataset
    text = dataset if every else query
    assert text is not None
    setup_logging()  # the first use of a model is announced (its export takes seconds), not waited out in silence
    s = settings(datasets_dir=datasets_dir, milvus_uri=milvus_uri)
    registry = open_registry(s, preload.query_model(s, target) if mode != "keyword" else None)
    from mcpower.results import SearchFilters
    from mcpower.search import search as run_search

    filters = SearchFilters(path=path, folder=folder, file_type=file_type)
    response = run_search(
        registry,
        text,
        dataset=target,
        top_k=top_k,
        mode=mode,
        filters=filters,
        min_score=min_score,
        snippet_chars=2048 if as_json else 360,
        offset=offset,
        max_tokens=max_tokens,
        priors=priors,
        group=group,
        per_document=per_document,
    )
    if as_json:
        typer.echo(response.model_dump_json(indent=2))
        return
    for note in response.meta.notes:
        # Said with the folder looked in, as `datasets` says it: a wrong --datasets-dir is plain to see.
        typer.echo(f"note: {no_datasets(s.datasets_dir) if note == NO_DATASETS_YET else note}", err=True)
    if not response.results:
        where = "any dataset" if target is None else target
        typer.echo(
            f"no results in {where} for that query" + (" with these filters" if filters.active else ""), err=True
        )
        return
    if response.meta.low_confidence:
        typer.secho(
            "(low confidence: nothing matches closely; the answer may not be in this dataset)", err=True, dim=True
        )
    width = 100
    for n, r in enumerate(response.results, 1):
        head = typer.style(f"{n:>2}. {r.score:.3f}  ", fg="green") + typer.style(r.title, bold=True)
        typer.echo(head)
        where = f"{r.path}:{r.lines.start}-{r.lines.end}"
        if target is None:
            where = f"{r.dataset}/{where}"
        if r.pages is not None:
            where += (
                f" (page {r.pages.start})"
                if r.pages.start == r.pages.end
                else f" (pages {r.pages.start}-{r.pages.end})"
            )
        if r.heading_path and r.heading_path != r.title:
            where += f"  § {r.heading_path}"
        typer.secho(f"    {where}", fg="cyan", nl=not r.stale)
        if r.stale:
            typer.secho(
                f"  (stale: {_STALE.get(r.stale_reason or '', _STALE['changed'])} {r.indexed_at[:16]})", fg="yellow"
            )
        if r.url:
            typer.secho(f"    {r.url}", fg="blue")
        body = " ".join(r.snippet.split())
        for line in textwrap.wrap(body, width - 4)[:4]:
            typer.echo(f"    {line}")
        typer.secho(f"    id {r.result_id}", dim=True)
    count = response.meta.count
    more = f"; more with --offset {response.meta.next_offset}" if response.meta.next_offset is not None else ""
    typer.secho(
        f"{plural(count, 'result')} in {response.meta.duration_ms:.0f} ms ({response.meta.mode}){more}",
        err=True,
        dim=True,
    )


def eval_(
    dataset: Annotated[str, typer.Argument(help="Dataset id to evaluate.")],
    queries: Annotated[Path, typer.Option(help="Queries, JSON lines with _id (or id) and text (BEIR).")],
    qrels: Annotated[Path, typer.Option(help="Judgments, TSV: query-id, corpus-id, score (header optional).")],
    mode: Annotated[
        str,
        typer.Option(
            metavar="[hybrid|semantic|keyword|all]",
            callback=one_of("hybrid", "semantic", "keyword", "all"),
            help="How to rank, or all: compare the three.",
        ),
    ] = "hybrid",
    depth: Annotated[int, typer.Option("--depth", min=10, max=1000, help="Chunks retrieved per query.")] = 300,
    priors: Annotated[
        bool, typer.Option("--priors/--no-priors", help="Rank as search does, with its document priors, or without.")
    ] = True,
    datasets_dir: DatasetsDir = None,
    milvus_uri: MilvusUri = None,
    as_json: JsonFlag = False,
) -> None:
    """Measure retrieval quality on judged queries: nDCG@10, Recall@10, Recall@100, MRR@10."""
    from mcpower.evaluation import (
        METRICS,
        EvalReport,
        SearchFn,
        evaluate,
        load_qrels,
        load_queries,
        missing_documents,
    )
    from mcpower.search import rank_paths

    setup_logging()  # the first use of a model is announced (its export takes seconds), not waited out in silence
    s = settings(datasets_dir=datasets_dir, milvus_uri=milvus_uri)
    registry = open_registry(s)
    store = registry.store(dataset)  # fail early on an unknown or broken dataset
    q, judged = load_queries(queries), load_qrels(qrels)
    missing, relevant = missing_documents(judged, [d.path for d in store.documents()])
    if missing:
        typer.echo(
            f"warning: {len(missing)} of {relevant} relevant judged documents are not in {dataset} "
            f"(e.g. {', '.join(missing[:3])}); they count as misses, so the figures understate search. "
            "Check that the dataset holds the judged collection and that file names match the qrels ids.",
            err=True,
        )
    unasked = sorted(qid for qid in judged if qid not in q)
    if unasked:
        typer.echo(
            f"warning: {len(unasked)} of {len(judged)} judged queries are not in {queries.name} "
            f"(e.g. {', '.join(unasked[:3])}); they are left out. Check that the two files belong together.",
            err=True,
        )
    modes = ["keyword", "semantic", "hybrid"] if mode == "all" else [mode]

    def searcher(m: str) -> SearchFn:
        return lambda text, k: rank_paths(registry, text, dataset, k, m, priors)

    reports = [evaluate(searcher(m), q, judged, depth, dataset, m) for m in modes]

    def ms(r: EvalReport) -> float:
        return r.seconds * 1000 / max(r.queries, 1)

    if as_json:  # one object, like every other --json output
        runs = [{"mode": r.mode, "queries": r.queries, **r.metrics, "ms_per_query": round(ms(r), 2)} for r in reports]
        print_json(
            {
                "dataset": dataset,
                "depth": depth,
                "judged_queries": len(judged),
                "judged_queries_not_asked": len(unasked),
                "relevant_documents_missing": len(missing),
                "runs": runs,
            }
        )
        return
    typer.echo(f"{'mode':<10}" + "".join(f"{m:>12}" for m in METRICS) + f"{'queries':>9}{'ms/query':>10}")
    for r in reports:
        typer.echo(
            f"{r.mode:<10}" + "".join(f"{r.metrics[m]:>12.4f}" for m in METRICS) + f"{r.queries:>9}{ms(r):>10.1f}"
        )


# How a stale result's reason reads, after "stale: " and before the time it was indexed.
_STALE = {
    "changed": "the file changed since it was indexed",
    "deleted": "the file was deleted since it was indexed",
    "folder gone": "the source folder was moved or deleted since it was indexed (re-ingest it from its new place)",
}
