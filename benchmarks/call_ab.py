"""The warm MCP tool call of two source trees, A/B in one run (issue 30: p95 ≤ 8 ms at 3.4k chunks).

    python benchmarks/call_ab.py DATASETS_DIR --tree main=/work/main --tree new=. [--dataset fastapi]
        [--questions benchmarks/data/fastapi_questions.jsonl] [--rounds 4] [--runs 3]
    python benchmarks/call_ab.py DATASETS_DIR --tree new=. --profile [--rounds 4]
    python benchmarks/call_ab.py DATASETS_DIR --tree main=/work/main --tree new=. --parts

Each ``--tree LABEL=PATH`` is served as ``python -m mcpower serve --stdio --datasets-dir DATASETS_DIR``
with ``PYTHONPATH=PATH`` (this interpreter: the same dependencies for both), over real pipes by a
stdlib client (JSON lines). Per run, both servers start, shake hands and answer every question once
(warm-up: the model, the store, the worker threads); then ``--rounds`` rounds of the questions, the
servers alternating call by call (which goes first alternating round by round), so both see the
same machine. Per call: the wall time of the round trip and the server's own ``meta.duration_ms``
(the search on its worker thread); per server and run: its CPU (all threads, and the event loop's
thread alone, from /proc) over the measured calls, divided by their number. Printed: each run, then
the medians over ``--runs`` of each figure, and B/A ratios.

``--profile`` serves the (first) tree under cProfile, which sees the event loop's thread (the MCP
layer: transport, SDK, middleware, results; the search runs on worker threads), and prints its
functions by time per call. ``--parts`` times named parts of the event loop's work instead
(``time.thread_time`` around each, no profiler), beside the loop thread's whole CPU per call: what
the parts leave is the SDK's dispatch, the middleware chain and asyncio itself.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import signal
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from suite.questions import question_texts  # noqa: E402
from suite.report import load_avg, pct, table  # noqa: E402
from suite.server import StdioClient  # noqa: E402

PROFILE_ENV = "MCPOWER_BENCH_PROFILE"  # where the profiled server writes its stats


def serve_argv(datasets: Path, mode: str | None = None) -> list[str]:
    """The server's command: ``python -m mcpower``, or this script in ``mode`` (_profiled, _parts)."""
    head = [sys.executable, __file__, mode] if mode else [sys.executable, "-m", "mcpower"]
    return [*head, "serve", "--stdio", "--datasets-dir", str(datasets)]


