"""The query model's head start (mcpower/cli/preload.py): a cold search starts loading the operator's
model before typer and pydantic are imported, loads it once, and only when the query is embedded.

The cold-start checks run `mcpower.cli.main` in a fresh interpreter (this test process has long
since imported everything), with `mcpower.embedding.load_embedder` replaced by the fake embedder.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeEmbedder, fresh_python, tagged_json

from mcpower.cli.preload import _embeds_query
from mcpower.defaults import DEFAULT_MODEL
from mcpower.ingestion import IngestOptions, ingest

TESTS_DIR = Path(__file__).resolve().parent

# Runs `mcpower ARGS...` through main(); prints, as the last line of stdout, each model load (the
# model, and the thread that loaded it) and, for each thread started, whether typer and pydantic
# had been imported when it started.
WRAPPER = """
import json, sys, threading
sys.path.insert(0, sys.argv[1])
import mcpower.embedding as embedding

loads, started = [], []

def load_embedder(model, backend="onnx", cache_dir=None):
    from conftest import FakeEmbedder, fresh_python, tagged_json
    loads.append([model, threading.current_thread().name])
    return FakeEmbedder()

embedding.load_embedder = load_embedder
real_start = threading.Thread.start

def start(thread):
    started.append([thread.name, "typer" in sys.modules, "pydantic" in sys.modules])
    real_start(thread)

threading.Thread.start = start
sys.argv = ["mcpower", *json.loads(sys.argv[2])]
from mcpower.cli import main
try:
    main()
except SystemExit as e:
    print(f"exit {e.code}", file=sys.stderr)
print("\\nRAN " + json.dumps({"loads": loads, "started": started}))
"""


def run_main(*args: str | Path, model: str | None = None) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
    env = {"MCPOWER_ALLOWED_MODELS": FakeEmbedder.model_name}
    if model is not None:
        env["MCPOWER_MODEL"] = model
    proc = fresh_python(WRAPPER, str(TESTS_DIR), json.dumps([str(a) for a in args]), env=env)
    return tagged_json(proc, "RAN"), proc


@pytest.fixture
def docs(corpus: Path, datasets_dir: Path, fake_embedder: FakeEmbedder) -> Path:
    ingest(corpus, datasets_dir, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    return datasets_dir


def preloads(ran: dict[str, Any]) -> list[list[Any]]:
    return [t for t in ran["started"] if t[0] == "mcpower-preload"]


def test_a_search_starts_the_operators_model_before_typer_and_pydantic_load(docs: Path) -> None:
    ran, proc = run_main("search", "docs", "zephyrine", "--datasets-dir", docs, model=FakeEmbedder.model_name)

    assert "install.md" in proc.stdout or "usage.md" in proc.stdout, proc.stderr
    assert preloads(ran) == [["mcpower-preload", False, False]]  # started before either was imported
    assert ran["loads"] == [[FakeEmbedder.model_name, "mcpower-preload"]]  # once, by the head start


def test_a_search_of_every_dataset_uses_the_head_start(docs: Path) -> None:
    ran, proc = run_main("search", "--all", "zephyrine", "--datasets-dir", docs, model=FakeEmbedder.model_name)

    assert "docs/" in proc.stdout, proc.stderr
    assert ran["loads"] == [[FakeEmbedder.model_name, "mcpower-preload"]]


def test_a_dataset_of_another_model_loads_its_own(docs: Path) -> None:
    # The operator's model (the packaged one) starts early; the dataset names the fake one.
    ran, proc = run_main("search", "docs", "zephyrine", "--datasets-dir", docs)

    assert "install.md" in proc.stdout or "usage.md" in proc.stdout, proc.stderr
    models = [model for model, _ in ran["loads"]]
    assert FakeEmbedder.model_name in models  # the dataset's own, which answered
    assert models.count(FakeEmbedder.model_name) == 1
    assert set(models) <= {FakeEmbedder.model_name, DEFAULT_MODEL}


@pytest.mark.parametrize(
    "args",
    [
        ("search", "docs", "zephyrine", "--mode", "keyword"),
        ("search", "docs", "zephyrine", "--mode=keyword"),
        ("search", "--help"),
        ("validate",),
        ("datasets",),
    ],
)
def test_no_head_start_when_no_query_is_embedded(docs: Path, args: tuple[str, ...]) -> None:
    ran, proc = run_main(*args, "--datasets-dir", docs, model=FakeEmbedder.model_name)

    assert "Traceback" not in proc.stderr
    assert preloads(ran) == []
    assert ran["loads"] == []


@pytest.mark.parametrize(
    ("argv", "embeds"),
    [
        (["search", "docs", "q"], True),
        (["search", "--all", "q"], True),
        (["search", "docs", "q", "--mode", "semantic"], True),
        (["search", "docs", "q", "--mode", "keyword"], False),
        (["search", "docs", "q", "--mode=keyword"], False),
        (["search", "--help"], False),
        (["ingest", "docs"], False),
        (["eval", "docs"], False),
        ([], False),
    ],
)
def test_which_commands_get_a_head_start(argv: list[str], embeds: bool) -> None:
    assert _embeds_query(argv) is embeds


# The head start's load does not end before the command has: it waits for main() to return.
OUTLIVES = """
import json, sys, threading
sys.path.insert(0, sys.argv[1])
import mcpower.embedding as embedding

