"""A git repository as a folder: a shallow clone into mcpower's cache, brought to the newest commit
of its branch or tag on each ingest, with git locked down as for any untrusted input.

The ``git`` command is used (not dulwich or pygit2): it is what the user's credential helpers,
SSH keys, proxies and ``insteadOf`` rules are set up for, it fetches shallow and partial clones
from every forge, and it adds no dependency. What it is told, on every call:

- no hook runs (``core.hooksPath=/dev/null``), nor an fsmonitor command;
- no prompt waits on a terminal: ``GIT_TERMINAL_PROMPT=0``, an askpass that answers nothing, ssh
  in batch mode (unless the user set ``GIT_SSH_COMMAND``), stdin closed;
- only the protocol of the address given is allowed (``protocol.allow=never`` and that one), and
  ``file`` only for a ``file://`` address; submodules are not cloned unless asked, and then with
  the same rules;
- a time limit for each command, and a size limit on what it downloads (the ``.git`` folder is
  measured while it runs; over the limit, git is stopped);
- ``--header`` values reach git through its environment (``http.extraHeader``), never its
  command line (which other users can read) or the manifest.

Symlinks in the checkout are treated as in any folder: discovery never follows one out of it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from mcpower.errors import IngestError

DEFAULT_GIT_TIMEOUT = 600.0
DEFAULT_MAX_REPO_BYTES = 2 * 1024**3
_POLL = 0.25  # how often the download's size is measured
_REF = re.compile(r"^[A-Za-z0-9._/+-]{1,200}$")


@dataclass
class GitReport:
    repository: str
    ref: str | None
    commit: str = ""
    previous: str | None = None  # the commit before this fetch, if there was a clone
    cloned: bool = False  # a new clone (else a fetch into the existing one)
    seconds: float = 0.0


def check_address(url: str) -> str:
    """``url`` if git may fetch it; the scheme-specific protocol git is allowed.

    Raises:
        IngestError: a password or token in it, or a protocol mcpower does not fetch over.
    """
    if url.startswith("-"):
        raise IngestError("a repository address cannot start with '-'")
    if "://" not in url:  # scp-like user@host:path
        return "ssh"
    parts = urlsplit(url)
    scheme = parts.scheme.lower().removeprefix("git+")
    if scheme not in ("https", "http", "ssh", "file"):
        raise IngestError(f"repository addresses over {parts.scheme}:// are not fetched (https, ssh or file)")
    if parts.password is not None:
        raise IngestError(
            "a password or token in the repository address would be written into the dataset's record; "
            "use a git credential helper, or pass it with --header 'Authorization: ...'"
        )
    return scheme


def clean_ref(ref: str | None) -> str | None:
    """Raises IngestError: not a branch or tag name git would take."""
    if ref is not None and (not _REF.match(ref) or ref.startswith(("-", "/")) or ".." in ref):
        raise IngestError(f"--ref {ref[:80]!r}: give a branch or tag name")
    return ref


def subdir_of(checkout: Path, subdir: str | None) -> Path:
    """The folder to ingest: the checkout, or ``subdir`` inside it (reached without a symlink).

    Raises:
        IngestError: no such folder in the repository, or it leads out of it.
    """
    if not subdir or subdir.strip("/") == "":
        return checkout
    rel = PurePosixPath(subdir.strip("/"))
    if rel.is_absolute() or any(p in ("..", ".") or p.startswith(".git") for p in rel.parts):
        raise IngestError(f"--subdir {subdir[:80]!r}: give a folder of the repository, such as docs/")
    here = checkout
    for part in rel.parts:
        here = here / part
        if here.is_symlink() or not here.is_dir():
            raise IngestError(f"--subdir {subdir[:80]!r}: no such folder in the repository (at this commit)")
    return here


def fetch_repository(
    url: str,
    folder: Path,
    ref: str | None,
    *,
    headers: Sequence[tuple[str, str]] = (),
    submodules: bool = False,
    timeout: float = DEFAULT_GIT_TIMEOUT,
    max_bytes: int = DEFAULT_MAX_REPO_BYTES,
) -> GitReport:
    """Clone ``url`` (shallow) into ``folder/checkout``, or bring the clone there to the newest
    commit of ``ref`` (default: the remote's HEAD).

    Raises:
        IngestError: git failed (its last words), took too long, or downloaded too much.
    """
    started = time.monotonic()
    protocol = check_address(url)
    clean_ref(ref)
    checkout = folder / "checkout"
    report = GitReport(url, ref)
    run = _Runner(protocol, headers, timeout, max_bytes, checkout)
    if (checkout / ".git").is_dir():
        report.previous = run.text(["rev-parse", "HEAD"], cwd=checkout) or None
        fetched = run.git(["fetch", "--depth", "1", "--no-tags", "origin", ref or "HEAD"], cwd=checkout)
        if fetched is not None and "does not appear to be a git repository" in fetched:
            shutil.rmtree(checkout, ignore_errors=True)
    if not (checkout / ".git").is_dir():
        shutil.rmtree(checkout, ignore_errors=True)
        folder.mkdir(parents=True, exist_ok=True)
        args = ["clone", "--depth", "1", "--no-tags", "--single-branch"]
        args += ["--branch", ref] if ref else []
        args += ["--recurse-submodules", "--shallow-submodules"] if submodules else ["--no-recurse-submodules"]
        run.check([*args, "--", url, str(checkout)], cwd=folder)
        report.cloned = True
    else:
        run.check(["reset", "--hard", "-q", "FETCH_HEAD"], cwd=checkout)
        if submodules:
            run.check(["submodule", "update", "--init", "--recursive", "--depth", "1"], cwd=checkout)
        run.check(["clean", "-ffdxq"], cwd=checkout)
    report.commit = run.text(["rev-parse", "HEAD"], cwd=checkout)
    report.seconds = time.monotonic() - started
    return report


class _Runner:
    """Runs git with the lockdown in the module docstring."""

    def __init__(
        self, protocol: str, headers: Sequence[tuple[str, str]], timeout: float, max_bytes: int, checkout: Path
    ) -> None:
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.checkout = checkout
        config = [
            ("core.hooksPath", "/dev/null"),
            ("core.fsmonitor", "false"),
            ("protocol.allow", "never"),
            (f"protocol.{protocol}.allow", "always"),
            ("submodule.recurse", "false"),
            ("advice.detachedHead", "false"),
            ("gc.auto", "0"),
        ]
        self.args = [a for k, v in config for a in ("-c", f"{k}={v}")]
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_CONFIG_")}
        env.update(GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="echo", SSH_ASKPASS="echo", GIT_PROTOCOL_FROM_USER="0")
        env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
        env["GIT_CONFIG_COUNT"] = str(len(headers))
        for i, (name, value) in enumerate(headers):  # the environment: not visible in `ps` to other users
            env[f"GIT_CONFIG_KEY_{i}"] = "http.extraHeader"
            env[f"GIT_CONFIG_VALUE_{i}"] = f"{name}: {value}"
        self.env = env

    def git(self, args: list[str], cwd: Path) -> str | None:
        """Run git; None on success, else its last words (what failed)."""
        command = ["git", *self.args, *args]
        try:
            process = subprocess.Popen(
                command,
                cwd=cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,  # its ssh and helpers are stopped with it
            )
        except FileNotFoundError:
            return "the git command is not installed (install git to ingest repositories)"
        except OSError as e:
            return f"git cannot be run ({e.strerror})"
        deadline = time.monotonic() + self.timeout
        why = None
        while True:
            try:
                process.wait(_POLL)
                break
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() > deadline:
                why = f"git {args[0]} took longer than {self.timeout:g} s; stopped"
            elif _size(self.checkout / ".git") > self.max_bytes:
                why = f"the repository is over {self.max_bytes / 2**20:g} MB; stopped"
            if why:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                break
        assert process.stderr is not None
        err = process.stderr.read(64 * 1024).decode("utf-8", "replace")
        process.stderr.close()
        if why:
            return why
        if process.returncode != 0:
            lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
            return " / ".join(lines[-2:])[:300] or f"git {args[0]} failed (exit {process.returncode})"
        return None

    def check(self, args: list[str], cwd: Path) -> None:
        why = self.git(args, cwd)
        if why is not None:
            raise IngestError(f"git {args[0]}: {why}")

    def text(self, args: list[str], cwd: Path) -> str:
        try:
            out = subprocess.run(
                ["git", *self.args, *args],
                cwd=cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return out.stdout.decode("ascii", "replace").strip() if out.returncode == 0 else ""


def _size(folder: Path) -> int:
    """Bytes of the files under ``folder`` (a .git folder while git downloads into it)."""
    total = 0
    for dirpath, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total
