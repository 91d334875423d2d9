"""The Milvus store on milvus-lite, for real: publishing, crash safety, the lease, filters with
hostile values, engine errors, a second reader with only the URI, and the CLI and MCP server over it.
(The shared store contract runs over Milvus in test_store_interface.py.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeEmbedder, write_files
from milvus_fixtures import fresh_db, needs_milvus
from server_fixtures import StdioServer, subprocess_env, write_launcher
from typer.testing import CliRunner

from mcpower.cli.app import app
from mcpower.errors import (
    DatasetLockedError,
    DatasetUnavailableError,
    EngineUnavailableError,
    InvalidManifestError,
)
from mcpower.ingestion import IngestOptions, ingest
from mcpower.registry import Registry
from mcpower.results import SearchFilters
from mcpower.search import get_source, search

pytestmark = needs_milvus

HOSTILE = {
    'quo"te/a.md': "# A\n\nalpha zephyrine\n",
    "back\\slash/b.md": "# B\n\nbravo zephyrine\n",
    "pct%dir/c.md": "# C\n\ncharlie zephyrine\n",
    "pctXdir/c.md": "# C2\n\ncharlie zephyrine decoy\n",
    "under_score/d.md": "# D\n\ndelta zephyrine\n",
    "underXscore/d.md": "# D2\n\ndelta zephyrine decoy\n",
    "caf\u00e9 \u4e2d\u6587/e.md": "# E\n\necho zephyrine\n",
    "x' or 'a'=='a/f.md": "# F\n\nfoxtrot zephyrine\n",
    "new\nline/g.md": "# G\n\ngolf zephyrine\n",
}


def registry_of(catalog: Any) -> Registry:
    return Registry(catalogs=[catalog], embedder_factory=lambda model: FakeEmbedder())


def test_hostile_folder_and_path_filters_match_as_in_the_local_store(milvus_catalog: Any, tmp_path: Path) -> None:
    src = write_files(tmp_path / "hostile", HOSTILE)
    ingest(src, milvus_catalog, IngestOptions(dataset_id="h"), embedder=FakeEmbedder())
    ingest(src, tmp_path / "datasets", IngestOptions(dataset_id="h"), embedder=FakeEmbedder())
    milvus, local = (
        registry_of(milvus_catalog),
        Registry(tmp_path / "datasets", embedder_factory=lambda m: FakeEmbedder()),
    )

    def paths(registry: Registry, where: SearchFilters) -> list[str]:
        return sorted(r.path for r in search(registry, "zephyrine", dataset="h", top_k=20, filters=where).results)

    filters = [SearchFilters(file_type='.m"d'), SearchFilters(folder="pct%dir", file_type="md")]
    for rel in HOSTILE:
        folder = rel.partition("/")[0]
        filters += [SearchFilters(folder=folder), SearchFilters(path=rel), SearchFilters(folder=folder[:3] + "%")]
    for where in filters:
        assert paths(milvus, where) == paths(local, where), where
    # Exact where the value can be typed (a backslash in a filter is a folder separator, in both stores).
    for rel in (r for r in HOSTILE if "\\" not in r):
        assert paths(milvus, SearchFilters(folder=rel.partition("/")[0])) == [rel]
        assert paths(milvus, SearchFilters(path=rel)) == [rel]


def test_a_failed_publish_leaves_the_previous_version_serving(
    milvus_catalog: Any, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingest(corpus, milvus_catalog, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    registry = registry_of(milvus_catalog)
    before = search(registry, "zephyrine", dataset="docs").results
    client = milvus_catalog.client()
    collections = sorted(client.list_collections())
    real_insert = client.insert

    def dying_insert(name: str, **kw: Any) -> Any:
        if name.endswith("_docs"):
            raise KeyboardInterrupt  # Ctrl-C in the middle of the publish
        return real_insert(name, **kw)

    monkeypatch.setattr(client, "insert", dying_insert)
    with pytest.raises(KeyboardInterrupt):
        ingest(corpus, milvus_catalog, IngestOptions(dataset_id="docs", full=True), embedder=FakeEmbedder())
    monkeypatch.undo()

    assert sorted(client.list_collections()) == collections  # the half-built version is gone
    assert [r.result_id for r in search(registry, "zephyrine", dataset="docs").results] == [r.result_id for r in before]


def test_a_killed_ingest_leaves_collections_the_next_one_drops(milvus_catalog: Any, corpus: Path) -> None:
    ingest(corpus, milvus_catalog, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    client = milvus_catalog.client()
    import pymilvus

    from mcpower.store.milvus.schema import chunks_schema, collection_names

    orphan, _ = collection_names("docs", 7)  # what a kill -9 mid-publish leaves: unreferenced
    schema, index = chunks_schema(pymilvus, FakeEmbedder().dimension)
    client.create_collection(orphan, schema=schema, index_params=index)
    registry = registry_of(milvus_catalog)

    assert search(registry, "zephyrine", dataset="docs").results  # the pointer still names v1
    report = ingest(corpus, milvus_catalog, IngestOptions(dataset_id="docs", full=True), embedder=FakeEmbedder())

    names = client.list_collections()
    assert orphan not in names
    # The new version, and the one before it (kept for servers still reading it, until the next ingest).
    assert sorted(n for n in names if n.startswith("mcpower_docs__")) == [
        "mcpower_docs__v1_chunks",
        "mcpower_docs__v1_docs",
        "mcpower_docs__v2_chunks",
        "mcpower_docs__v2_docs",
    ]
    assert report.full_rebuild and search(registry, "zephyrine", dataset="docs").results


def test_the_lease_names_its_holder_and_expires(milvus_db: str, milvus_catalog: Any, corpus: Path) -> None:
    from mcpower.store.milvus import MilvusCatalog

    other = MilvusCatalog(milvus_db, settle_seconds=0, lease_seconds=3600)
    with other.lock("docs"):
        with pytest.raises(DatasetLockedError) as err:
            ingest(corpus, milvus_catalog, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
        assert "is being ingested by" in err.value.message and "--wait" in err.value.message

    expired = MilvusCatalog(milvus_db, settle_seconds=0, lease_seconds=-1)  # a writer that died long ago
    with expired.lock("docs"):
        pass
    milvus_catalog._put("lease:docs", "lease", {"owner": "dead:1:x", "expires_ms": 0})
    report = ingest(corpus, milvus_catalog, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    assert report.chunks > 0


def test_a_second_reader_with_only_the_uri_lists_and_serves(milvus_db: str, milvus_catalog: Any, corpus: Path) -> None:
    from mcpower.store.milvus import MilvusCatalog

    ingest(corpus, milvus_catalog, IngestOptions(dataset_id="docs", description="shared"), embedder=FakeEmbedder())
    registry = registry_of(MilvusCatalog(milvus_db, refresh_seconds=0))

    [entry] = registry.entries()
    assert entry.info is not None and entry.info.description == "shared" and entry.info.counts.documents == 5
    top = search(registry, "zephyrine daemon", dataset="docs").results[0]
    assert "zephyrine" in get_source(registry, top.result_id, "chunk").content
    doc = registry.store("docs").document("guide/install.md")
    assert doc is not None and doc.content == (corpus / "guide/install.md").read_text()
    rst = registry.store("docs").document("intro.rst")  # reST is stored as the text docutils renders
    assert rst is not None and rst.content.startswith("# Introduction\n")


def test_schema_of_another_version_and_a_dropped_collection_are_coded_errors(milvus_catalog: Any, corpus: Path) -> None:
    ingest(corpus, milvus_catalog, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    ingest(corpus, milvus_catalog, IngestOptions(dataset_id="other"), embedder=FakeEmbedder())
    registry = registry_of(milvus_catalog)
    assert search(registry, "zephyrine", dataset="other").results
    value = milvus_catalog._get("dataset:docs")
    milvus_catalog._put("dataset:docs", "dataset", {**value, "schema": 99})

    by_id = {e.id: e for e in registry.scan()}
    assert isinstance(by_id["docs"].error, InvalidManifestError)
    assert "another mcpower version" in by_id["docs"].error.message
    assert by_id["other"].status == "ready"

    ingest(corpus, milvus_catalog, IngestOptions(dataset_id="third"), embedder=FakeEmbedder())
    assert search(registry, "zephyrine", dataset="third").results  # loaded, as in a running server
    milvus_catalog.client().drop_collection(milvus_catalog._get("dataset:other")["chunks"])
    with pytest.raises(DatasetUnavailableError) as err:
        search(registry, "zephyrine", dataset="other")
    assert err.value.code in ("DATASET_UNAVAILABLE", "INDEX_MISMATCH")
    assert "milvus:other" in err.value.message or "gone" in err.value.message
    assert search(registry, "zephyrine", dataset="third").results  # the others are unaffected
    ingest(corpus, milvus_catalog, IngestOptions(dataset_id="other"), embedder=FakeEmbedder())
    assert search(registry, "zephyrine", dataset="other").results  # re-ingested: served again


HOLDER = """
import sys
from mcpower.store.milvus import MilvusCatalog
catalog = MilvusCatalog(sys.argv[1])
catalog.client()  # this process's engine now holds the file
print("holding", flush=True)
sys.stdin.read()  # until the test closes our stdin
catalog.close()  # the engine process stops and lets go of the file
"""


def test_a_server_survives_the_engine_going_away_and_recovers_when_it_is_back(tmp_path: Path, corpus: Path) -> None:
    """The engine of a running server stops, and another process holds the file (the engine stays
    unreachable); local datasets keep answering; when the file is free again, the next search
    connects anew and the Milvus dataset answers, with no restart of the registry."""
    from mcpower.store.milvus import MilvusCatalog

    with warnings.catch_warnings():  # milvus-lite 2.5 imports pkg_resources, deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        from milvus_lite.server_manager import server_manager_instance

    db = fresh_db(tmp_path)
    catalog = MilvusCatalog(db, refresh_seconds=0, settle_seconds=0)
    ingest(corpus, catalog, IngestOptions(dataset_id="shared"), embedder=FakeEmbedder())
    ingest(corpus, tmp_path / "datasets", IngestOptions(dataset_id="mine"), embedder=FakeEmbedder())
    registry = Registry(tmp_path / "datasets", catalogs=[catalog], embedder_factory=lambda model: FakeEmbedder())
    before = [r.result_id for r in search(registry, "zephyrine daemon", dataset="shared").results]
    assert before

    server_manager_instance.release_server(db)  # the engine stops under the server's connection
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, db],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
    )
    try:
        assert holder.stdout is not None and "holding" in holder.stdout.readline()
        for _ in range(2):  # the engine gone, then the file held by another process: unreachable both times
            with pytest.raises(EngineUnavailableError) as err:
                search(registry, "zephyrine daemon", dataset="shared")
            assert err.value.code == "ENGINE_UNAVAILABLE" and str(tmp_path) not in err.value.message
            assert search(registry, "zephyrine daemon", dataset="mine").results  # local datasets answer
        everything = search(registry, "zephyrine daemon")
        assert {r.dataset for r in everything.results} == {"mine"} and everything.meta.notes
        assert {e.id: e.status for e in registry.scan()}["mine"] == "ready"
    finally:
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdin.close()
        holder.wait(60)
        holder.stdout.close()
    assert holder.returncode == 0

    after = search(registry, "zephyrine daemon", dataset="shared").results  # the same registry, recovered
    assert [r.result_id for r in after] == before
    assert {e.id: e.status for e in registry.scan()} == {"mine": "ready", "shared": "ready"}
    catalog.close()


def test_an_unreachable_engine_is_one_error_row_and_a_coded_error() -> None:
    from mcpower.store.milvus import MilvusCatalog

    catalog = MilvusCatalog("http://127.0.0.1:1")
    registry = registry_of(catalog)

    [entry] = registry.entries()
    assert isinstance(entry.error, EngineUnavailableError) and entry.error.code == "ENGINE_UNAVAILABLE"
    assert "unreachable" in entry.error.message and "127.0.0.1:1" in entry.error.message
    response = search(registry, "anything")  # every dataset: an answer with a note, not an exception
    assert response.results == [] and "could not be loaded" in " ".join(response.meta.notes)


def test_ingest_into_an_unreachable_engine_fails_plainly(corpus: Path) -> None:
    from mcpower.store.milvus import MilvusCatalog

    with pytest.raises(EngineUnavailableError) as err:
        ingest(corpus, MilvusCatalog("http://127.0.0.1:1"), IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())
    assert "unreachable" in err.value.message


def test_without_the_extra_the_error_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pymilvus", None)  # import fails, as when it is not installed
    result = CliRunner().invoke(app, ["datasets", "--milvus-uri", str(tmp_path / "x.db"), "--datasets-dir", "d"])

    assert result.exit_code == 0, result.output
    assert "pip install 'mcpower[milvus]'" in result.stdout
    assert "Traceback" not in result.output


def test_pymilvus_is_imported_only_when_a_milvus_uri_is_used(tmp_path: Path) -> None:
    code = (
        "import sys, runpy; sys.argv = ['mcpower', *sys.argv[1:]]\n"
        "try: runpy.run_module('mcpower', run_name='__main__')\n"
        "except SystemExit: pass\n"
        "print('PYMILVUS', 'pymilvus' in sys.modules)"
    )
    env = subprocess_env()

    def loaded(*args: str) -> bool:
        out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=True)
        return out.stdout.strip().splitlines()[-1] == "PYMILVUS True"

    assert not loaded("datasets", "--datasets-dir", str(tmp_path))
    assert loaded("datasets", "--datasets-dir", str(tmp_path), "--milvus-uri", "http://127.0.0.1:1")


def test_cli_and_stdio_server_over_local_and_milvus_datasets(tmp_path: Path, corpus: Path) -> None:
    """ingest / datasets / validate / search in one process, then `serve --stdio` in another
    (the .db file is one process's at a time): local and Milvus datasets served together."""
    launcher = write_launcher(tmp_path)
    db = str(tmp_path / "cli.db")
    local = tmp_path / "datasets"
    env = {**subprocess_env(), "MCPOWER_MILVUS_URI": db}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, str(launcher), *args, "--datasets-dir", str(local)]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)

    made = run("ingest", str(corpus), "--id", "shared", "--json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["chunks"] > 0 and not (local / "shared").exists()
    ingest(corpus, local, IngestOptions(dataset_id="mine"), embedder=FakeEmbedder())
    listed = json.loads(run("datasets", "--json").stdout)["datasets"]
    assert {d["id"]: d["status"] for d in listed} == {"mine": "ready", "shared": "ready"}
    assert run("validate").returncode == 0
    found = json.loads(run("search", "shared", "zephyrine daemon", "--json", "--folder", "guide").stdout)
    assert found["results"] and all(r["path"].startswith("guide/") for r in found["results"])

    server = StdioServer([sys.executable, str(launcher), "serve", "--stdio", "--datasets-dir", str(local)], env=env)
    try:
        server.initialize()
        listed = server.call_tool("knowledge_list_datasets", {})["structuredContent"]["datasets"]
        hits = server.call_tool("knowledge_search", {"query": "marmalade session"})["structuredContent"]
        server.close_stdin()
        server.wait_exit(30)
    finally:
        server.stop()
    assert sorted(d["id"] for d in listed) == ["mine", "shared"]
    assert sorted(hits["meta"]["datasets"]) == ["mine", "shared"]
    for line in server.stdout_lines:  # nothing but JSON-RPC on stdout, milvus-lite's engine included
        assert json.loads(line)["jsonrpc"] == "2.0"


def test_pdf_pages_are_kept_by_milvus_through_a_re_ingest(milvus_catalog: Any, tmp_path: Path) -> None:
    import format_fixtures as ff

    src = write_files(
        tmp_path / "pdfs",
        {
            "manual.pdf": ff.pdf([["Lumenator manual."], ["Maintenance."], ["Calibrate the zephyrine lens monthly."]]),
            "notes.md": "# Notes\n\nnothing here\n",
        },
    )
    ingest(src, milvus_catalog, IngestOptions(dataset_id="p"), embedder=FakeEmbedder())
    (src / "notes.md").write_text("# Notes\n\nchanged\n")
    again = ingest(src, milvus_catalog, IngestOptions(dataset_id="p"), embedder=FakeEmbedder())
    registry = registry_of(milvus_catalog)

    hit = search(registry, "zephyrine lens", dataset="p", top_k=1).results[0]
    source = get_source(registry, hit.result_id)

    assert again.unchanged == 1  # the PDF's chunks were carried over from the engine, with their pages
    assert hit.path == "manual.pdf" and hit.pages is not None and (hit.pages.start, hit.pages.end) == (1, 3)
    assert source.pages is not None and source.pages.end == 3


# ------------------------------------------------------------ a lite file: missing, held, its logs


def one_error_line(result: Any, *fragments: str) -> str:
    assert result.exit_code == 1, result.output
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("Error: ") and "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in line, line
    return str(line)


@pytest.mark.parametrize(
    "command",
    [["search", "docs", "zephyrine"], ["datasets"], ["validate"], ["eval", "docs", "--queries", "q", "--qrels", "r"]],
)
def test_a_read_command_never_creates_a_lite_file(command: list[str], tmp_path: Path) -> None:
    """`--milvus-uri ./m.db` from a folder without it made milvus-lite create an empty m.db there,
    and answered "unknown dataset": now one error names the file and what creates it."""
    args = [*command, "--milvus-uri", "./m.db", "--datasets-dir", str(tmp_path / "datasets")]
    result = CliRunner().invoke(app, args)

    one_error_line(result, f"{Path('m.db').resolve()} does not exist", "mcpower ingest PATH --milvus-uri")
    assert sorted(p.name for p in Path.cwd().iterdir()) == []  # no m.db, no .m.db.lock


def test_serve_without_its_lite_file_serves_the_rest_and_uses_it_once_ingested(tmp_path: Path, corpus: Path) -> None:
    """A server is not refused: it serves the local datasets, logs that the file does not exist, lists
    it as an error row (by its name only), creates nothing, and serves it once an ingest made it."""
    launcher = write_launcher(tmp_path)
    db, local = tmp_path / "shared" / "team.db", tmp_path / "datasets"
    db.parent.mkdir()
    ingest(corpus, local, IngestOptions(dataset_id="mine"), embedder=FakeEmbedder())
    env = {**subprocess_env(), "MCPOWER_MILVUS_URI": str(db)}
    server = StdioServer([sys.executable, str(launcher), "serve", "--stdio", "--datasets-dir", str(local)], env=env)
    try:
        server.initialize()
        warned = server.wait_log("server.milvus_missing")
        before = server.call_tool("knowledge_list_datasets", {})["structuredContent"]["datasets"]
        unknown = server.call_tool("knowledge_search", {"query": "zephyrine", "dataset": "shared"})
        created = db.exists()
        made = subprocess.run(
            [sys.executable, str(launcher), "ingest", str(corpus), "--id", "shared", "--datasets-dir", str(local)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        after = server.call_tool("knowledge_list_datasets", {})["structuredContent"]["datasets"]
        server.close_stdin()
        server.wait_exit(30)
    finally:
        server.stop()
    assert warned is not None and str(db) in warned["message"]
    assert not created and made.returncode == 0, made.stderr
    rows = {d["id"]: d for d in before}
    assert rows["mine"]["status"] == "ready" and "team.db does not exist" in rows["milvus@team.db"]["error"]
    message = unknown["structuredContent"]["error"]["message"]
    assert unknown["isError"] and "unknown dataset 'shared'" in message and "team.db does not exist" in message
    assert str(tmp_path) not in json.dumps([before, unknown])  # clients never see absolute paths
    assert {d["id"]: d["status"] for d in after} == {"mine": "ready", "shared": "ready"}


def test_a_search_while_another_process_holds_the_file_says_so(tmp_path: Path, corpus: Path) -> None:
    """`search x --milvus-uri m.db` while a server holds m.db said only "unknown dataset 'x'"; the
    reason (shown by `datasets` alone) is now in search's, eval's and validate's answers too."""
    from mcpower.store.milvus import MilvusCatalog

    db = fresh_db(tmp_path)
    catalog = MilvusCatalog(db)
    ingest(corpus, catalog, IngestOptions(dataset_id="shared"), embedder=FakeEmbedder())
    catalog.close()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, db],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
    )
    args = ["--milvus-uri", db, "--datasets-dir", str(tmp_path / "datasets")]
    try:
        assert holder.stdout is not None and "holding" in holder.stdout.readline()
        runner = CliRunner()
        found = runner.invoke(app, ["search", "shared", "zephyrine", "--mode", "keyword", *args])
        evaluated = runner.invoke(app, ["eval", "shared", "--queries", "q", "--qrels", "r", *args])
        checked = runner.invoke(app, ["validate", "shared", *args])
    finally:
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdin.close()
        holder.wait(60)
        holder.stdout.close()
    for result in (found, evaluated):
        line = one_error_line(result, "unknown dataset 'shared'", f"the file is open in another process, {holder.pid}")
        assert "available datasets: none;" in line and "milvus@" not in line  # the engine is not a dataset
    assert checked.exit_code == 1 and "open in another process" in checked.stdout, checked.output


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc stands for a temp folder nobody can write")
def test_the_engine_logs_go_to_the_cache_folder_never_the_working_folder(tmp_path: Path, corpus: Path) -> None:
    """milvus-lite's engine (glog) writes milvus.INFO, milvus.WARNING and *.log.* files at every start
    into $TMPDIR, and where it cannot write there into its working folder: the .db file's folder,
    here the user's. They go to the cache folder's milvus-logs, the oldest pruned."""
    from mcpower.store.milvus.client import LOGS_KEPT

    launcher = write_launcher(tmp_path)
    work, logs = tmp_path / "project", tmp_path / "cache" / "mcpower" / "milvus-logs"  # conftest's XDG_CACHE_HOME
    work.mkdir()
    logs.mkdir(parents=True)
    for n in range(LOGS_KEPT + 20):  # earlier starts' files, the oldest first
        old = logs / f"milvus.host.user.log.INFO.old-{n:03d}"
        old.write_text("old\n")
        os.utime(old, (1_000_000 + n, 1_000_000 + n))
    env = {**subprocess_env(), "TMPDIR": "/proc"}
    for args in (["ingest", str(corpus), "--id", "shared"], ["search", "shared", "zephyrine", "--mode", "keyword"]):
        argv = [sys.executable, str(launcher), *args, "--milvus-uri", "./m.db", "--datasets-dir", str(tmp_path / "d")]
        done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        assert "LOGGINGFILE" not in done.stderr
    assert sorted(p.name for p in work.iterdir()) in (["m.db"], [".m.db.lock", "m.db"])
    files = [p for p in logs.iterdir() if not p.is_symlink()]
    assert any(p.name.startswith("milvus.") and ".log.INFO." in p.name and "old" not in p.name for p in files)
    assert len(files) <= LOGS_KEPT + 3 and not (logs / "milvus.host.user.log.INFO.old-000").exists()


def test_milvus_lite_files_are_ignored_by_git() -> None:
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    names = ["team.db", "sub/.team.db.lock"]
    done = subprocess.run(["git", "check-ignore", "--no-index", *names], cwd=root, capture_output=True, text=True)
    assert done.stdout.split() == names, done.stderr
