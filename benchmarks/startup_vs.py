"""Cold `mcpower search` and stdio `initialize`: this checkout against another commit (main), same run.

    .venv/bin/python benchmarks/startup_vs.py [--base main] [-n 11] [--datasets-dir DIR] [--out FILE]

The issue-21 target: the web pages add no import to `search`, `serve --stdio` or the MCP handshake,
so both stay within 1.05x of the code before the change. Measured here, in one run:

- **base**: ``git archive <base> mcpower`` unpacked into a temporary folder; **head**: this working
  tree's ``mcpower/`` (uncommitted edits included), linked into a folder of its own. Both run with this interpreter and this virtualenv
  (the same dependencies), the package put first on the module path by ``PYTHONPATH`` -- the editable
  install's finder comes after the path, so each side imports its own tree, which is checked before
  anything is timed. Both trees are byte-compiled first, as ``pip install`` does.
- **search**: the ``mcpower`` console script, ``search fastapi "how do I declare a path parameter"``
  on the FastAPI docs (ingested once with the packaged model into ``DIR/mcp``, as ``run.py --only cold``
  does), wall seconds and the child's CPU seconds (user + system).
- **initialize**: ``mcpower serve --stdio --datasets-dir DIR/mcp``: spawn -> the initialize response
  (wall, and the CPU the server had used by then), as ``bare_server.py pairs`` measures it.

Each pair runs base and head back to back, in alternating order, after one discarded warm-up pair
(page cache). Printed: the medians, and the median of the paired ratios head/base (the figure to
quote: each pair shares the machine's load of its moment). CPU ratios are less swayed by other load.
Last, the modules each side imports for each command (``-X importtime``), and which the head adds or
drops: the one figure that no load on the machine can blur.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

from bare_server import _one_run
from suite.datasets import ensure_dataset
from suite.report import REPO, environment, load_avg, table
from suite.server import mcpower_argv

QUERY = "how do I declare a path parameter"
DEFAULT_CORPORA = Path(os.environ.get("MCPOWER_BENCH_CORPORA", "/work/shared/bench"))
DEFAULT_DATASETS = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mcpower" / "bench"


def unpack(rev: str, into: Path) -> str:
    """``git archive REV mcpower`` into ``into``; returns the commit's short hash."""
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", rev], capture_output=True, text=True, check=True
    ).stdout.strip()
    data = subprocess.run(["git", "-C", str(REPO), "archive", commit, "mcpower"], capture_output=True, check=True)
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=BytesIO(data.stdout)) as tar:
        tar.extractall(into, filter="data")
    return commit


