"""Live re-indexing through `mcpower serve --watch`: edit latency, bursts, idle cost, a vanished folder.

    python benchmarks/watching.py                    # FastAPI docs copy, the packaged model (ingests it first)
    python benchmarks/watching.py --prebuilt DIR     # reuse DIR/<id>, a dataset ingested from the same corpus
    python benchmarks/watching.py --fake             # the tests' fake embedder: the plumbing only

Copies the corpus into a temporary folder and serves it with a real `mcpower serve --stdio --watch`
(a subprocess, driven over stdio as an MCP client would) beside a second server without --watch on
the same datasets. Then:

1. idle: both servers' CPU time (utime + stime from /proc) over --idle seconds, side by side;
2. edits: appends a sentence with a new word to one file at a time; the latency is from the file's
   close to the first knowledge_search (hybrid, polled every 50 ms) whose top result holds the word;
3. bursts: 200 files written as fast as possible (every page changed, 45 added), then 200 more
   spread over 3 s (one per 15 ms); counts the re-ingests the server logged (`watch.reindexed`);
4. the source folder renamed, then deleted: how long until knowledge_list_datasets says
   source_missing, whether the dataset still answers, and that it is watched again once restored.

Prints a table; writes JSON to benchmarks/results/watch.json. Quote latencies with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
TESTS_DIR = BENCH_DIR.parent / "tests"
sys.path.insert(0, str(TESTS_DIR))

from server_fixtures import StdioServer, subprocess_env, write_launcher  # noqa: E402

DEFAULT_CORPUS = Path("/work/shared/bench/docs-fastapi/corpus")
DATASET = "fastapi"
TARGET_SECONDS = 5.0
POLL = 0.05
QUIET = 1.0  # the server's default --watch-debounce


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process and its threads, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    """A `mcpower serve` subprocess and the calls this benchmark makes."""

    def __init__(self, command: list[str], datasets: Path, watch: bool) -> None:
        argv = [*command, "serve", "--stdio", "--datasets-dir", str(datasets), "--log-format", "json"]
        self.proc = StdioServer([*argv, "--watch"] if watch else argv, env=subprocess_env())
        self.proc.initialize(timeout=120)

    def search(self, query: str, **args: Any) -> dict[str, Any]:
        result = self.proc.call_tool("knowledge_search", {"query": query, "dataset": DATASET, **args}, timeout=120)
        return result["structuredContent"]  # type: ignore[no-any-return]

    def dataset(self) -> dict[str, Any]:
        listed = self.proc.call_tool("knowledge_list_datasets", {}, timeout=60)["structuredContent"]["datasets"]
        return next(d for d in listed if d["id"] == DATASET)

    def reindexed(self, since: int = 0) -> list[dict[str, Any]]:
        """The `watch.reindexed` records that published a version, from stderr line ``since`` on."""
        out = []
        for line in self.proc.stderr_lines[since:]:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("event") == "watch.reindexed" and record.get("published"):
                out.append(record)
        return out

    def reindexed_after(self, since: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """The records from ``since`` on, once there is one: the server logs a re-ingest just after
        publishing it, so a search can find the new text a moment before the record is written."""
        started = time.monotonic()
        while not (records := self.reindexed(since)) and time.monotonic() - started < timeout:
            time.sleep(POLL)
        return records

    def mark(self) -> int:
        return len(self.proc.stderr_lines)

    def wait_state(self, state: str, timeout: float = 120.0) -> float:
        """Seconds until the dataset's watch state is ``state``."""
        started = time.monotonic()
        while self.dataset().get("watch_state") != state:
            if time.monotonic() - started > timeout:
                raise SystemExit(f"watch state never became {state!r}: {self.dataset()}")
            time.sleep(0.1)
        return time.monotonic() - started

    def wait_found(self, word: str, timeout: float = 120.0) -> float:
        """Seconds until a search finds ``word`` (keyword mode: whether the new text is in the version
        being served, whatever the ranking; a hybrid search switches versions at the same moment)."""
        started = time.monotonic()
        while True:
            results = self.search(word, top_k=1, mode="keyword")["results"]
            if results and word in results[0]["snippet"]:
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                events = [line for line in self.proc.stderr().splitlines() if '"event": "audit"' not in line]
                raise SystemExit(f"{word!r} never became searchable; server log:\n" + "\n".join(events[-30:]))
            time.sleep(POLL)

    def stop(self) -> None:
        self.proc.stop()


def sentence(word: str) -> str:
    return f"The {word} setting makes the frobnicator purple."


