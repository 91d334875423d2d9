"""Run the hostile-input fault table (tests/hostile_cases.py) and print it as Markdown.

The same cases tests/test_hostile.py asserts, with what each one observed: the table in
docs/robustness.md is this script's output (``--update-docs`` rewrites it there, between its
markers). Exit status 1 if any case failed.

    .venv/bin/python benchmarks/fault_table.py [--update-docs]
"""

from __future__ import annotations

import logging
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

from hostile_cases import CASES  # noqa: E402
from hostile_harness import Harness, Verdict  # noqa: E402

DOC = ROOT / "docs" / "robustness.md"
START, END = "<!-- fault-table:start -->", "<!-- fault-table:end -->"
GROUPS = {
    "stdio": "Protocol: raw lines on the server's stdin",
    "tool": "Tool arguments: `tools/call` over stdio",
    "resource": "Resources: `resources/read` over stdio",
    "dataset": "Datasets on disk: a copy of `recipes` broken one way, checked by the Registry, `mcpower validate` and the server",
}


def cell(text: str) -> str:
    text = re.sub(r"[\x00-\x1f\x7f]", " ", text)
    text = re.sub(r"v-\d{8}T\d{6}-[0-9a-f]{6}", "v-…", text)  # version folders differ run to run
    return text.replace("|", "\\|")


def render(verdicts: list[Verdict], seconds: float) -> str:
    passed = sum(v.passed for v in verdicts)
    out = [f"Tried {len(verdicts)} cases, {passed} passed ({seconds:.0f} s).", ""]
    for where, title in GROUPS.items():
        rows = [v for v in verdicts if v.case.where == where]
        out += [f"### {title}", "", "| case | input | expected | observed | |", "| --- | --- | --- | --- | --- |"]
        for v in rows:
            mark = "✓" if v.passed else "✗ " + "; ".join(v.problems)
            out.append(
                f"| `{v.case.id}` | {cell(v.case.input)} | {cell(v.case.want.describe())} | {cell(v.observed)} | {cell(mark)} |"
            )
        out.append("")
    return "\n".join(out)


def main() -> int:
    logging.getLogger("mcpower").setLevel(logging.CRITICAL)  # the table says it; no log lines for each case
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mcpower-faults-") as tmp:
        harness = Harness(Path(tmp))
        try:
            verdicts = [harness.run(case) for case in CASES]
        finally:
            harness.close()
    table = render(verdicts, time.monotonic() - started)
    if "--update-docs" in sys.argv[1:]:
        text = DOC.read_text(encoding="utf-8")
        start, end = text.index(START) + len(START), text.index(END)
        DOC.write_text(f"{text[:start]}\n{table}\n{text[end:]}", encoding="utf-8")
    else:
        print(table)
    failed = [v for v in verdicts if not v.passed]
    print(f"tried {len(verdicts)}, passed {len(verdicts) - len(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
