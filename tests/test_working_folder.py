"""The folder a command is started in is data: no code and no model is taken from it by accident.

A user runs `mcpower ingest .` in a cloned docs repository, and an MCP client starts `serve --watch`
in whatever project folder it has open: a ``socket.py`` or ``sitecustomize.py`` there must never
run, in the command or in the process that reads documents.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import write_files
from format_fixtures import pdf
from milvus_fixtures import needs_milvus
from server_fixtures import subprocess_env, write_launcher

from mcpower.chunking.worker import Reader
from mcpower.config import Settings
from mcpower.embedding import resolve_model
from mcpower.errors import EmbeddingModelError

MARKER = "ran.txt"
# Each writes its name into the marker file when imported; socket.py then behaves as the real one,
# so an ingest that imported it still succeeds and only the marker tells.
_RECORD = (
    "import pathlib\npathlib.Path(__file__).resolve().parent.joinpath({marker!r}).open('a').write({name!r} + '\\n')\n"
)
_REAL_SOCKET = (
    "import sysconfig\n"
    "_real = sysconfig.get_paths()['stdlib'] + '/socket.py'\n"
    "exec(compile(open(_real).read(), _real, 'exec'))\n"
)
HOSTILE_MODULES = ("socket", "sitecustomize", "usercustomize", "pypdf", "lxml", "docutils", "typer", "mcpower")


def hostile_folder(folder: Path) -> Path:
    """A folder holding modules named like those mcpower and its parsers import, and like mcpower itself."""
    files: dict[str, str | bytes] = {}
    for name in HOSTILE_MODULES:
        record = _RECORD.format(marker=MARKER, name=name)
        if name in ("lxml", "docutils", "mcpower"):  # packages
            files[f"{name}/__init__.py"] = record.replace("parent", "parent.parent")
        else:
            files[f"{name}.py"] = record + (_REAL_SOCKET if name == "socket" else "")
    return write_files(folder, files)


DOCS: dict[str, str | bytes] = {
    "page.html": "<html><head><title>Lighthouse</title></head><body><h1>Lighthouse</h1>"
    "<p>The lighthouse keeper trims the wick at dusk.</p></body></html>",
    "guide.rst": "Harbour\n=======\n\nThe harbour master logs every ferry.\n",
    "manual.pdf": pdf([["Tides", "The tide table lists the spring tides."]]),
}


def test_ingest_runs_no_code_from_the_folder_it_is_started_in(tmp_path: Path) -> None:
    """`mcpower ingest docs` (the CLI, in a subprocess) from a folder holding socket.py,
    sitecustomize.py, a fake mcpower package ...: none of them runs, and every document is read."""
    work = hostile_folder(tmp_path / "project")
    write_files(work / "docs", DOCS)
    launcher = write_launcher(tmp_path)  # the fake model; its own folder is not the working folder
    argv = [sys.executable, str(launcher), "ingest", "docs", "--id", "docs", "--json", "-q"]
    argv += ["--datasets-dir", str(tmp_path / "datasets")]
    done = subprocess.run(argv, cwd=work, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert not (work / MARKER).exists(), (work / MARKER).read_text()
    report = json.loads(done.stdout)
    assert (report["documents"], report["skipped"]) == (3, [])


def test_the_reader_worker_runs_no_code_from_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The library path: a Reader started in a hostile folder (and with it on the caller's module
    path, as `python -c` or `python -m` put it) reads HTML, reST and PDF with mcpower's own code."""
    work = hostile_folder(tmp_path / "project")
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(work))
    monkeypatch.setattr(sys, "path", ["", *sys.path])
    with Reader() as reader:
        texts = [
            reader.read(data if isinstance(data, bytes) else data.encode(), Path(name).suffix).text
            for name, data in DOCS.items()
        ]
    assert not (work / MARKER).exists(), (work / MARKER).read_text()
    assert ["lighthouse keeper" in texts[0], "harbour master" in texts[1], "tide table" in texts[2]] == [True] * 3


def test_python_dash_m_mcpower_takes_no_module_from_the_working_folder(tmp_path: Path) -> None:
    """`python -m mcpower` puts the working folder first on the module path, as any `python -m`
    does; mcpower takes it off before importing anything else (typer, pydantic, socket ...)."""
    work = hostile_folder(tmp_path / "project")
    (work / "mcpower").rename(tmp_path / "not-here")  # `python -m` runs the package it finds first
    argv = [sys.executable, "-m", "mcpower", "datasets", "--json", "--datasets-dir", str(tmp_path / "datasets")]
    done = subprocess.run(argv, cwd=work, env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert not (work / MARKER).exists(), (work / MARKER).read_text()


def _children_named(name: str) -> list[int]:
    """Ids of this process's children whose command is ``name`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # ended meanwhile
            continue
        comm, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
        if comm == name and int(rest[1]) == os.getpid():
            found.append(int(stat.parent.name))
    return found


@needs_milvus
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the engine's environment from /proc")
def test_the_milvus_lite_engine_loads_no_library_from_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """milvus-lite starts its engine in the .db file's folder with LD_LIBRARY_PATH=<lib>:<ours>; with
    ours unset, the empty entry would make the loader look in that folder for libstdc++ and libc."""
    from mcpower.store.milvus.client import connect, disconnect

    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    uri = str(tmp_path / "lite.db")
    client = connect(uri, None)
    try:
        # This file's engine (the session's shared one may be running too).
        [engine] = [e for e in _children_named("milvus") if uri.encode() in Path(f"/proc/{e}/cmdline").read_bytes()]
        environ = Path(f"/proc/{engine}/environ").read_bytes().split(b"\0")
        [path] = [v.split(b"=", 1)[1] for v in environ if v.startswith(b"LD_LIBRARY_PATH=")]
        assert path.split(b":") and all(os.path.isabs(entry) for entry in path.split(b":")), path
    finally:
        disconnect(client, uri)
    assert "LD_LIBRARY_PATH" not in os.environ  # ours is as it was


def _model_folder(folder: Path) -> Path:
    """A folder that looks like a sentence-transformers model to resolve_model."""
    return write_files(folder, {"config.json": json.dumps({"hidden_size": 8}), "tokenizer.json": "{}"})


def test_a_model_name_is_never_taken_from_a_folder_of_that_name_in_the_working_folder(tmp_path: Path) -> None:
    """`bge-small` or `org/model` (MCPOWER_MODEL, MCPOWER_ALLOWED_MODELS, --model) is a Hugging Face
    name: a folder of the working folder so named is not loaded; `./org/model` names that folder."""
    _model_folder(Path("org/model"))  # conftest: the working folder is tmp_path/cwd
    _model_folder(Path("bge-small"))
    for name in ("org/model", "bge-small"):
        with pytest.raises(EmbeddingModelError, match=rf"not available offline \(for the folder here, say \./{name}\)"):
            resolve_model(name)
    spec = resolve_model("./org/model")
    assert spec.name == str(Path("org/model").resolve())  # recorded absolute: any later cwd finds it
    assert resolve_model(spec.name).fingerprint == spec.fingerprint


def test_allowed_model_names_stay_names_and_folders_become_absolute(monkeypatch: pytest.MonkeyPatch) -> None:
    _model_folder(Path("org/model"))
    monkeypatch.setenv("MCPOWER_ALLOWED_MODELS", "org/model, ./org/model")
    monkeypatch.setenv("MCPOWER_MODEL", "bge-small")
    assert Settings.load().query_models() == ["org/model", str(Path("org/model").resolve()), "bge-small"]