command_ended, marker = threading.Event(), sys.argv[3]

def load_embedder(model, backend="onnx", cache_dir=None):
    command_ended.wait()
    from conftest import FakeEmbedder, fresh_python, tagged_json
    with open(marker, "w") as f:
        f.write("loaded")
    return FakeEmbedder()

embedding.load_embedder = load_embedder
sys.argv = ["mcpower", *json.loads(sys.argv[2])]
from mcpower.cli import main
try:
    main()
except SystemExit as e:
    print(f"exit {e.code}", file=sys.stderr)
finally:
    command_ended.set()
"""


def test_a_search_that_fails_early_lets_the_model_load_finish_before_exiting(docs: Path, tmp_path: Path) -> None:
    # ONNX Runtime aborts the process (std::bad_alloc, exit 134) if the interpreter ends while a
    # thread is opening a session: a failed search must wait for the head start, not cut it off.
    marker = tmp_path / "loaded"
    args = ["search", "no-such-dataset", "zephyrine", "--datasets-dir", str(docs)]
    proc = fresh_python(OUTLIVES, str(TESTS_DIR), json.dumps(args), str(marker))

    assert "unknown dataset 'no-such-dataset'" in proc.stderr and "exit 1" in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr  # the wrapper ended normally, after the load
    assert marker.read_text() == "loaded"


# Ctrl-C lands while the command starts, inside an import that turns any failure into an error of
# its own (as numpy's does: "ImportError: import numpy failed"), as the head start begins.
FRAGILE = """
import os, signal
try:
    os.kill(os.getpid(), signal.SIGINT)
    sum(range(10000))
except BaseException as e:
    raise ImportError("import fragile failed") from e
"""

# Nothing that starts threads (numpy's BLAS does) is imported before main(), as in a real start:
# a thread that does not hold Ctrl-C could take the signal for the whole process.
INTERRUPTED = """
import json, os, signal, sys
sys.path[:0] = [sys.argv[1], sys.argv[3]]
import mcpower.cli.preload as preload

def load_embedder(model, backend="onnx", cache_dir=None):
    from conftest import FakeEmbedder
    return FakeEmbedder()

def head_start(argv):
    import fragile
    import mcpower.embedding as embedding
    embedding.load_embedder = load_embedder
    real_head_start(argv)

assert len(os.listdir("/proc/self/task")) == 1, "a thread started before main()"
real_head_start, preload.head_start = preload.head_start, head_start
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, whatever ran this
sys.argv = ["mcpower", *json.loads(sys.argv[2])]
from mcpower.cli import main
main()
"""


def test_ctrl_c_while_a_search_starts_exits_130_without_a_traceback(docs: Path, tmp_path: Path) -> None:
    (tmp_path / "fragile.py").write_text(FRAGILE, encoding="utf-8")
    args = ["search", "docs", "zephyrine", "--datasets-dir", str(docs)]
    proc = fresh_python(INTERRUPTED, str(TESTS_DIR), json.dumps(args), str(tmp_path))

    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr and "Error" not in proc.stderr, proc.stderr
    assert proc.stdout == ""  # no search ran