def append(path: Path, text: str) -> float:
    """Append ``text`` to ``path`` and return the time of the close (the save)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
    return time.monotonic()


def prepare(args: argparse.Namespace, work: Path, command: list[str]) -> Path:
    """The corpus copy and its dataset; returns the corpus copy."""
    corpus = work / "corpus"
    shutil.copytree(args.corpus, corpus)
    datasets = work / "datasets"
    if args.prebuilt:
        shutil.copytree(args.prebuilt / DATASET, datasets / DATASET)
        manifest = datasets / DATASET / "manifest.json"
        data = json.loads(manifest.read_text())
        data["source"] = {**data.get("source", {}), "path": str(corpus.resolve())}
        data["source"].setdefault("maxFileBytes", 10 * 1024 * 1024)
        manifest.write_text(json.dumps(data, indent=2))
        return corpus
    argv = [*command, "ingest", str(corpus), "--id", DATASET, "--datasets-dir", str(datasets), "-q", "--json"]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=subprocess_env(), check=False)
    if done.returncode != 0:
        raise SystemExit(f"ingest failed: {done.stderr[-2000:]}")
    print(f"ingested the corpus copy in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return corpus


def settle(server: Server) -> None:
    """Until the watcher is watching and its catch-up re-ingest (if any) is over."""
    server.wait_state("watching")
    quiet_since = time.monotonic()
    seen = len(server.reindexed())
    while time.monotonic() - quiet_since < 3.0:
        time.sleep(0.2)
        if len(server.reindexed()) != seen or server.dataset()["watch_state"] != "watching":
            seen, quiet_since = len(server.reindexed()), time.monotonic()


def measure_edits(server: Server, corpus: Path, n: int) -> list[dict[str, Any]]:
    pages = sorted(p for p in corpus.rglob("*.md") if p.stat().st_size < 40_000)[:: max(1, 100 // n)][:n]
    out = []
    for i, page in enumerate(pages):
        word = f"zorblattquux{i}"
        mark = server.mark()
        saved = append(page, f"\n\n{sentence(word)}\n")
        server.wait_found(word)
        latency = time.monotonic() - saved
        records = server.reindexed_after(mark)
        out.append(
            {
                "file": str(page.relative_to(corpus)),
                "seconds": round(latency, 2),
                "reingests": len(records),
                "reingest_ms": records[0].get("duration_ms") if records else None,
                "embedded": records[0].get("embedded") if records else None,
            }
        )
        print(f"edit {i + 1}/{len(pages)}: {out[-1]}", file=sys.stderr)
        time.sleep(2.0)
    return out


def measure_burst(server: Server, corpus: Path, word: str, gap: float) -> dict[str, Any]:
    pages = sorted(corpus.rglob("*.md"))
    extra = [corpus / "burst" / f"page{n:03}.md" for n in range(200 - len(pages))]
    (corpus / "burst").mkdir(exist_ok=True)
    mark = server.mark()
    started = time.monotonic()
    for n, page in enumerate([*pages, *extra]):
        if page.parent.name == "burst" and not page.exists():
            page.write_text(f"# Burst page {n}\n\nPage {n} of the {word} burst.\n", encoding="utf-8")
        else:
            append(page, f"\n\nLine {n} of the {word} burst.\n")
        if gap:
            time.sleep(gap)
    written = time.monotonic()
    found = server.wait_found(word)
    records = server.reindexed_after(mark)
    # Until the watcher is idle: a file written after a re-ingest read the folder makes one more,
    # which can take as long as the first (under load, many seconds).
    while server.dataset()["watch_state"] != "watching" or server.reindexed(mark) != records:
        records = server.reindexed(mark)
        time.sleep(0.2)
    settle(server)
    records = server.reindexed(mark)
    result = {
        "files": len(pages) + len(extra),
        "write_seconds": round(written - started, 2),
        "searchable_after_last_write_s": round(found, 2),
        "reingests": len(records),
        "reports": [{k: r.get(k) for k in ("added", "changed", "removed", "embedded", "duration_ms")} for r in records],
    }
    print(f"burst (gap {gap * 1000:.0f} ms): {result}", file=sys.stderr)
    return result


def measure_idle(watching: Server, plain: Server, seconds: float) -> dict[str, Any]:
    pids = {"watching": watching.proc.proc.pid, "plain": plain.proc.proc.pid}
    before = {k: cpu_seconds(p) for k, p in pids.items()}
    load = load_average()
    started = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - started
    out: dict[str, Any] = {"seconds": round(wall, 1), "load_before": load, "load_after": load_average()}
    for k, p in pids.items():
        out[f"{k}_cpu_percent"] = round(100 * (cpu_seconds(p) - before[k]) / wall, 3)
        out[f"{k}_threads"] = len(os.listdir(f"/proc/{p}/task"))
        out[f"{k}_rss_mb"] = round(
            int(Path(f"/proc/{p}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
        )
    print(f"idle: {out}", file=sys.stderr)
    return out


def measure_gone(server: Server, corpus: Path, how: str) -> dict[str, Any]:
    kept = corpus.with_name("corpus-kept")
    if how == "rename":
        corpus.rename(kept)
    else:
        shutil.copytree(corpus, kept)
        shutil.rmtree(corpus)
    reported = server.wait_state("source_missing")
    still = server.search("dependency injection", top_k=3)["results"]
    manifest = (corpus.parent / "datasets" / DATASET / "manifest.json").is_file()
    message = server.dataset()["watch_message"]
    if how == "rename":
        kept.rename(corpus)
    else:
        shutil.copytree(kept, corpus)
        shutil.rmtree(kept)
    back = server.wait_state("watching")
    settle(server)
    saved = append(corpus / "async.md", f"\n\n{sentence('zorblattback' + how)}\n")
    server.wait_found(f"zorblattback{how}")
    result = {
        "reported_after_s": round(reported, 2),
        "dataset_kept": manifest,
        "still_answers": len(still),
        "message": message,
        "watched_again_after_s": round(back, 2),
        "edit_after_return_searchable_s": round(time.monotonic() - saved, 2),
    }
    print(f"{how}: {result}", file=sys.stderr)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="corpus folder to copy")
    parser.add_argument("--prebuilt", type=Path, help=f"a datasets folder holding {DATASET}/ from that corpus")
    parser.add_argument("--fake", action="store_true", help="use the tests' fake embedder (no model)")
    parser.add_argument("--edits", type=int, default=7, help="single-file edits to time")
    parser.add_argument("--idle", type=float, default=60.0, help="seconds of idle CPU measurement")
    parser.add_argument("--workdir", type=Path, help="keep the copies here")
    parser.add_argument("--json-out", type=Path, default=BENCH_DIR / "results" / "watch.json")
    args = parser.parse_args()

    work = args.workdir or Path(tempfile.mkdtemp(prefix="mcpower-watch-"))
    work.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(write_launcher(work))] if args.fake else [sys.executable, "-m", "mcpower"]
    results: dict[str, Any] = {"load_start": load_average(), "fake": args.fake, "corpus": str(args.corpus)}
    corpus = prepare(args, work, command)
    watching = Server(command, work / "datasets", watch=True)
    plain = Server(command, work / "datasets", watch=False)
    try:
        settle(watching)
        watching.search("warm up")
        plain.search("warm up")
        results["idle"] = measure_idle(watching, plain, args.idle)
        plain.stop()
        results["edits"] = measure_edits(watching, corpus, args.edits)
        results["burst_fast"] = measure_burst(watching, corpus, "quokkaburst", 0.0)
        results["burst_spread"] = measure_burst(watching, corpus, "wombatburst", 0.015)
        results["rename"] = measure_gone(watching, corpus, "rename")
        results["delete"] = measure_gone(watching, corpus, "delete")
    finally:
        watching.stop()
        plain.stop()
    results["load_end"] = load_average()
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.write_text(json.dumps(results, indent=2) + "\n")
    report(results)


def report(r: dict[str, Any]) -> None:
    lat = [e["seconds"] for e in r["edits"]]
    idle = r["idle"]
    rows = [
        ("edit → searchable (s), min / median / max", f"{min(lat)} / {statistics.median(lat)} / {max(lat)}"),
        ("  re-ingest per edit (ms), median", statistics.median(e["reingest_ms"] or 0 for e in r["edits"])),
        ("  edits within 5 s", f"{sum(x <= TARGET_SECONDS for x in lat)} of {len(lat)}"),
    ]
    for key, label in (("burst_fast", "200 files at once"), ("burst_spread", "200 files over 3 s")):
        b = r[key]
        rows.append((f"{label}: re-ingests", f"{b['reingests']} (written in {b['write_seconds']} s)"))
        rows.append(("  last file searchable after the last write (s)", b["searchable_after_last_write_s"]))
    rows.append(
        ("idle CPU, watching / plain server (%)", f"{idle['watching_cpu_percent']} / {idle['plain_cpu_percent']}")
    )
    rows.append(
        (
            "  threads, RSS MB (watching / plain)",
            f"{idle['watching_threads']}, {idle['watching_rss_mb']} / {idle['plain_threads']}, {idle['plain_rss_mb']}",
        )
    )
    for how in ("rename", "delete"):
        g = r[how]
        rows.append((f"source folder {how}d: reported after (s)", g["reported_after_s"]))
        rows.append(
            (
                "  dataset kept / still answers / watched again after (s)",
                f"{g['dataset_kept']} / {g['still_answers']} results / {g['watched_again_after_s']}",
            )
        )
    rows.append(("load average start / end", f"{r['load_start']} / {r['load_end']}"))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


if __name__ == "__main__":
    main()