def env_for(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPOWER_")}
    env["PYTHONPATH"] = str(tree)
    return env


def check_imports(tree: Path) -> None:
    """The side's interpreter must import mcpower from ``tree``, not the editable install's checkout."""
    out = subprocess.run(
        [sys.executable, "-P", "-c", "import mcpower; print(mcpower.__file__)"],  # -P: not the working folder
        env=env_for(tree),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if Path(out).resolve().parent != (tree / "mcpower").resolve():
        raise SystemExit(f"PYTHONPATH={tree} imports mcpower from {out}, not from that tree")


def cold_search(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one `mcpower search` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def initialize(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Spawn -> initialize response, and the server's CPU seconds by then (bare_server's client)."""
    saved = os.environ.copy()
    os.environ.clear()
    os.environ.update(env)  # _one_run's child inherits this process's environment
    try:
        r = _one_run(argv, 60.0, False)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return float(r["init"]), float(r["init_cpu"])


def imported(argv: list[str], env: dict[str, str]) -> set[str]:
    """The modules one run of ``argv`` imports (``-X importtime``): a difference no machine load can blur."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *argv], env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    return {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}


def summary(pairs: list[tuple[float, float]]) -> dict[str, float]:
    """Medians of each side and of the paired ratios head/base (pairs are (base, head))."""
    return {
        "base_median_s": round(statistics.median(b for b, _ in pairs), 4),
        "head_median_s": round(statistics.median(h for _, h in pairs), 4),
        "median_ratio": round(statistics.median(h / b for b, h in pairs), 3),
        "min_ratio": round(min(h / b for b, h in pairs), 3),
        "max_ratio": round(max(h / b for b, h in pairs), 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="main", help="the git revision to compare against (default: main)")
    parser.add_argument("-n", "--pairs", type=int, default=11)
    parser.add_argument("--corpora", type=Path, default=DEFAULT_CORPORA)
    parser.add_argument("--datasets-dir", type=Path, default=DEFAULT_DATASETS)
    parser.add_argument("--out", type=Path, help="also write the figures here as JSON")
    args = parser.parse_args()
    out_file = args.out.resolve() if args.out else None  # before the working folder changes

    root = args.datasets_dir / "mcp"
    ensure_dataset(args.corpora / "docs-fastapi" / "corpus", root, "fastapi")
    with tempfile.TemporaryDirectory(prefix="mcpower-startup-") as tmp:
        # Two folders holding nothing but an `mcpower` package each, so the module path differs in that only.
        sides = {"base": Path(tmp, "base"), "head": Path(tmp, "head")}
        sides["head"].mkdir()
        (sides["head"] / "mcpower").symlink_to(REPO / "mcpower", target_is_directory=True)
        commit = unpack(args.base, sides["base"])
        for tree in sides.values():
            compileall.compile_dir(tree / "mcpower", quiet=1)
            check_imports(tree)
        envs = {name: env_for(tree) for name, tree in sides.items()}
        here = os.getcwd()
        os.chdir(tmp)  # no checkout in the working folder of any child
        cli = mcpower_argv()
        commands = {
            "search": (cold_search, [*cli, "search", "fastapi", QUERY, "--datasets-dir", str(root)]),
            "initialize": (initialize, [*cli, "serve", "--stdio", "--datasets-dir", str(root)]),
        }
        load_before = load_avg()
        wall: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        cpu: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for i in range(args.pairs + 1):
            order = ("base", "head") if i % 2 == 0 else ("head", "base")
            for name, (measure, argv) in commands.items():
                got = {side: measure(argv, envs[side]) for side in order}
                if i:  # the first pair fills the page cache
                    wall[name].append((got["base"][0], got["head"][0]))
                    cpu[name].append((got["base"][1], got["head"][1]))
        # The console script is a Python file: run it under -X importtime (serve --stdio ends at stdin's EOF).
        script = cli if len(cli) == 1 else cli[1:]  # the script's path, or -m mcpower
        modules = {
            name: {side: imported([*script, *argv[len(cli) :]], envs[side]) for side in sides}
            for name, (_, argv) in commands.items()
        }
        os.chdir(here)
    out: dict[str, Any] = {
        "base": f"{args.base} ({commit})",
        "head": environment()["commit"],
        "pairs": args.pairs,
        "load_average": {"before": load_before, "after": load_avg()},
        "wall": {name: summary(p) for name, p in wall.items()},
        "cpu": {name: summary(p) for name, p in cpu.items()},
        "modules": {
            name: {
                "base": len(m["base"]),
                "head": len(m["head"]),
                "added": sorted(m["head"] - m["base"]),
                "removed": sorted(m["base"] - m["head"]),
            }
            for name, m in modules.items()
        },
    }
    table(
        f"head ({out['head']}) vs {out['base']}: medians of {args.pairs} interleaved pairs",
        ["what", "base s", "head s", "head/base (median of pairs)", "min", "max"],
        [
            [
                f"{name} {kind}",
                f"{s['base_median_s']:.3f}",
                f"{s['head_median_s']:.3f}",
                f"{s['median_ratio']:.3f}x",
                f"{s['min_ratio']:.3f}",
                f"{s['max_ratio']:.3f}",
            ]
            for kind in ("wall", "cpu")
            for name, s in out[kind].items()
        ],
    )
    print(f"load average before {out['load_average']['before']}, after {out['load_average']['after']}")
    for name, m in out["modules"].items():
        print(f"modules {name} imports: base {m['base']}, head {m['head']}; added {m['added']}, removed {m['removed']}")
    if out_file:
        out_file.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
