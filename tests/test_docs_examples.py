"""The examples in the docs run as printed: each fenced Python block marked ``<!-- example: run -->``
on the line before it is run against a real `serve --http` (fake embedder; `KB_URL` and `MCPOWER_CLIENT_TOKEN`
set as the docs tell a reader to). A Python block that cannot run here says why in
``<!-- example: skip REASON -->``; an unmarked one fails the test, so no new example goes untested.
Every JSON block parses as JSON (one marked ``<!-- example: fragment -->`` is a member of an
object, ``"key": value``, and parses inside braces), or says why not in ``<!-- example: skip REASON -->``.
(Shell blocks are not run yet: most start servers or need a model or a network.)"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from http_fixtures import TOKEN, HttpServer, write_http_launcher
from server_fixtures import REPO_ROOT, build_datasets, subprocess_env

DOCS = sorted([REPO_ROOT / "README.md", *(REPO_ROOT / "docs").glob("*.md")])
# A fence opening, with the marker line (if any) just before it.
BLOCK = re.compile(r"(?:<!-- example: (run|fragment|skip [^>]+?) -->\n)?```(\w+)\n(.*?)\n```", re.S)


def blocks(language: str) -> list[tuple[str, str, str]]:
    """(where, marker or '', code) of every ``language`` block in the docs."""
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for m in BLOCK.finditer(text):
            if m.group(2) == language:
                line = text[: m.start(2)].count("\n") + 1
                found.append((f"{doc.relative_to(REPO_ROOT)}:{line}", m.group(1) or "", m.group(3)))
    return found


def test_every_python_example_is_run_or_says_why_not() -> None:
    python = blocks("python")
    assert python, "the docs have Python examples (docs/clients.md)"
    unmarked = [where for where, marker, _ in python if not marker]
    assert not unmarked, f"mark these <!-- example: run --> or <!-- example: skip REASON -->: {unmarked}"
    for where, marker, _ in python:
        assert marker == "run" or len(marker) > len("skip ") + 10, f"{where}: say why it cannot run here"


def test_every_json_example_parses() -> None:
    examples = blocks("json")
    assert examples, "the docs have JSON examples (docs/clients.md)"
    for where, marker, code in examples:
        if marker.startswith("skip "):
            assert len(marker) > len("skip ") + 10, f"{where}: say why it is not JSON"
            continue
        try:
            json.loads("{" + code + "}" if marker == "fragment" else code)
        except ValueError as e:
            raise AssertionError(f"{where}: not JSON ({e}); fix it, or mark it <!-- example: fragment -->") from None


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    root = tmp_path_factory.mktemp("docs-examples")
    srv = HttpServer(write_http_launcher(root), build_datasets(root))
    try:
        yield srv
    finally:
        srv.stop()


@pytest.mark.slow  # a server and a Python with the SDK: ~5-15 s
@pytest.mark.parametrize(("where", "code"), [(w, c) for w, m, c in blocks("python") if m == "run"])
def test_python_example_runs_against_a_server(server: HttpServer, where: str, code: str, tmp_path: Path) -> None:
    env = {**subprocess_env(), "KB_URL": server.url, "MCPOWER_CLIENT_TOKEN": TOKEN}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )
    assert done.returncode == 0, f"{where} failed:\n{done.stderr[-3000:]}"
    assert "handbook/guide/install.md" in done.stdout, f"{where} printed no result:\n{done.stdout}"
