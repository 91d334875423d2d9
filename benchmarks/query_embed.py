"""One short query through the model: ONNX Runtime session settings and fp32 against int8, measured.

    .venv/bin/python benchmarks/query_embed.py [--queries N] [--rounds R] [--only NAME ...] [--out FILE]
    .venv/bin/python benchmarks/query_embed.py --separate RUNS --only "fp32 plain" "fused, as shipped"

Every variant is an ONNX Runtime session on one of the cached graphs of the packaged model (or of
``--model``): the plain fp32 export as traced, the fused one mcpower loads (fusion.py), or int8;
fed exactly as `OnnxEmbedder.embed_query` feeds it (the tokenizer, mean pooling and normalisation
included). The variants take turns query by query (round robin, the order rotating),
so load drift on a shared machine hits each alike; the figures are medians and p95 over all rounds,
and ratios to the variant `fp32 plain` (mcpower's settings before this benchmark, on the graph it
loaded before fusion) measured in the same run. Queries are SciFact claims (10-40 word pieces, like an agent's questions).

Variants taking turns in one process flatter whichever suffers less from the others' use of the
CPU caches (and a spinning one slows the next): ``--separate RUNS`` runs each variant alone in its
own process instead, the variants alternating run by run (the order rotating), and prints the
medians over the runs of each process's p50 and p95. Quote that one for a change that ships.

Settings tried: intra-op threads (1, 2), spinning of idle threads, the CPU memory arena, graph
optimisation level, pre-packed weights; the fused graph and the int8 export with mcpower's settings. The
int8 vectors' cosine with fp32's is printed beside (quality is measured by quality.py / int8 runs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from suite.questions import question_texts
from suite.report import load_avg, table

DEFAULT_CORPORA = Path(os.environ.get("MCPOWER_BENCH_CORPORA", "/work/shared/bench"))


def variants(ort: Any) -> dict[str, tuple[str, dict[str, Any]]]:
    """name -> (graph: plain, fused or int8; settings)."""
    base = {"threads": 2, "spin": False, "arena": True, "opt": "all", "prepack": True}
    return {
        "fp32 plain (2 threads, no spin)": ("plain", base),
        "fp32 fused, as shipped": ("fused", base),
        "fp32 fused, 1 thread": ("fused", {**base, "threads": 1}),
        "fp32, 1 thread": ("plain", {**base, "threads": 1}),
        "fp32, 2 threads, spinning": ("plain", {**base, "spin": True}),
        "fp32, 1 thread, no arena": ("plain", {**base, "threads": 1, "arena": False}),
        "fp32, 1 thread, extended opt": ("plain", {**base, "threads": 1, "opt": "extended"}),
        "fp32, 1 thread, no prepack": ("plain", {**base, "threads": 1, "prepack": False}),
        "int8, 2 threads": ("int8", base),
        "int8, 1 thread": ("int8", {**base, "threads": 1}),
        "int8, 1 thread, no arena": ("int8", {**base, "threads": 1, "arena": False}),
    }


def session(ort: Any, path: Path, s: dict[str, Any]) -> Any:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = s["threads"]
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if s["spin"] else "0")
    opts.enable_cpu_mem_arena = s["arena"]
    opts.graph_optimization_level = {
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    }[s["opt"]]
    if not s["prepack"]:
        opts.add_session_config_entry("session.disable_prepacking", "1")
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def wanted(args: argparse.Namespace, name: str) -> bool:
    return not args.only or any(o in name for o in args.only)


def separate(args: argparse.Namespace) -> int:
    """Each chosen variant alone in a child process of this script, ``args.separate`` times, the
    variants alternating (order rotating run by run); medians of the children's p50 and p95."""
    import subprocess
    import tempfile

    names = [n for n in variants(None) if wanted(args, n)]
    runs: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    load_before = load_avg()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.separate):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                out = Path(tmp) / "one.json"
                argv = [sys.executable, __file__, "--exact", name, "--out", str(out), "--model", args.model]
                argv += ["--queries", str(args.queries), "--rounds", str(args.rounds), "--corpora", str(args.corpora)]
                subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
                runs[name].append(json.loads(out.read_text())["variants"][name])
    base = names[0]
    med = {n: {k: statistics.median(r[k] for r in rs) for k in ("p50_ms", "p95_ms")} for n, rs in runs.items()}
    result = {
        "separate_runs": args.separate,
        "queries": args.queries,
        "rounds": args.rounds,
        "load_average": {"before": load_before, "after": load_avg()},
        "variants": {
            n: {
                **{k: round(v, 3) for k, v in med[n].items()},
                "p50_ratio": round(med[n]["p50_ms"] / med[base]["p50_ms"], 3),
                "p95_ratio": round(med[n]["p95_ms"] / med[base]["p95_ms"], 3),
                "runs": runs[n],
            }
            for n in names
        },
    }
    table(
        f"one query alone per process, {args.queries} SciFact claims x {args.rounds} rounds, medians of "
        f"{args.separate} processes each (ms; ratio to '{base}')",
        ["variant", "p50", "p95", "p50 x", "p95 x"],
        [[n, v["p50_ms"], v["p95_ms"], v["p50_ratio"], v["p95_ratio"]] for n, v in result["variants"].items()],
    )
    print(f"load average before {result['load_average']['before']}, after {result['load_average']['after']}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--corpora", type=Path, default=DEFAULT_CORPORA)
    ap.add_argument("--only", nargs="*", help="variant names to run (substring match)")
    ap.add_argument("--model", default="all-MiniLM-L6-v2", help="the model (default: the packaged one)")
    ap.add_argument("--separate", type=int, metavar="RUNS", help="each variant alone in a process, RUNS times")
    ap.add_argument("--exact", help=argparse.SUPPRESS)  # one variant, by its whole name (--separate's children)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.separate:
        return separate(args)

    import numpy as np
    import onnxruntime as ort

    from mcpower.checksums import FileHashes
    from mcpower.config import default_cache_dir
    from mcpower.embedding import load_embedder
    from mcpower.embedding.onnx import OnnxEmbedder

    queries = question_texts(args.corpora / "scifact" / "queries.jsonl", args.queries)
    cache = default_cache_dir()
    fp32 = load_embedder(args.model, backend="onnx", cache_dir=cache)
    assert isinstance(fp32, OnnxEmbedder)
    del FileHashes
    from mcpower.embedding.export import export_onnx
    from mcpower.embedding.model import resolve_model

    spec = resolve_model(args.model, cache_dir=cache)
    chosen = {n: v for n, v in variants(ort).items() if n == args.exact or (not args.exact and wanted(args, n))}
    paths = {  # only the graphs a chosen variant runs (an int8 export takes a minute to make)
        graph: export_onnx(spec, cache, quantized=graph == "int8", fused=graph == "fused")
        # the fused graph first: making it deletes a plain export made before it
        for graph in sorted({g for g, _ in chosen.values()}, key=("fused", "int8", "plain").index)
    }
    embedders: dict[str, Any] = {}
    for name, (graph, settings) in chosen.items():
        emb = load_embedder(args.model, backend="onnx-int8" if graph == "int8" else "onnx", cache_dir=cache)
        emb._session = session(ort, paths[graph], settings)  # type: ignore[attr-defined]
        embedders[name] = emb
    reference = {q: fp32.embed_query(q) for q in queries}
    times: dict[str, list[float]] = {n: [] for n in embedders}
    cosines: dict[str, list[float]] = {n: [] for n in embedders}
    names = list(embedders)
    for q in queries[:10]:  # warm-up
        for e in embedders.values():
            e.embed_query(q)
    load_before = load_avg()
    for r in range(args.rounds):
        for i, q in enumerate(queries):
            shift = (i + r) % len(names)
            for name in names[shift:] + names[:shift]:
                t = time.perf_counter()
                v = embedders[name].embed_query(q)
                times[name].append(time.perf_counter() - t)
                if r == 0:
                    cosines[name].append(float(np.dot(v, reference[q])))
    base = names[0]

    def pct(xs: list[float], p: float) -> float:
        xs = sorted(xs)
        return xs[min(len(xs) - 1, round(p * (len(xs) - 1)))] * 1000

    out = {
        "queries": len(queries),
        "rounds": args.rounds,
        "load_average": {"before": load_before, "after": load_avg()},
        "variants": {
            n: {
                "p50_ms": round(pct(t, 0.5), 3),
                "p95_ms": round(pct(t, 0.95), 3),
                "p50_ratio": round(pct(t, 0.5) / pct(times[base], 0.5), 3),
                "p95_ratio": round(pct(t, 0.95) / pct(times[base], 0.95), 3),
                "cosine_vs_fp32_mean": round(statistics.fmean(cosines[n]), 4),
                "cosine_vs_fp32_min": round(min(cosines[n]), 4),
            }
            for n, t in times.items()
        },
    }
    table(
        f"one query, {len(queries)} SciFact claims x {args.rounds} rounds, interleaved (ms; ratio to '{base}')",
        ["variant", "p50", "p95", "p50 x", "p95 x", "cos vs fp32 mean / min"],
        [
            [
                n,
                v["p50_ms"],
                v["p95_ms"],
                v["p50_ratio"],
                v["p95_ratio"],
                f"{v['cosine_vs_fp32_mean']} / {v['cosine_vs_fp32_min']}",
            ]
            for n, v in out["variants"].items()
        ],
    )
    print(f"load average before {out['load_average']['before']}, after {out['load_average']['after']}")
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
