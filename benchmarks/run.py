"""The benchmark: retrieval quality, ingest throughput, search latency at scale, the MCP server.

    python benchmarks/run.py [--quick] [--only SECTION ...] [--datasets-dir DIR] [--out FILE]
                             [--corpora DIR] [--scale SIZE ...] [--rounds N]

Sections (all by default; docs/benchmarks.md explains every figure):

    quality       nDCG@10 / R@10 / R@100 / MRR@10 of keyword, semantic and hybrid search on SciFact
                  and Cranfield, computed as `mcpower eval` does, next to published baselines
    int8-quality  the same on SciFact ingested with the onnx-int8 backend, against fp32
    ingest        chunks/s of the whole ingest vs the bare embedder, per backend, on 2,000 SciFact chunks;
                  int8 agreement with torch (cosine) and speed ratio
    search        p50/p95 of Registry.search at 10k and 100k chunks (synthetic data from real SciFact words
                  and vectors; `--scale 1m` for a million); HNSW recall@10 against exact search
    mcp           the MCP tools/call round trip over stdio, spawn -> initialize and -> first result against a
                  bare MCPServer, server memory, and a cold `mcpower search` in a fresh process
    cold          a cold `mcpower search` against the floor (a process that imports numpy, faiss, tokenizers,
                  onnxruntime and opens the model's ONNX session), alternating, on FastAPI and at 100k chunks

Datasets are ingested (or generated) once into ``--datasets-dir`` and reused while their manifest
matches. Each section runs in a fresh interpreter, so one section's imports, threads and memory do
not colour the next one's figures. Results are merged into ``--out`` (JSON), section by section,
and a summary compares them with the targets. ``--quick`` shrinks every section to a minute or two
(fewer queries, chunks and calls; its figures are for checking the harness, not for quoting).
The sections live in ``benchmarks/suite/``, one module each.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from suite import cold, ingest, quality, search, server
from suite.report import REPO, environment, git_commit, load_avg, size_label, table

SECTIONS = ("quality", "int8-quality", "ingest", "search", "mcp", "cold")
RUNNERS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "quality": quality.run,
    "int8-quality": quality.run_int8,
    "ingest": ingest.run,
    "search": search.run,
    "mcp": server.run,
    "cold": cold.run,
}
DEFAULT_CORPORA = Path(os.environ.get("MCPOWER_BENCH_CORPORA", "/work/shared/bench"))
DEFAULT_DATASETS = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mcpower" / "bench"
TARGETS = {
    "scifact_hybrid": "SciFact hybrid nDCG@10 >= 0.70",
    "scifact_hybrid_best": "SciFact hybrid >= best single mode (nDCG@10)",
    "cranfield_hybrid_best": "Cranfield hybrid >= best single mode (nDCG@10)",
    "int8_ndcg_loss": "int8 SciFact nDCG@10 loss vs fp32 <= 0.01",
    "int8_speed": "int8 ingest >= 1.7x torch chunks/s",
    "int8_cosine": "int8 cosine vs torch, mean >= 0.99",
    "ingest_overhead": "ingest pipeline overhead < 10% (every backend)",
    "search_p95_100k": "core hybrid search p95 <= 7 ms at 100k",
    "search_floor_100k": "core hybrid search p95 <= 1.3x its floor (query embedding + vector + keyword) at 100k",
    "search_p95_1m": "core hybrid search p95 <= 20 ms at 1M",
    "search_rss_1m": "search process RSS <= 2 GB at 1M",
    "hnsw_recall": "HNSW recall@10 vs exact >= 0.98",
    "mcp_p95": "MCP tools/call p95 <= 25 ms",
    "mcp_startup": "spawn -> initialize <= bare + 0.10 s (median of paired differences)",
    "cold_search": "cold `mcpower search` <= 1.0 s",
    "cold_no_torch": "cold search imports no torch",
    "cold_floor_fastapi": "cold `mcpower search` <= 1.2x floor (FastAPI docs, median of paired ratios)",
    "cold_floor_100k": "cold `mcpower search` <= 2x floor (100k chunks, median of paired ratios)",
}


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([km]?)", text.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use e.g. 10k, 100k, 1m)")
    return int(float(m.group(1)) * {"": 1, "k": 1_000, "m": 1_000_000}[m.group(2)])


def summarise(sections: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per target: the measured value, PASS / MISS, or n/a when its section has not run."""
    rows: dict[str, tuple[Any, bool | None]] = {}
    q = sections.get("quality", {}).get("collections", {})
    if "scifact" in q:
        m = q["scifact"]["modes"]
        rows["scifact_hybrid"] = (m["hybrid"]["ndcg@10"], m["hybrid"]["ndcg@10"] >= 0.70)
    for name in ("scifact", "cranfield"):
        if name in q:
            m = q[name]["modes"]
            best = max(m["keyword"]["ndcg@10"], m["semantic"]["ndcg@10"])
            rows[f"{name}_hybrid_best"] = (
                f"{m['hybrid']['ndcg@10']:.4f} vs {best:.4f}",
                m["hybrid"]["ndcg@10"] >= best,
            )
    i8 = sections.get("int8-quality")
    if i8:
        loss = max(i8["ndcg_loss"]["hybrid"], i8["ndcg_loss"]["semantic"])
        rows["int8_ndcg_loss"] = (f"{loss:.4f} (worst of hybrid, semantic)", loss <= 0.01)
    ing = sections.get("ingest", {}).get("backends")
    if ing:
        rows["int8_speed"] = (f"{ing['onnx-int8']['speed_vs_torch']:.2f}x", ing["onnx-int8"]["speed_vs_torch"] >= 1.7)
        rows["int8_cosine"] = (
            ing["onnx-int8"]["cosine_vs_torch_mean"],
            ing["onnx-int8"]["cosine_vs_torch_mean"] >= 0.99,
        )
        worst = max(ing, key=lambda b: ing[b]["overhead_pct"])
        rows["ingest_overhead"] = (f"{ing[worst]['overhead_pct']:.1f}% ({worst})", ing[worst]["overhead_pct"] < 10)
    sizes = sections.get("search", {}).get("sizes", {})
    if "100000" in sizes:
        p95 = sizes["100000"]["modes"]["hybrid"]["p95_ms"]
        rows["search_p95_100k"] = (f"{p95:.1f} ms", p95 <= 7)
        ratio = sizes["100000"].get("hybrid_vs_floor", {}).get("p95")
        if ratio:
            rows["search_floor_100k"] = (f"{ratio:.2f}x", ratio <= 1.3)
    if "1000000" in sizes:
        p95 = sizes["1000000"]["modes"]["hybrid"]["p95_ms"]
        rows["search_p95_1m"] = (f"{p95:.1f} ms", p95 <= 20)
        rss = sizes["1000000"].get("rss_mb", {}).get("VmHWM")
        if rss:
            rows["search_rss_1m"] = (f"{rss:.0f} MB peak", rss <= 2048)
    recalls = {s: e["hnsw"]["recall@10"] for s, e in sizes.items() if "hnsw" in e}
    if recalls:
        worst = min(recalls.values())
        text = ", ".join(f"{size_label(int(s))} {r:.4f}" for s, r in recalls.items())
        rows["hnsw_recall"] = (text, worst >= 0.98)
    mcp = sections.get("mcp")
    if mcp:
        rows["mcp_p95"] = (f"{mcp['tool_call']['p95_ms']:.1f} ms", mcp["tool_call"]["p95_ms"] <= 25)
        d = mcp["startup_delta_s"]["initialize"]
        ratio = mcp.get("startup_ratio", {}).get("initialize")  # absent from results of before the pairs
        rows["mcp_startup"] = (f"{d:+.3f} s" + (f" ({ratio:.2f}x)" if ratio else ""), d <= 0.10)
        rows["cold_search"] = (f"{mcp['cold_search']['median_s']:.2f} s", mcp["cold_search"]["median_s"] <= 1.0)
        torch = mcp["cold_search"]["torch_imported"]
        rows["cold_no_torch"] = ("torch imported" if torch else "not imported", not torch)
    c = sections.get("cold")
    if c:
        # Results of before the pairs hold the ratio of medians only.
        for name, ratio in c.get("paired_ratio_to_floor", c["ratio_to_floor"]).items():
            key, limit = ("cold_floor_fastapi", 1.2) if name == "fastapi" else ("cold_floor_100k", 2.0)
            rows[key] = (
                f"{ratio:.2f}x ({c['median_s'][name]:.2f} s vs {c['median_s']['floor']:.2f} s)",
                ratio <= limit,
            )
    out = []
    for key, what in TARGETS.items():
        value, ok = rows.get(key, (None, None))
        out.append(
            {"target": key, "what": what, "value": value, "status": "n/a" if ok is None else ("PASS" if ok else "MISS")}
        )
    return out


