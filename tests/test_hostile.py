"""The hostile-input fault table (tests/hostile_cases.py), one test per case, against one stdio server.

docs/robustness.md shows the same table with what each case observed (benchmarks/fault_table.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostile_cases import CASES, Case
from hostile_harness import Harness

from mcpower.manifest import ID_PATTERN


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    h = Harness(tmp_path_factory.mktemp("hostile"))
    yield h
    h.close()


def test_case_ids_are_unique_dataset_ids() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert all(re.match(ID_PATTERN, i) and len(i) <= 64 for i in ids)
    assert {c.where for c in CASES} == {"stdio", "tool", "resource", "dataset"}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_input(harness: Harness, case: Case) -> None:
    verdict = harness.run(case)
    assert verdict.passed, f"{case.id}: observed {verdict.observed}\n" + "\n".join(verdict.problems)


def test_server_survived_the_table(harness: Harness) -> None:
    """After every case: alive, stdout only JSON-RPC, stderr only JSON log lines; the datasets root
    appears in the log once, in the startup record, and never on stdout."""
    server = harness.server
    assert server.proc.poll() is None
    assert server.call("ping") == {}
    for line in server.stdout_lines:
        assert json.loads(line).get("jsonrpc") == "2.0"
        assert not any(s.encode() in line for s in harness.secrets)
    records = server.log_records()
    leaking = [r for r in records if any(s in json.dumps(r, ensure_ascii=False) for s in harness.secrets)]
    assert [r["event"] for r in leaking] == ["server.startup"]
    harness.close()
    assert server.proc.returncode == 0
    assert Path(harness.datasets).is_dir()
