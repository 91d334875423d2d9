"""No dependency records or sends telemetry about the machine unless the operator allows it.

onnxruntime 1.29+ (Linux, macOS) writes a device id and queues events for upload under
``$XDG_CACHE_HOME`` (else ``~/.cache``) ``/Microsoft/DeveloperTools/.onnxruntime`` from the moment
it is imported, unless ORT_DISABLE_TELEMETRY=1 is set by then. Every test here runs mcpower with a
fresh home folder and no XDG_CACHE_HOME, and looks for what onnxruntime leaves there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import anyio
import httpx2
import pytest
from conftest import fresh_python, write_files
from http_fixtures import TOKEN, HttpServer
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from server_fixtures import StdioServer, subprocess_env

from mcpower import env

# Where onnxruntime keeps its device id and queued events, under the cache folder.
ORT_TELEMETRY = Path("Microsoft") / "DeveloperTools" / ".onnxruntime"
ORT_RECORDS = tuple(int(part) for part in version("onnxruntime").split(".")[:2]) >= (1, 29) and (
    sys.platform.startswith("linux") or sys.platform == "darwin"
)
MCPOWER = str(Path(sys.executable).with_name("mcpower"))  # the installed command


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh home folder for the processes a test starts, with no XDG_CACHE_HOME: ~/.cache is used."""
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("HOME", str(folder))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    for name in ("MCPOWER_ALLOW_TELEMETRY", *env.TELEMETRY_OFF):
        monkeypatch.delenv(name, raising=False)  # the library's defaults, as on a user's machine
    # onnxruntime records nothing where CI is set (as CI sets it): without this the tests below would
    # pass in CI whatever mcpower did, and the control would fail
    monkeypatch.delenv("CI", raising=False)
    return folder


def recorded(home: Path) -> list[str]:
    """What onnxruntime's telemetry left in ``home``."""
    return sorted(str(p.relative_to(home)) for p in (home / ".cache" / ORT_TELEMETRY).glob("**/*"))


def test_disable_telemetry_forces_it_off_unless_the_operator_allows_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORT_DISABLE_TELEMETRY", "0")
    monkeypatch.delenv("HF_HUB_DISABLE_TELEMETRY", raising=False)
    monkeypatch.delenv("MCPOWER_ALLOW_TELEMETRY", raising=False)
    env.disable_telemetry()
    assert {name: os.environ.get(name) for name in env.TELEMETRY_OFF} == env.TELEMETRY_OFF
    monkeypatch.setenv("ORT_DISABLE_TELEMETRY", "0")
    monkeypatch.setenv("MCPOWER_ALLOW_TELEMETRY", "1")
    env.disable_telemetry()
    assert os.environ["ORT_DISABLE_TELEMETRY"] == "0"  # the operator's own choice stands


def test_a_search_command_records_no_telemetry(home: Path, tmp_path: Path) -> None:
    """`mcpower search` imports onnxruntime first thing, for the query model's head start."""
    # A model that cannot load: the head start imports onnxruntime all the same, and ends at once.
    argv = [MCPOWER, "search", "q", "--datasets-dir", str(tmp_path)]
    done = subprocess.run(argv, env={**subprocess_env(), "MCPOWER_MODEL": str(tmp_path / "no-model")}, **_RUN)
    assert done.returncode == 1, done.stderr
    assert recorded(home) == []


# A program that imports mcpower's embedding and then runs onnxruntime itself (a session and a run).
LIBRARY = """if True:
        import sys
        import numpy as np
        import onnx
        from onnx import TensorProto, helper

        import mcpower.embedding
        import onnxruntime as ort

        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
        graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        print(session.run(None, {"x": np.ones(1, dtype=np.float32)})[0].tolist())
"""


def test_the_library_records_no_telemetry(home: Path, tmp_path: Path) -> None:
    """A program that imports mcpower's embedding and then runs onnxruntime itself (a session and a run)."""
    done = fresh_python(LIBRARY)
    assert done.stdout.strip() == "[1.0]", done.stderr
    assert recorded(home) == []


@pytest.mark.skipif(not ORT_RECORDS, reason="this onnxruntime records no telemetry here")
def test_an_operator_may_allow_it(home: Path) -> None:
    """MCPOWER_ALLOW_TELEMETRY=1 leaves onnxruntime as it is: the same program as above records
    (which shows the tests above can fail). The library's path, not `mcpower search`: a search that
    fails early may end before its head-start thread has imported onnxruntime at all."""
    done = fresh_python(LIBRARY, env={"MCPOWER_ALLOW_TELEMETRY": "1"})
    assert done.stdout.strip() == "[1.0]", done.stderr
    assert recorded(home) != []


_RUN: dict[str, object] = {"capture_output": True, "text": True, "timeout": 300, "check": False}


@pytest.mark.slow
def test_ingest_search_and_both_servers_record_no_telemetry(home: Path, tmp_path: Path) -> None:
    """The real packaged model (exported to ONNX on first use) through every command that runs it."""
    write_files(tmp_path / "docs", {"tides.md": "# Tides\n\nThe tide table lists the spring tides.\n"})
    datasets = str(tmp_path / "datasets")
    ingest = subprocess.run(
        [MCPOWER, "ingest", str(tmp_path / "docs"), "--id", "docs", "--datasets-dir", datasets],
        env=subprocess_env(),
        **_RUN,
    )
    assert ingest.returncode == 0, ingest.stderr
    search = subprocess.run(
        [MCPOWER, "search", "docs", "spring tides", "--datasets-dir", datasets], env=subprocess_env(), **_RUN
    )
    assert search.returncode == 0 and "tides.md" in search.stdout, search.stderr

    stdio = StdioServer([MCPOWER, "serve", "--stdio", "--datasets-dir", datasets])
    try:
        stdio.initialize()
        result = stdio.call_tool("knowledge_search", {"query": "spring tides", "mode": "semantic"})
        assert result["structuredContent"]["results"][0]["path"] == "tides.md"
    finally:
        stdio.stop()

    launcher = tmp_path / "real_mcpower.py"  # HttpServer runs `python LAUNCHER serve --http ...`
    launcher.write_text("import sys\nfrom mcpower.cli import main\nsys.argv[0] = 'mcpower'\nmain()\n")
    http = HttpServer(launcher, Path(datasets))
    try:
        anyio.run(_search_over_http, http.url)
    finally:
        http.stop()
    assert (home / ".cache" / "mcpower").is_dir()  # the model's export: the cache folder was home's
    assert recorded(home) == []


async def _search_over_http(url: str) -> None:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=httpx2.Timeout(30, read=120)) as h,
        Client(streamable_http_client(url, http_client=h), mode="legacy") as client,
    ):
        result = await client.call_tool("knowledge_search", {"query": "spring tides", "mode": "semantic"})
        assert result.structured_content["results"][0]["path"] == "tides.md"
