"""Two distinguishable versions of one corpus, and an ingest runner that can be killed anywhere.

Every chunk of version ``v1`` holds the word ``alphaversion`` and every chunk of ``v2`` the word
``betaversion`` (titles included), so a search answer can be attributed to exactly one version: a
torn read, mixing the two, shows up as a "mixed" answer. Shared by tests/test_crash.py,
tests/test_load.py and benchmarks/load.py.

``IngestForkServer`` starts one Python process that imports mcpower, numpy and FAISS once, then
forks a child per ingest: each child runs the real `mcpower ingest` command (with a slowed-down fake
embedder), and the parent kills it with a signal after a delay, or the child kills itself just
before its k-th file-system step. Paying the interpreter start-up once lets a test place dozens of
kill points across an ingest that lasts a fraction of a second.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent

MARKERS = {"v1": "alphaversion", "v2": "betaversion"}
# Matches every chunk of either version by keyword; the vector side ranks them too.
QUERY = "alphaversion betaversion release widget toolkit"
TOPICS = ["zephyrine daemon", "quokka diagnostics", "marmalade session", "harpsichord tuning", "bramblewood roots"]


def write_versioned_corpus(root: Path, version: str, files: int = 40, sections: int = 4) -> Path:
    """Markdown files whose every section names the version's marker; v2 drops doc000 and adds one more.

    Paragraphs stay far below a chunk, so no chunk can lose the marker to a split.
    """
    marker = MARKERS[version]
    numbers = range(files) if version == "v1" else range(1, files + 1)
    root.mkdir(parents=True, exist_ok=True)
    for n in numbers:
        parts = [f"# Release {marker} document {n}\n"]
        for s in range(sections):
            topic = TOPICS[(n + s) % len(TOPICS)]
            parts.append(
                f"## Section {s} {marker}\n\n"
                f"The {marker} release of the widget toolkit covers the {topic} (document {n}, part {s}).\n"
                f"In {marker} the {topic} settings live in section {s}.\n"
            )
        (root / f"doc{n:03d}.md").write_text("\n".join(parts), encoding="utf-8")
    return root


def version_of(hits: Iterable[Mapping[str, Any]]) -> str:
    """'v1' or 'v2' when every hit (a search result as a dict) comes wholly from that version.

    Otherwise 'empty' (no hits), 'none' (a hit from neither), or 'mixed' (a torn read).
    """
    seen: set[str] = set()
    count = 0
    for hit in hits:
        count += 1
        text = f"{hit.get('title', '')}\n{hit.get('heading_path', '')}\n{hit.get('snippet', '')}".lower()
        found = {v for v, m in MARKERS.items() if m in text}
        if len(found) != 1 or MARKERS[next(iter(found))] not in str(hit.get("title", "")).lower():
            return "mixed" if len(found) > 1 else "none"
        seen |= found
    if count == 0:
        return "empty"
    return seen.pop() if len(seen) == 1 else "mixed"


# ---------------------------------------------------------------- a fork server for killable ingests

FORK_SERVER = """\
import json, os, select, signal, sys, time

sys.path[:0] = {paths!r}
from conftest import FakeEmbedder

import faiss, numpy, sqlite3, tqdm  # everything the child would import lazily
import mcpower.cli, mcpower.cli.app, mcpower.ingestion, mcpower.layout, mcpower.store.local.build, mcpower.store.local.catalog
import mcpower.cli.ingest, mcpower.model_choice, mcpower.plan, mcpower.duplicates, mcpower.embedding.store
from mcpower import embedding
from mcpower.analysis import detection

# The language model (fastText, no threads of its own) loaded once here, not in every child.
detection.detect("The widget toolkit release notes describe every setting of the daemon.")


class SlowFakeEmbedder(FakeEmbedder):
    # Embeds in small batches with a pause each, like a real model, so kills land mid-embedding too.
    def embed_documents(self, texts, progress=None):
        out = []
        for i in range(0, len(texts), 8):
            time.sleep(float(os.environ.get("MCPOWER_TEST_EMBED_DELAY", "0.004")))
            out.append(super().embed_documents(texts[i : i + 8]))
            if progress:
                progress(len(texts[i : i + 8]))
        return numpy.vstack(out) if out else numpy.zeros((0, self.dimension), dtype=numpy.float32)


embedding.load_embedder = lambda model=None, backend=None, cache_dir=None: SlowFakeEmbedder()

# File-system steps of an ingest, by (module, attribute): a child can die just before any of them.
STEPS = [
    (mcpower.store.local.build, "write_metadata"),
    (mcpower.store.local.build, "write_vectors"),
    (mcpower.store.local.build, "fsync_path"),
    (mcpower.layout, "fsync_path"),
    (mcpower.layout, "write_manifest"),
    (mcpower.layout, "prune_versions"),
    (mcpower.layout, "clean_leftovers"),
    (mcpower.store.local.catalog, "clean_leftovers"),
    (os, "rename"),
    (os, "replace"),
    (os, "fsync"),
    (os, "mkdir"),
]


