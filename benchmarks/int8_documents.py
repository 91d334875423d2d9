"""Documents embedded by the int8 model, queries in fp32: does retrieval hold, and how much faster is ingest?

    nice -n 10 python benchmarks/int8_documents.py [--sets NAME ...] [--datasets-dir DIR] [--out FILE]
        [--reuse-fp32 NAME=DATASET_FOLDER ...]

Issue 30 item 4: should a plain `mcpower ingest` embed documents with the int8 (dynamically
quantised) export? For each judged set (as agent_results.py reads them: flask, jinja, click, fastapi
with their judged questions; scifact and cranfield as run.py ingests them), the corpus is ingested
twice with the default model, once with the `onnx` (fp32) backend and once with `onnx-int8`, one
after the other in this run (an ingest already in the cache with the same model, backend, chunking
and corpus is reused, and its recorded time is then not from this run: the table says so). Both
datasets are evaluated as `mcpower eval` computes it (each document once, at its best chunk, depth
300) with query vectors from the fp32 model — what search does for every dataset. Printed per set:
hybrid and semantic nDCG@10 of both, the differences, and ingest chunks/s of both with their ratio
(wall time, and per CPU second of the ingesting process: on a shared machine the CPU ratio is the
one to trust).

The two datasets of a set are compared only if they hold the same chunks (path, position, heading
and text of every chunk: "same chunks" in the table; a reused fp32 ingest made by older chunking
code would not), and the cosine of each chunk's int8 vector to its fp32 vector is reported (mean /
min). ``--reuse-fp32 NAME=FOLDER`` takes an fp32 ingest made elsewhere (e.g. the FastAPI dataset of
run.py's mcp section) as that set's fp32 dataset: the folder is copied into --datasets-dir (the
original is only read) and used if it is of the default model, fp32, the current chunking and the
same corpus, as any cached ingest is.

The bar for int8 documents as the default: hybrid nDCG@10 within 0.005 of fp32 on every set.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from agent_results import CACHE, DEFAULT_CORPORA, DOC_SETS, SETS, evaluate_pages, package_tree
from suite.datasets import collection_dataset, ensure_dataset
from suite.report import environment, load_avg, note, table

BACKENDS = ("onnx", "onnx-int8")


def datasets(name: str, args: argparse.Namespace) -> tuple[dict[str, dict[str, Any]], dict[str, str], Any]:
    from agent_results import load_set

    out: dict[str, dict[str, Any]] = {}
    if name in ("scifact", "cranfield"):
        for backend in BACKENDS:
            out[backend], queries, qrels = collection_dataset(args.corpora, name, args.datasets_dir, False, backend)
        return out, queries, qrels
    queries, qrels, _ = load_set(name)
    corpus = args.corpora / "docs-fastapi" / "corpus" if name == "fastapi" else args.doc_roots[name]
    if not corpus.is_dir():
        raise SystemExit(f"{name}: no folder {corpus} (install the Debian package)")
    for backend in BACKENDS:
        ds_id = f"{name}-docs" if backend == "onnx" else f"{name}-docs-int8"
        if backend == "onnx" and name in args.reuse_fp32:
            ds_id = copied(args.reuse_fp32[name], args.datasets_dir)
        out[backend] = ensure_dataset(corpus, args.datasets_dir, ds_id, backend)
    return out, queries, qrels


def copied(folder: Path, root: Path) -> str:
    """The id of dataset ``folder`` copied into ``root`` (once: an existing copy is kept)."""
    from mcpower.manifest import MANIFEST_NAME, read_manifest

    ds_id = read_manifest(folder / MANIFEST_NAME).id
    if not (root / ds_id).exists():
        note(f"copying the fp32 dataset {folder} into {root / ds_id}")
        shutil.copytree(folder, root / ds_id, symlinks=True)
    return ds_id


def compare_chunks(registry: Any, fp32_id: str, int8_id: str) -> dict[str, Any]:
    """Whether two datasets hold the same chunks (path, ordinal, heading path, text), and the cosine
    of each chunk's int8 vector to its fp32 one (mean / min over all chunks)."""
    import numpy as np

    def chunks(ds_id: str) -> dict[tuple[str, int], tuple[int, str]]:
        out = {}
        for doc, rows in registry.store(ds_id).iter_documents():
            for c in rows:
                digest = hashlib.sha256(f"{c.heading_path}\0{c.text}".encode()).hexdigest()
                out[(doc.path, c.ordinal)] = (c.id, digest)
        return out

    a, b = chunks(fp32_id), chunks(int8_id)
    same = a.keys() == b.keys() and all(a[k][1] == b[k][1] for k in a)
    out: dict[str, Any] = {"same_chunks": same, "chunks_fp32": len(a), "chunks_int8": len(b)}
    common = [k for k in a if k in b and a[k][1] == b[k][1]]
    if common:
        va = registry.store(fp32_id).vectors([a[k][0] for k in common])
        vb = registry.store(int8_id).vectors([b[k][0] for k in common])
        cos = np.sum(va * vb, axis=1)
        out["cosine_mean"], out["cosine_min"] = round(float(cos.mean()), 4), round(float(cos.min()), 4)
    return out