def run_section(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run one section here (the child process); its result with when and how it was measured."""
    started = time.perf_counter()
    load_before = load_avg()
    result = RUNNERS[name](args)
    result["meta"] = {
        "measured_at": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        "seconds": round(time.perf_counter() - started, 1),
        "quick": args.quick,
        "load_average_before": load_before,
        "load_average_after": load_avg(),
        "commit": git_commit(),
    }
    return result


def child_argv(name: str, args: argparse.Namespace, out: Path) -> list[str]:
    argv = [sys.executable, str(Path(__file__).resolve()), "--section", name, "--section-out", str(out)]
    argv += ["--datasets-dir", str(args.datasets_dir), "--corpora", str(args.corpora), "--rounds", str(args.rounds)]
    if args.quick:
        argv.append("--quick")
    if args.scale:
        argv += ["--scale", *map(str, args.scale)]
    return argv


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--quick", action="store_true", help="small sizes: check the harness in a minute or two per section"
    )
    ap.add_argument(
        "--only", nargs="+", choices=SECTIONS, metavar="SECTION", help=f"run only these: {', '.join(SECTIONS)}"
    )
    ap.add_argument(
        "--datasets-dir", type=Path, default=DEFAULT_DATASETS, help=f"bench datasets (default {DEFAULT_DATASETS})"
    )
    ap.add_argument(
        "--corpora",
        type=Path,
        default=DEFAULT_CORPORA,
        help=f"scifact/, cranfield/, docs-fastapi/ (default {DEFAULT_CORPORA})",
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="JSON results (default benchmarks/results/latest.json, quick.json with --quick)",
    )
    ap.add_argument("--fresh", action="store_true", help="start the JSON afresh instead of merging into it")
    ap.add_argument(
        "--scale",
        nargs="+",
        type=parse_size,
        metavar="SIZE",
        help="search section sizes (default 10k 100k; 1m is opt-in)",
    )
    ap.add_argument(
        "--rounds", type=int, default=None, help="ingest section: rounds per backend, best kept (default 2, quick 1)"
    )
    ap.add_argument("--section", choices=SECTIONS, help=argparse.SUPPRESS)  # internal: run one section here
    ap.add_argument("--section-out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.datasets_dir = args.datasets_dir.expanduser().resolve()
    args.rounds = args.rounds or (1 if args.quick else 2)
    args.datasets_dir.mkdir(parents=True, exist_ok=True)

    if args.section:  # the child: one section, its result to a file
        result = run_section(args.section, args)
        args.section_out.write_text(json.dumps(result, indent=1, default=str))
        return 0

    out_path = args.out or REPO / "benchmarks" / "results" / ("quick.json" if args.quick else "latest.json")
    data: dict[str, Any] = {}
    if out_path.exists() and not args.fresh:
        data = json.loads(out_path.read_text())
    data["environment"] = environment()
    sections = data.setdefault("sections", {})
    failed = []
    for name in args.only or SECTIONS:
        print(f"\n=== {name} ===", flush=True)
        with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
            rc = subprocess.run(child_argv(name, args, Path(tmp.name)), cwd=REPO).returncode
            if rc != 0:
                failed.append(name)
                print(f"section {name} failed (exit {rc})", file=sys.stderr)
                continue
            result = json.loads(Path(tmp.name).read_text())
        if name == "search" and "search" in sections:  # keep sizes measured earlier but not now
            result["sizes"] = {**sections["search"].get("sizes", {}), **result["sizes"]}
        sections[name] = result
    data["summary"] = summarise(sections)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(data, indent=1, default=str) + "\n")

    table(
        "summary (targets)",
        ["target", "value", "status", "measured"],
        [
            [
                s["what"],
                s["value"],
                s["status"],
                sections.get(_section_of(s["target"]), {}).get("meta", {}).get("measured_at", "-"),
            ]
            for s in data["summary"]
        ],
    )
    print(f"\nresults: {out_path}" + (f"; FAILED sections: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def _section_of(target: str) -> str:
    if target.startswith("int8_ndcg"):
        return "int8-quality"
    if target.startswith(("int8", "ingest")):
        return "ingest"
    if target.startswith(("search", "hnsw")):
        return "search"
    if target.startswith("cold_floor"):
        return "cold"
    if target.startswith(("mcp", "cold")):
        return "mcp"
    return "quality"


if __name__ == "__main__":
    sys.exit(main())