def start(tree: Path, datasets: Path, profile_to: Path | None = None, mode: str = "_profiled") -> StdioClient:
    tree, datasets = tree.resolve(), datasets.resolve()
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if profile_to is not None:
        env[PROFILE_ENV] = str(profile_to)
    # Started in its tree: `python -m` puts the working folder first on sys.path, ahead of PYTHONPATH,
    # so from any other tree's folder both servers would run that tree's code.
    client = StdioClient(serve_argv(datasets, mode if profile_to is not None else None), env=env, cwd=tree)
    client.initialize()
    return client


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """CPU seconds a process (all its threads) or one of its threads has run, from the scheduler's
    nanosecond count (/proc/.../schedstat), not the 10 ms ticks of /proc/.../stat."""
    tasks = [thread] if thread is not None else [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    total = 0
    for tid in tasks:
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
            continue
    return total / 1e9


def call(client: StdioClient, dataset: str, query: str) -> tuple[float, float]:
    """Wall seconds of one knowledge_search round trip, and the server's meta.duration_ms (s)."""
    started = time.perf_counter()
    result = client.call_tool("knowledge_search", {"query": query, "dataset": dataset})
    wall = time.perf_counter() - started
    return wall, result["structuredContent"]["meta"]["duration_ms"] / 1000


def one_run(trees: dict[str, Path], args: argparse.Namespace, questions: list[str]) -> dict[str, dict[str, float]]:
    clients = {label: start(tree, args.datasets_dir) for label, tree in trees.items()}
    try:
        labels = list(clients)
        for q in questions:  # warm-up
            for label in labels:
                call(clients[label], args.dataset, q)
        before = {k: (cpu_seconds(c.proc.pid), cpu_seconds(c.proc.pid, c.proc.pid)) for k, c in clients.items()}
        wall: dict[str, list[float]] = {k: [] for k in labels}
        core: dict[str, list[float]] = {k: [] for k in labels}
        for r in range(args.rounds):
            order = labels if r % 2 == 0 else labels[::-1]
            for q in questions:
                for label in order:
                    w, c = call(clients[label], args.dataset, q)
                    wall[label].append(w)
                    core[label].append(c)
        out = {}
        for label, client in clients.items():
            pid = client.proc.pid
            n = len(wall[label])
            total = (cpu_seconds(pid) - before[label][0]) / n
            loop = (cpu_seconds(pid, pid) - before[label][1]) / n
            out[label] = {
                "wall_p50": 1000 * pct(wall[label], 50),
                "wall_p95": 1000 * pct(wall[label], 95),
                "search_p50": 1000 * pct(core[label], 50),
                "search_p95": 1000 * pct(core[label], 95),
                "cpu_per_call": 1000 * total,
                "loop_cpu_per_call": 1000 * loop,
            }
        return out
    finally:
        for client in clients.values():
            client.close()


KEYS = ("wall_p50", "wall_p95", "search_p50", "search_p95", "cpu_per_call", "loop_cpu_per_call")


def ab(args: argparse.Namespace, trees: dict[str, Path], questions: list[str]) -> None:
    runs = []
    for i in range(args.runs):
        load = load_avg()
        result = one_run(trees, args, questions)
        runs.append(result)
        table(
            f"run {i + 1}: {len(questions)} questions x {args.rounds} rounds, load {load}, ms",
            ["tree", *KEYS],
            [[label, *(round(v[k], 3) for k in KEYS)] for label, v in result.items()],
        )
    medians = {label: {k: statistics.median(r[label][k] for r in runs) for k in KEYS} for label in trees}
    rows = [[label, *(round(v[k], 3) for k in KEYS)] for label, v in medians.items()]
    labels = list(trees)
    if len(labels) == 2:
        a, b = labels
        rows.append([f"{b} / {a}", *(round(medians[b][k] / medians[a][k], 3) for k in KEYS)])
    table(f"medians of {args.runs} runs (load now {load_avg()}), ms", ["tree", *KEYS], rows)


def profile(args: argparse.Namespace, tree: Path, questions: list[str]) -> None:
    stats_file = Path(f"/tmp/call_ab_{os.getpid()}.prof")
    client = start(tree, args.datasets_dir, profile_to=stats_file)
    try:
        for q in questions:
            call(client, args.dataset, q)
        os.kill(client.proc.pid, signal.SIGUSR1)  # the profile starts now, after the warm-up
        client.request("ping")
        n = 0
        for _ in range(args.rounds):
            for q in questions:
                call(client, args.dataset, q)
                n += 1
    finally:
        client.close()
    stats = pstats.Stats(str(stats_file))
    stats_file.unlink()
    for column, title in ((3, "cumulative"), (2, "own")):
        rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][column])[: args.top]  # type: ignore[attr-defined]
        print(
            f"\ncProfile of the event loop's thread, by {title} time: cumulative, own ms and calls per call ({n} calls)"
        )
        for (file, line, name), (_, calls, tottime, cumulative, _) in rows:
            where = f"{Path(file).name}:{line}:{name}"
            print(f"{1000 * cumulative / n:8.3f} {1000 * tottime / n:8.3f} {calls / n:7.2f}  {where}")


# The event loop's parts timed by --parts: (module, owner class or None, attribute, label). Each is
# synchronous and none calls another; a name a tree lacks is left out.
PARTS = [
    ("mcpower.server.stdio", None, "parse_line", "message parsed and validated (ours)"),
    ("mcpower.server.stdio", None, "error_for", "message checked (ours, before the SDK's own parse)"),
    ("mcp_types.methods", None, "validate_client_request", "SDK: request checked against the protocol"),
    ("mcp.server.mcpserver.utilities.func_metadata", "FuncMetadata", "validate_arguments", "SDK: arguments"),
    ("mcpower.server.tools", None, "json_result", "result JSON (json_result)"),
    ("mcpower.server.tools", None, "with_links", "resource links"),
    ("mcp.server.mcpserver.utilities.func_metadata", "FuncMetadata", "convert_result", "SDK: result re-validated"),
    ("mcp.server.runner", "ServerRunner", "_serialize", "SDK: result shaped for the protocol"),
    ("mcpower.server.responses", "Redactor", "tool_result", "path redaction"),
    ("mcpower.server.audit", "AuditLog", "record", "audit line"),
    ("mcp_types", "JSONRPCResponse", "model_dump_json", "answer serialised"),
]


def timed_parts() -> None:
    """Run ``mcpower`` (argv after ``_parts``) with PARTS timed on the event loop's thread once the
    client sends SIGUSR1; the totals are written at exit."""
    import importlib

    target = os.environ[PROFILE_ENV]
    main_thread = threading.get_ident()
    on = [False]
    totals: dict[str, list[float]] = {}

    def wrap(fn: Any, label: str) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not on[0] or threading.get_ident() != main_thread:
                return fn(*args, **kwargs)
            started = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                total = totals.setdefault(label, [0.0, 0])
                total[0] += time.thread_time() - started
                total[1] += 1

        return timed

    for module_name, owner, name, label in PARTS:
        module = importlib.import_module(module_name)
        holder = getattr(module, owner) if owner else module
        if hasattr(holder, name):
            setattr(holder, name, wrap(getattr(holder, name), label))
    real_exit = os._exit

    def exit_after_dump(code: int) -> None:
        Path(target).write_text(json.dumps(totals))
        real_exit(code)

    os._exit = exit_after_dump  # type: ignore[assignment]
    signal.signal(signal.SIGUSR1, lambda signum, frame: on.__setitem__(0, True))
    sys.argv = ["mcpower", *sys.argv[2:]]
    from mcpower.cli import main

    main()