def hook_steps(kill_at, log):
    count = [0]
    for module, name in STEPS:
        original = getattr(module, name)

        def step(*args, _original=original, _name=name, **kwargs):
            count[0] += 1
            log.append(_name)
            if count[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return _original(*args, **kwargs)

        setattr(module, name, step)


def watch_embeds(request):
    # A line per embedding call with the number of chunks it embedded; the signal at call k, sent
    # before it embeds anything (the kernel delivers it before kill() returns).
    log, kill_at = request.get("embed_log"), request.get("kill_at_embed")
    original = SlowFakeEmbedder.embed_documents
    calls = [0]

    def embed_documents(self, texts, progress=None):
        calls[0] += 1
        if calls[0] == kill_at:
            os.kill(os.getpid(), getattr(signal, request.get("signal", "SIGKILL")))
        out = original(self, texts, progress)
        if log:
            with open(log, "a") as f:
                f.write(f"{{len(texts)}}\\n")
        return out

    SlowFakeEmbedder.embed_documents = embed_documents


def child(request):
    out = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.environ.update(request.get("env") or {{}})
    watch_embeds(request)
    if request.get("embed_delay") is not None:
        os.environ["MCPOWER_TEST_EMBED_DELAY"] = str(request["embed_delay"])
    steps = []
    hook_steps(request.get("kill_at_step") or 0, steps)
    sys.argv = ["mcpower", *request["argv"]]
    code = 0
    try:
        try:
            mcpower.cli.main()
        finally:
            # A signal the parent sends once the command has ended is too late to change how it
            # ended: blocked here, it cannot escape the bookkeeping below as exit 99.
            signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGINT, signal.SIGTERM))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except KeyboardInterrupt:
        code = 130
    finally:
        with open(request["steps"], "w") as f:
            json.dump(steps, f)
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


for line in sys.stdin:
    request = json.loads(line)
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        try:
            child(request)
        finally:
            os._exit(99)
    killed = False
    delay = request.get("delay")
    done, status = 0, 0
    if delay is not None:
        fd = os.pidfd_open(pid)
        select.select([fd], [], [], delay)  # returns early if the child ends first
        os.close(fd)
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == 0:
            os.kill(pid, getattr(signal, request.get("signal", "SIGKILL")))
            killed = True
    if done == 0:
        _, status = os.waitpid(pid, 0)
    reply = {{
        "code": os.waitstatus_to_exitcode(status),
        "killed": killed,
        "seconds": time.perf_counter() - started,
    }}
    sys.stdout.write(json.dumps(reply) + "\\n")
    sys.stdout.flush()
"""


@dataclass
class IngestRun:
    """How one forked ingest ended: exit code (negative: killed by that signal), whether we killed it."""

    code: int
    killed: bool
    seconds: float
    steps: list[str]  # the file-system steps the child started, in order (empty if SIGKILLed early)


class IngestForkServer:
    """Runs `mcpower ingest ARGV` in forked children of one warm process (see the module docstring)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        script = workdir / "fork_server.py"
        script.write_text(FORK_SERVER.format(paths=[str(TESTS_DIR), str(REPO_ROOT)]), encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("MCPOWER_")}
        env.pop("PYTHONPATH", None)
        # One thread per library: the server forks, and a fork must not copy a busy thread pool.
        env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        # Started before any test's isolation applies (a module fixture): caches of its own, never the user's.
        env["XDG_CACHE_HOME"] = str(workdir / "cache")
        self.log = workdir / "children.log"
        self._stderr = open(workdir / "fork_server.log", "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, str(script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            text=True,
        )
        self._n = 0

    def run(
        self,
        argv: list[str],
        *,
        delay: float | None = None,
        signal: str = "SIGKILL",
        kill_at_step: int | None = None,
        embed_delay: float | None = None,
        kill_at_embed: int | None = None,
        embed_log: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> IngestRun:
        """Run one ingest; kill it with ``signal`` after ``delay`` seconds, just before step
        ``kill_at_step``, or as its embedder is called for the ``kill_at_embed``-th time. With
        ``embed_log``, each call of the embedder writes a line there: how many chunks it embedded.
        ``env``: variables set in the child."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._n += 1
        steps_file = self.workdir / f"steps-{self._n}.json"
        request = {
            "argv": argv,
            "delay": delay,
            "signal": signal,
            "kill_at_step": kill_at_step,
            "embed_delay": embed_delay,
            "kill_at_embed": kill_at_embed,
            "embed_log": str(embed_log) if embed_log is not None else None,
            "env": env,
            "log": str(self.log),
            "steps": str(steps_file),
        }
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"fork server died: {(self.workdir / 'fork_server.log').read_text(errors='replace')}")
        reply = json.loads(line)
        try:
            steps = json.loads(steps_file.read_text())
        except (OSError, ValueError):  # killed before or while writing it
            steps = []
        steps_file.unlink(missing_ok=True)
        return IngestRun(reply["code"], reply["killed"], reply["seconds"], steps)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()
