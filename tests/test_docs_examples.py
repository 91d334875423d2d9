"""The examples in the docs run as printed: each fenced Python block marked ``<!-- example: run -->``
on the line before it is run against a real `serve --http` (fake embedder; `KB_URL` and `MCPOWER_CLIENT_TOKEN`
set as the docs tell a reader to). A Python block that cannot run here says why in
``<!-- example: skip REASON -->``; an unmarked one fails the test, so no new example goes untested.
Every JSON block parses as JSON (one marked ``<!-- example: fragment -->`` is a member of an
object, ``"key": value``, and parses inside braces), or says why not in ``<!-- example: skip REASON -->``.

Every shell block (bash, sh, console, shell) is marked too. One marked ``<!-- example: run -->`` is
run, command by command, in one folder shared by all of them (a copy of this repository's docs/,
the fake embedder standing in for the model, ``sys.executable`` for ``mcpower``), in the order the
docs give them; each must exit 0, and what the docs say of the output is checked (``--json`` prints
JSON; ``--path``/``--type`` keep to that document/type; ``--print-config`` prints a client config).
A ``serve`` that listens (not ``--print-config``) is parsed, not started, in a run block: the docs'
servers bind fixed ports (8765, 0.0.0.0), which a test must not; the server tests run them on port 0.
A block that cannot run here (a network, pip, a client's CLI, a Milvus server, a folder of your own)
says why in ``<!-- example: skip REASON -->``. In every block, each ``mcpower …`` command line parses
against the real CLI (each subcommand and option exists, with its arguments and valid choices;
nothing runs), each ``python benchmarks/X.py --opt`` names a script that exists and options it
declares, and each ``nox -s NAME`` a session of noxfile.py."""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from http_fixtures import TOKEN, HttpServer, write_http_launcher
from server_fixtures import REPO_ROOT, build_datasets, subprocess_env, write_launcher

DOCS = sorted([REPO_ROOT / "README.md", *(REPO_ROOT / "docs").glob("*.md")])
# A fence opening, with the marker line (if any) just before it.
BLOCK = re.compile(r"(?:<!-- example: (run|fragment|skip [^>]+?) -->\n)?```(\w+)\n(.*?)\n```", re.S)


SHELLS = ("bash", "sh", "console", "shell")


def blocks(*languages: str) -> list[tuple[str, str, str]]:
    """(where, marker or '', code) of every block in one of ``languages`` in the docs."""
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for m in BLOCK.finditer(text):
            if m.group(2) in languages:
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


# ---------------------------------------------------------------- shell blocks


def commands(code: str) -> list[list[str]]:
    """Each command of a shell block as its words: continuation lines joined, comments dropped, a
    line split at ``&&``, ``||``, ``;`` and ``|``, leading ``VAR=value`` assignments left out."""
    out = []
    for line in code.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        words: list[str] = []
        for word in [*lexer, ";"]:
            if word and set(word) <= set(";&|"):
                while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
                    words.pop(0)
                if words:
                    out.append(words)
                words = []
            else:
                words.append(word)
    return out


def is_mcpower(program: str) -> bool:
    return Path(program).name == "mcpower"


@functools.cache
def cli() -> Any:
    """The whole CLI as a click command, built once (typer builds it anew on each call: ~50 ms)."""
    import typer.main

    from mcpower.cli.app import app

    return typer.main.get_command(app)


def parse_cli(argv: list[str]) -> str:
    """Parses ``mcpower ARGV`` as the real CLI would, without running it; the command's path.
    Raises the CLI's usage error (no such command or option, a missing argument, a bad choice)."""
    command = cli()
    ctx = command.make_context("mcpower", list(argv))
    while hasattr(command, "resolve_command"):  # a group: on to its subcommand
        rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
        name, command, rest = command.resolve_command(ctx, rest)
        assert command is not None and name is not None
        ctx = command.make_context(name, rest, parent=ctx)
    return str(ctx.command_path)


