"""`mcpower ingest GIT_URL`: repositories the tests make (`git init`, `git clone --bare`, served as
file://) cloned shallow into the cache, re-fetched after a new commit, with git locked down
(issue 29)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import FakeEmbedder
from typer.testing import CliRunner

from mcpower.cli.app import app
from mcpower.errors import IngestError
from mcpower.ingestion import IngestOptions
from mcpower.registry import Registry
from mcpower.search import search
from mcpower.sources import kind_of
from mcpower.sources.citation import file_link
from mcpower.sources.git import check_address
from mcpower.sources.remote import FetchOptions, ingest_source

GIT = ["git", "-c", "user.email=t@example.invalid", "-c", "user.name=t", "-c", "init.defaultBranch=main"]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run([*GIT, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def commit(work: Path, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    git(work, "add", "-A")
    git(work, "commit", "-qm", message)
    return git(work, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, Path]:
    """(a working clone, the bare repository it pushes to)."""
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q")
    commit(
        work,
        {
            "docs/setup.md": "# Setup\n\nThe walrus protocol needs a flux capacitor.\n",
            "src/tool.py": "def walrus():\n    return 1\n",
            "README.md": "# Tool\n\nTop-level readme.\n",
        },
        "first",
    )
    (work / "docs" / "passwd.md").symlink_to("/etc/passwd")
    commit(work, {}, "a link out")
    bare = tmp_path / "repo.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    git(work, "remote", "add", "origin", str(bare))
    return work, bare


def ingest_repo(bare: Path, datasets_dir: Path, tmp_path: Path, emb: FakeEmbedder, **fetch: object):
    return ingest_source(
        bare.as_uri(),
        datasets_dir,
        IngestOptions(dataset_id="gitdocs"),
        FetchOptions(**fetch),  # type: ignore[arg-type]
        tmp_path / "cache",
        embedder=emb,
    )


def test_a_repository_is_ingested_and_a_new_commit_is_found_on_re_ingest(
    repo: tuple[Path, Path], datasets_dir: Path, tmp_path: Path, make_registry: Callable[[], Registry]
) -> None:
    work, bare = repo
    first = ingest_repo(bare, datasets_dir, tmp_path, FakeEmbedder(), subdir="docs/")

    registry = make_registry()
    hit = search(registry, "walrus protocol flux capacitor", "gitdocs").results[0]
    assert hit.path == "setup.md" and hit.url is None  # a file:// repository has no web page
    assert ("passwd.md", "symlink pointing outside the folder (use --follow-symlinks)") in first.skipped
    origin = registry.store("gitdocs").info.source.origin  # type: ignore[union-attr]
    assert origin is not None and origin.kind == "git" and origin.subdir == "docs"
    assert origin.commit == git(bare, "rev-parse", "HEAD") and origin.url == bare.as_uri()

    head = commit(work, {"docs/narwhal.md": "# Narwhals\n\nA narwhal tusk guide for sailors.\n"}, "second")
    git(work, "push", "-q", "origin", "HEAD:main")
    emb = FakeEmbedder()
    second = ingest_repo(bare, datasets_dir, tmp_path, emb, subdir="docs")

    assert second.fetch.previous == origin.commit and second.fetch.commit == head and not second.fetch.cloned
    assert (second.added, second.changed, second.unchanged) == (1, 0, 1)
    assert all("narwhal" in t.lower() for t in emb.embedded)
    registry = make_registry()
    assert search(registry, "narwhal tusk sailors", "gitdocs").results[0].path == "narwhal.md"
    assert registry.store("gitdocs").info.source.origin.commit == head  # type: ignore[union-attr]


def test_the_cli_ingests_a_branch_with_code_and_no_hook_runs(
    repo: tuple[Path, Path], datasets_dir: Path, tmp_path: Path, fake_embedder: FakeEmbedder
) -> None:
    work, bare = repo
    git(work, "checkout", "-q", "-b", "v2")
    commit(work, {"docs/v2.md": "# Version two\n\nOnly on the v2 branch.\n"}, "v2")
    git(work, "push", "-q", "origin", "v2")
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "post-checkout").write_text(f"#!/bin/sh\ntouch {tmp_path}/hook-ran\n")
    (hooks / "post-checkout").chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(f"[core]\n\thooksPath = {hooks}\n")  # a hook the user's own config sets
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "HOME": str(home)}

    result = CliRunner().invoke(
        app,
        ["ingest", bare.as_uri(), "--id", "tool", "--ref", "v2", "--code", "--datasets-dir", str(datasets_dir)],
        env=env,
    )

    assert result.exit_code == 0, result.output
    assert "cloned " in result.stderr and " at " in result.stderr
    paths = {d.path for d in Registry(datasets_dir).store("tool").documents()}
    assert {"docs/v2.md", "src/tool.py", "README.md"} <= paths
    assert not (tmp_path / "hook-ran").exists()


def test_git_addresses_are_checked(tmp_path: Path, datasets_dir: Path) -> None:
    assert kind_of("https://example.com/org/repo.git") == "git"
    assert kind_of("git@example.com:org/repo.git") == "git"
    assert kind_of("https://example.com/docs/") == "web"
    assert kind_of("docs/") is None
    for bad, why in [
        ("https://user:token@example.com/r.git", "password or token"),
        ("ext::sh -c touch% /tmp/x", "not a URL"),
        ("ftp://example.com/r.git", "not fetched"),
    ]:
        with pytest.raises(IngestError, match=why):
            check_address(bad) if "ext::" not in bad else ingest_source(
                bad, datasets_dir, IngestOptions(dataset_id="x"), FetchOptions(), tmp_path / "c"
            )
    result = CliRunner().invoke(app, ["ingest", "file:///nonexistent/repo.git", "--datasets-dir", str(datasets_dir)])
    assert result.exit_code == 1 and "git clone" in result.stderr and "Traceback" not in result.output


def test_files_on_known_hosts_link_to_their_commit() -> None:
    commit_id = "0123456789abcdef0123456789abcdef01234567"
    assert (
        file_link("https://github.com/org/repo.git", commit_id, "docs/a b.md")
        == f"https://github.com/org/repo/blob/{commit_id}/docs/a%20b.md"
    )
    assert file_link("git@gitlab.com:group/sub/repo.git", commit_id, "x.md") == (
        f"https://gitlab.com/group/sub/repo/-/blob/{commit_id}/x.md"
    )
    assert (
        file_link("https://codeberg.org/o/r", commit_id, "x.md")
        == f"https://codeberg.org/o/r/src/commit/{commit_id}/x.md"
    )
    assert file_link("https://git.example.com/o/r.git", commit_id, "x.md") is None