def parts_run(args: argparse.Namespace, trees: dict[str, Path], questions: list[str]) -> dict[str, dict[str, float]]:
    """One run of --parts: the trees' servers side by side, calls alternating as in the A/B."""
    outs = {label: Path(f"/tmp/call_ab_{os.getpid()}_{label}.json") for label in trees}
    clients = {
        label: start(tree, args.datasets_dir, profile_to=outs[label], mode="_parts") for label, tree in trees.items()
    }
    labels = list(clients)
    try:
        for q in questions:
            for label in labels:
                call(clients[label], args.dataset, q)
        for client in clients.values():
            os.kill(client.proc.pid, signal.SIGUSR1)
            client.request("ping")
        before = {label: cpu_seconds(c.proc.pid, c.proc.pid) for label, c in clients.items()}
        n = 0
        for r in range(args.rounds):
            for q in questions:
                for label in labels if r % 2 == 0 else labels[::-1]:
                    call(clients[label], args.dataset, q)
                n += 1
        loop = {label: cpu_seconds(c.proc.pid, c.proc.pid) - before[label] for label, c in clients.items()}
    finally:
        for client in clients.values():
            client.close()
    rows: dict[str, dict[str, float]] = {}
    for label, out in outs.items():
        totals = json.loads(out.read_text())
        out.unlink()
        row = {name: 1000 * seconds / n for name, (seconds, _) in totals.items()}
        row[REST] = 1000 * loop[label] / n - sum(row.values())
        row[ALL] = 1000 * loop[label] / n
        rows[label] = row
    return rows


REST = "the rest: SDK dispatch, middleware, asyncio, reads"
ALL = "event loop thread, all"


def parts(args: argparse.Namespace, trees: dict[str, Path], questions: list[str]) -> None:
    """Each tree's loop CPU per call and the named parts of it (--parts): medians of --runs runs."""
    load = load_avg()
    runs = [parts_run(args, trees, questions) for _ in range(args.runs)]
    names = [label for *_, label in PARTS] + [REST, ALL]
    table(
        f"event loop CPU per call, ms: medians of {args.runs} runs of {args.rounds} x {len(questions)} calls "
        f"(load {load} before, {load_avg()} after)",
        ["part", *trees],
        [
            [name, *(round(statistics.median(r[t].get(name, float("nan")) for r in runs), 3) for t in trees)]
            for name in names
        ],
    )


def profiled() -> None:
    """Run ``mcpower`` (argv after ``_profiled``) under cProfile; the stats are written at exit."""
    target = os.environ[PROFILE_ENV]
    profiler = cProfile.Profile()
    real_exit = os._exit

    def exit_after_dump(code: int) -> None:
        profiler.disable()
        profiler.dump_stats(target)
        real_exit(code)

    os._exit = exit_after_dump  # type: ignore[assignment]  # run_stdio ends with os._exit
    signal.signal(signal.SIGUSR1, lambda signum, frame: profiler.enable())  # the client says when
    sys.argv = ["mcpower", *sys.argv[2:]]
    from mcpower.cli import main

    main()


def main() -> None:
    if sys.argv[1:2] == ["_profiled"]:
        profiled()
        return
    if sys.argv[1:2] == ["_parts"]:
        timed_parts()
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("datasets_dir", type=Path)
    ap.add_argument("--tree", action="append", required=True, help="LABEL=PATH, a source tree (its mcpower/)")
    ap.add_argument("--dataset", default="fastapi")
    ap.add_argument("--questions", type=Path, default=HERE / "data" / "fastapi_questions.jsonl")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="profile the first tree's server instead")
    ap.add_argument("--top", type=int, default=45, help="functions shown by --profile")
    ap.add_argument("--parts", action="store_true", help="time named parts of each tree's event loop instead")
    args = ap.parse_args()
    trees = {}
    for spec in args.tree:
        label, _, path = spec.partition("=")
        trees[label] = Path(path).resolve()
    questions = question_texts(args.questions)
    if args.profile:
        profile(args, next(iter(trees.values())), questions)
    elif args.parts:
        parts(args, trees, questions)
    else:
        ab(args, trees, questions)


if __name__ == "__main__":
    main()
