"""Developer tasks: `nox` runs the tests; `nox -s lint typecheck slow bench` for the rest."""

from __future__ import annotations

import os

import nox

nox.options.sessions = ["tests"]
nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True

# The CPU build of torch lies on these machines; installing it first keeps pip from pulling
# the multi-GB CUDA build in as a dependency of sentence-transformers.
TORCH = "torch==2.13.0"
# The default suite's processes (pytest-xdist): two even on one core, as much of the suite waits on the
# subprocesses it starts (servers, CLIs, Node clients, a browser); at most four, each holding a
# milvus-lite engine and a browser of its own.
WORKERS = str(min(4, max(2, os.cpu_count() or 1)))


def _install(session: nox.Session, *extras: str) -> None:
    session.install(TORCH)
    session.install("-e", f".[{','.join(extras)}]" if extras else ".")


@nox.session
def tests(session: nox.Session) -> None:
    """Run the default test suite (fake embedder; no real model except where marked), Milvus
    (milvus-lite) included."""
    _install(session, "test", "milvus")
    # pytest-xdist: a test file's tests run in one worker (module-scoped fixtures are built once);
    # `nox -s tests -- -n 0` runs them in this process.
    session.run("pytest", "-n", WORKERS, "--dist", "loadfile", *session.posargs)


@nox.session
def slow(session: nox.Session) -> None:
    """Run the slow tests: the real packaged model, real corpora, the Node MCP client."""
    _install(session, "test", "milvus")
    session.run("pytest", "-m", "slow or node", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """Check style with ruff (lint and format)."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """Type-check the package (mypy --strict) and the benchmarks against it."""
    _install(session, "lint", "milvus")
    session.run("mypy")
    session.run("mypy", "benchmarks")


@nox.session
def bench(session: nox.Session) -> None:
    """Run the benchmarks (quality, ingest, search latency, server start); prints a table, writes JSON."""
    _install(session, "test", "milvus")
    session.run("python", "benchmarks/run.py", *session.posargs)
