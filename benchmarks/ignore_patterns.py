"""The cost of a pathological .gitignore line, before (pathspec's regexes) and after (mcpower.gitignore).

    python benchmarks/ignore_patterns.py                    # 8, 10, 12, 16 stars, 30 s cap
    python benchmarks/ignore_patterns.py --stars 8 9 10 --cap 60

The line is ``*a*a...*a*c*b`` with the given number of stars, matched against a 40-character name
``aa...ab`` (no ``c``: every way to place the stars is tried by a backtracking matcher; the
greedy one finds each ``a`` and then looks for the ``c`` once). Each match
is timed in a fresh process per engine and star count, repeated for at least 0.2 s, and shown
beside the same run's cost of the line ``*b`` against the same name ("x plain"). A run over the
cap is killed and shown as "> cap"; more stars are then not tried with that engine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = """
import json, sys, time
engine, pattern = sys.argv[1], sys.argv[2]
if engine == 'pathspec':
    import pathspec
    make = pathspec.GitIgnoreSpec.from_lines
else:
    from mcpower.gitignore import IgnoreSpec as make
name = 'a' * 39 + 'b'

def per_match(line):
    spec = make([line])
    n, started = 0, time.perf_counter()
    while True:
        spec.match_file(name)
        n += 1
        took = time.perf_counter() - started
        if took >= 0.2:
            return took / n

plain = per_match('*b')
print(json.dumps({'seconds': per_match(pattern), 'plain': plain}))
"""


def measure(engine: str, stars: int, cap: float) -> dict[str, float] | None:
    pattern = "*a" * (stars - 2) + "*c*b"
    try:
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, engine, pattern], capture_output=True, text=True, timeout=cap, check=True
        )
    except subprocess.TimeoutExpired:
        return None
    result: dict[str, float] = json.loads(proc.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stars", type=int, nargs="+", default=[8, 10, 12, 16])
    parser.add_argument("--cap", type=float, default=30.0, help="seconds per run before it is killed")
    args = parser.parse_args()
    print("| stars | pathspec (before) | x plain | mcpower.gitignore (after) | x plain |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    capped: set[str] = set()
    for stars in args.stars:
        cells = []
        for engine in ("pathspec", "mcpower"):
            found = None if engine in capped else measure(engine, stars, args.cap)
            if found is None:
                capped.add(engine)
                cells += [f"> {args.cap:g} s", ""]
            else:
                took = found["seconds"]
                cells += [f"{took:.1f} s" if took >= 0.1 else f"{took * 1e6:,.1f} µs", f"{took / found['plain']:,.0f}x"]
        print(f"| {stars} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