def check_command(where: str, words: list[str]) -> None:
    """What can be checked of a command without running it: see the module's docstring."""
    program, args = words[0], words[1:]
    if is_mcpower(program):
        try:
            parse_cli(args)
        except Exception as e:  # the CLI's usage errors (click's, vendored by typer)
            message = e.format_message() if hasattr(e, "format_message") else str(e)
            raise AssertionError(f"{where}: `{shlex.join(words)}` does not parse: {message}") from None
    elif Path(program).name.startswith("python") and args and args[0].startswith("benchmarks/"):
        script = REPO_ROOT / args[0]
        assert script.is_file(), f"{where}: no {args[0]}"
        source = script.read_text(encoding="utf-8")
        own = args[1 : args.index("--")] if "--" in args else args[1:]  # after `--`: another script's
        for option in (w.strip("[]").split("=")[0] for w in own if w.strip("[").startswith("--")):
            assert f'"{option}"' in source, f"{where}: {args[0]} has no option {option}"
    elif program == "nox" and "-s" in args:
        session = args[args.index("-s") + 1]
        noxfile = (REPO_ROOT / "noxfile.py").read_text(encoding="utf-8")
        assert re.search(rf"def {re.escape(session)}\(", noxfile), f"{where}: noxfile.py has no session {session}"


def test_every_shell_example_is_run_or_says_why_not_and_its_commands_parse() -> None:
    shell = blocks(*SHELLS)
    assert len(shell) > 30, "the docs' shell examples"
    unmarked = [where for where, marker, _ in shell if not marker]
    assert not unmarked, f"mark these <!-- example: run --> or <!-- example: skip REASON -->: {unmarked}"
    checked = 0
    for where, marker, code in shell:
        assert marker == "run" or (marker.startswith("skip ") and len(marker) > len("skip ") + 10), (
            f"{where}: say why it cannot run here"
        )
        for words in commands(code):
            check_command(where, words)
            checked += is_mcpower(words[0])
            if marker == "run":
                assert is_mcpower(words[0]), f"{where}: a run block runs mcpower only, not {words[0]}"
    assert checked > 60, "the docs' mcpower command lines"


def test_the_command_checks_catch_a_wrong_example() -> None:
    """The checks above can fail: a misspelt option, a missing argument, a bad choice, an unknown
    script option."""
    for wrong in (
        "mcpower search docs q --modee keyword",
        "mcpower search docs q --mode fuzzy",
        "mcpower token addd alice",
        "mcpower ingest",
        "python benchmarks/run.py --no-such-option",
    ):
        with pytest.raises(AssertionError):
            for words in commands(wrong):
                check_command("here", words)
    assert commands("A=1 mcpower search x 'a b' \\\n  --json && ls | wc  # note") == [
        ["mcpower", "search", "x", "a b", "--json"],
        ["ls"],
        ["wc"],
    ]


def claims(words: list[str], done: subprocess.CompletedProcess[str], rerun: Any) -> None:
    """What the docs say of a command's output."""
    args = words[1:]
    if "--json" in args:
        json.loads(done.stdout)
    if "--print-config" in args:
        assert "mcpServers" in json.loads(done.stdout)
    if args[:1] == ["search"] and ("--path" in args or "--type" in args):
        results = json.loads(rerun([*args, "--json"]).stdout)["results"]
        assert results, "a filtered search that finds something"
        for option, keep in (("--path", lambda r, v: r["path"] == v), ("--type", lambda r, v: r["path"].endswith(v))):
            if option in args:
                value = args[args.index(option) + 1]
                assert all(keep(r, value) for r in results), (option, value, [r["path"] for r in results])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the run blocks share: a copy of docs/ (README's command 1 ingests it), no datasets yet."""
    root = tmp_path_factory.mktemp("shell-examples")
    shutil.copytree(REPO_ROOT / "docs", root / "docs")
    return root


@pytest.mark.slow  # ~15 CLI processes and an ingest of docs/: ~20 s on a quiet machine
def test_shell_examples_run(workdir: Path) -> None:
    """Every run block, in the docs' order (ingest before search), each command exiting 0."""
    launcher = write_launcher(workdir)
    env = {**subprocess_env(), "HOME": str(workdir), "COLUMNS": "100"}

    def run(args: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(launcher), *args], capture_output=True, text=True, env=env, cwd=workdir, timeout=120
        )

    ran = 0
    for where, marker, code in blocks(*SHELLS):
        if marker != "run":
            continue
        for words in commands(code):
            if words[1:2] == ["serve"] and "--print-config" not in words:
                continue  # listens on a fixed port: parsed by the test above
            done = run(words[1:])
            assert done.returncode == 0, (
                f"{where}: `{shlex.join(words)}` exit {done.returncode}:\n{done.stderr[-3000:]}"
            )
            claims(words, done, run)
            ran += 1
    assert ran >= 10, "the run blocks' commands"
    assert os.path.isdir(workdir / "datasets" / "docs")