def evaluate_set(name: str, args: argparse.Namespace) -> dict[str, Any]:
    from mcpower.embedding import load_embedder
    from mcpower.registry import Registry

    built, queries, qrels = datasets(name, args)
    fp32 = load_embedder(backend="onnx")  # the query model of every dataset (embedding/__init__.py)
    registry = Registry(args.datasets_dir, embedder_factory=lambda model: fp32, query_cache=0)
    out: dict[str, Any] = {"ingest": built, "modes": {}}
    try:
        out["chunks"] = compare_chunks(registry, built["onnx"]["id"], built["onnx-int8"]["id"])
        if not out["chunks"]["same_chunks"]:
            note(f"{name}: the fp32 and int8 datasets hold different chunks: their scores are not comparable")
        for mode in ("hybrid", "semantic"):
            row: dict[str, Any] = {}
            per_query = {}
            for backend, info in built.items():
                report = evaluate_pages(registry, info["id"], queries, qrels, mode)
                row[backend] = round(report.metrics["ndcg@10"], 4)
                per_query[backend] = {q: m["ndcg@10"] for q, m in report.per_query.items()}
            row["delta"] = round(row["onnx-int8"] - row["onnx"], 4)
            # Where the difference comes from: questions whose nDCG@10 moved, and the largest moves.
            moves = {q: per_query["onnx-int8"][q] - v for q, v in per_query["onnx"].items()}
            row["questions"] = len(moves)
            row["better"] = sum(d > 1e-9 for d in moves.values())
            row["worse"] = sum(d < -1e-9 for d in moves.values())
            row["largest_moves"] = {q: round(d, 4) for q, d in sorted(moves.items(), key=lambda x: x[1])[:3]}
            out["modes"][mode] = row
            note(
                f"{name} {mode}: fp32 docs {row['onnx']:.4f}, int8 docs {row['onnx-int8']:.4f} ({row['delta']:+.4f}; "
                f"{row['worse']} of {row['questions']} questions worse, {row['better']} better)"
            )
    finally:
        registry.close()
    for key, figure in (("speed_ratio", "chunks_per_second"), ("cpu_speed_ratio", "chunks_per_cpu_second")):
        before, after = (built[b].get(figure) for b in BACKENDS)
        out[key] = round(after / before, 2) if before and after else None
    return out


def reuse_arg(text: str) -> tuple[str, Path]:
    name, sep, folder = text.partition("=")
    if not sep or name not in SETS or name in ("scifact", "cranfield"):
        raise argparse.ArgumentTypeError(f"expected NAME=FOLDER with NAME one of fastapi, {', '.join(DOC_SETS)}")
    return name, Path(folder)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", nargs="+", choices=SETS, default=["fastapi", "cranfield", "click", "jinja", "flask"])
    ap.add_argument("--datasets-dir", type=Path, default=CACHE / package_tree())
    ap.add_argument("--corpora", type=Path, default=DEFAULT_CORPORA)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument(
        "--reuse-fp32",
        type=reuse_arg,
        action="append",
        default=[],
        metavar="NAME=FOLDER",
        help="a set's fp32 dataset made elsewhere, copied into --datasets-dir (see above)",
    )
    args = ap.parse_args()
    args.reuse_fp32 = dict(args.reuse_fp32)
    args.doc_roots = dict(DOC_SETS)
    args.datasets_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"environment": environment(), "load_average_before": load_avg(), "sets": {}}
    for name in args.sets:
        results["sets"][name] = evaluate_set(name, args)
        if args.out:  # after each set: a long run keeps what it measured
            args.out.write_text(json.dumps(results, indent=1) + "\n")
    results["load_average_after"] = load_avg()

    def speed(r: dict[str, Any], backend: str) -> str:
        info = r["ingest"][backend]
        return "reused" if info.get("reused") else str(info.get("chunks_per_second"))

    table(
        "int8 documents, fp32 queries: nDCG@10 (eval depth 300) and ingest chunks/s",
        [
            "set",
            "chunks",
            "hybrid fp32",
            "hybrid int8 d",
            "delta",
            "sem fp32",
            "sem int8 d",
            "delta",
            "same chunks",
            "doc cos mean/min",
            "c/s fp32",
            "c/s int8",
            "x",
            "x CPU",
        ],
        [
            [
                name,
                r["ingest"]["onnx"].get("chunks"),
                r["modes"]["hybrid"]["onnx"],
                r["modes"]["hybrid"]["onnx-int8"],
                f"{r['modes']['hybrid']['delta']:+.4f}",
                r["modes"]["semantic"]["onnx"],
                r["modes"]["semantic"]["onnx-int8"],
                f"{r['modes']['semantic']['delta']:+.4f}",
                "yes" if r["chunks"]["same_chunks"] else "NO",
                f"{r['chunks'].get('cosine_mean', '-')} / {r['chunks'].get('cosine_min', '-')}",
                speed(r, "onnx"),
                speed(r, "onnx-int8"),
                r["speed_ratio"] or "-",
                r["cpu_speed_ratio"] or "-",
            ]
            for name, r in results["sets"].items()
        ],
    )
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
