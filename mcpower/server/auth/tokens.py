"""The named tokens file: who may call the HTTP server, and which datasets each caller may read.

One JSON document, written by `mcpower token add` / `revoke` (atomically, mode 0600)::

    {"version": 1, "tokens": [{"name": "alice", "sha256": "<64 hex digits>", "datasets": ["eng-*"],
      "created": "2026-11-26T18:00:00Z", "expires": "2026-12-26T18:00:00Z"},
     {"name": "prom", "sha256": "...", "datasets": [], "metrics": true, "created": "...", "expires": null}]}

It holds the SHA-256 of each secret, never the secret: the secrets are 256 random bits (``mcpw_`` and
43 URL-safe characters), so their hash cannot be reversed or guessed, and a salt or a slow hash
(which protect passwords people choose) would add nothing. Reading the file therefore grants no
access; writing it does, so a file others can write is refused (:func:`check_access`).

``datasets`` are dataset ids or ``fnmatch`` patterns of them (``*`` and ``?``; ``*`` alone: every
dataset); the server turns them into scopes (callers.scopes_for). ``metrics`` (optional, false by
default) lets the token read ``/metrics``; a token with it may name no dataset (a scraper's: it
reads the metrics and nothing else). ``expires`` is optional. A name never holds ``:``, which
separates the other kinds of callers' names (``oauth:alice``). Nothing here imports the MCP SDK:
the CLI's `token` commands use this module alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from mcpower.errors import McpowerError

logger = logging.getLogger(__name__)

TOKENS_FILE_NAME = "tokens.json"  # the default: in the datasets folder, next to what it guards
FORMAT_VERSION = 1
SECRET_PREFIX = "mcpw_"  # makes a leaked secret recognisable to secret scanners
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_NAME_CHARS = 64
RESERVED_NAMES = frozenset({"token", "local"})  # the single token's caller and the unauthenticated one
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_PATTERN = re.compile(r"[a-z0-9*?-]+")  # a dataset id ([a-z0-9-]) with fnmatch's * and ?
_HEX64 = re.compile(r"[0-9a-f]{64}")
_DURATION = re.compile(r"(\d{1,6})([mhdw])")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


@dataclass(frozen=True)
class NamedToken:
    """One caller: its name, the hash of its secret, the datasets it may read, and when it ends."""

    name: str
    sha256: str
    datasets: tuple[str, ...]
    created: datetime
    expires: datetime | None = None
    metrics: bool = False  # may read /metrics

    def expired(self, now: datetime | None = None) -> bool:
        return self.expires is not None and self.expires <= (now or datetime.now(timezone.utc))

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "sha256": self.sha256,
            "datasets": list(self.datasets),
            "created": _iso(self.created),
            "expires": _iso(self.expires) if self.expires else None,
            **({"metrics": True} if self.metrics else {}),
        }


def default_tokens_file(datasets_dir: Path) -> Path:
    return datasets_dir.expanduser() / TOKENS_FILE_NAME


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def digest(secret: str) -> str:
    """The hex SHA-256 the file keeps of a secret (any text a client sends hashes without error)."""
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).hexdigest()


def check_name(name: str) -> str:
    """Raises McpowerError: not a name a token may have."""
    if not (_NAME.fullmatch(name) and len(name) <= MAX_NAME_CHARS) or name in RESERVED_NAMES:
        raise McpowerError(
            f"{name[:80]!r} cannot name a token: use up to {MAX_NAME_CHARS} letters, digits, '.', '_' or '-', "
            f"starting with a letter or digit (no ':', which OAuth callers' names hold), "
            f"and not {' or '.join(sorted(RESERVED_NAMES))}"
        )
    return name


def check_patterns(patterns: Iterable[str], metrics: bool = False) -> tuple[str, ...]:
    """The dataset patterns, each once, in order. Raises McpowerError: none (unless the token is for
    ``metrics``), or one that no dataset id could match (ids are lower-case letters, digits and '-', up to 64)."""
    out = tuple(dict.fromkeys(patterns))
    if not out and not metrics:
        raise McpowerError(
            "give the datasets the token may read: --datasets ID or a pattern like 'eng-*' ('*': all); "
            "or --metrics for a token that reads /metrics only"
        )
    for p in out:
        if not (_PATTERN.fullmatch(p) and len(p) <= 64):
            raise McpowerError(
                f"{p[:80]!r} is not a dataset id or pattern: use lower-case letters, digits and '-', "
                "with * or ? as wildcards (e.g. 'eng-*'; '*' for every dataset)"
            )
    return out


def grants(pattern: str, dataset_id: str) -> bool:
    """Whether a token's dataset ``pattern`` covers ``dataset_id`` (``fnmatch``, case-sensitive): the
    rule callers.allowed applies to every request."""
    return fnmatchcase(dataset_id, pattern)


def parse_expiry(text: str, now: datetime | None = None) -> datetime:
    """``30d``, ``12h``, ``90m``, ``2w`` from now; or a date (its start, UTC) or an ISO date and time.

    Raises:
        McpowerError: none of those, or already past.
    """
    now = now or datetime.now(timezone.utc)
    text = text.strip()
    duration = _DURATION.fullmatch(text)
    if duration:
        when = now + timedelta(**{_UNITS[duration[2]]: int(duration[1])})
    else:
        try:
            when = _parse_time(text) if "T" in text or " " in text else _start_of(date.fromisoformat(text))
        except ValueError:
            raise McpowerError(
                f"--expires {text[:40]!r}: give a duration (30d, 12h, 90m, 2w) or a date (2026-12-31) "
                "or date and time (2026-12-31T18:00:00Z)"
            ) from None
    if when <= now:
        raise McpowerError(f"--expires {text[:40]!r} is already past")
    return when


def check_access(path: Path) -> None:
    """Refuse a tokens file others could change (they could give themselves a token); warn when
    others can read it (hashes only, but names and datasets show). POSIX only.

    Raises:
        McpowerError: the file is writable by its group or others, or owned by another user (not root).
    """
    if os.name != "posix":
        return
    st = path.stat()
    if st.st_mode & 0o022 or st.st_uid not in (os.getuid(), 0):
        raise McpowerError(
            f"the tokens file {path} can be changed by other users (mode {st.st_mode & 0o777:04o}"
            f"{'' if st.st_uid in (os.getuid(), 0) else ', owned by another user'}): anyone who can write it "
            f"can give themselves a token; make it yours alone with: chmod 600 {path}"
        )
    if st.st_mode & 0o044:
        logger.warning(
            "the tokens file %s can be read by other users (mode %04o): it holds only hashes, but shows who has "
            "tokens and for which datasets; chmod 600 %s",
            path,
            st.st_mode & 0o777,
            path,
            extra={"event": "http.tokens_file_readable"},
        )


def check_apart(single: str, tokens: Sequence[NamedToken], source: str, path: Path) -> None:
    """Refuse a server whose single all-datasets token (``source``: MCPOWER_TOKEN or a token file)
    is the secret of one of the named ``tokens`` (from ``path``): the trap of exporting a caller's
    secret as MCPOWER_TOKEN for a client, then starting `serve --http` in the same shell — that
    caller's secret would have read every dataset. Refused rather than warned about: no server needs
    it, and a warning in a service's log is easily missed while the secret reads everything.

    Raises:
        McpowerError: ``single`` is one of the tokens' secrets.
    """
    mine = digest(single)
    for t in tokens:
        if hmac.compare_digest(t.sha256, mine):
            fix = (
                "unset it in this shell (`unset MCPOWER_TOKEN`; clients read their token from MCPOWER_CLIENT_TOKEN) "
                "or give the server a secret of its own"
                if source == "MCPOWER_TOKEN"
                else "give the server a secret of its own there"
            )
            raise McpowerError(
                f"{source} holds the secret of the named token {t.name!r} in {path}: as the server's own token it "
                f"would read every dataset, not only {', '.join(t.datasets)}; {fix}"
            )


def read_tokens(path: Path) -> list[NamedToken]:
    """The tokens in the file at ``path``; an empty list if there is no file.

    Raises:
        McpowerError: unreadable, not the format above, or two tokens with one name or one secret.
    """
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return []
    except OSError as e:
        raise McpowerError(f"cannot read the tokens file {path}: {e.strerror or e}") from None
    try:
        if len(raw) > MAX_FILE_BYTES:
            raise ValueError(f"over {MAX_FILE_BYTES // (1024 * 1024)} MB")
        doc = json.loads(raw.decode("utf-8"))
        if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION or not isinstance(doc.get("tokens"), list):
            raise ValueError(f'not {{"version": {FORMAT_VERSION}, "tokens": [...]}}')
        tokens = [_token(entry, i) for i, entry in enumerate(doc["tokens"])]
        for field in ("name", "sha256"):
            values = [getattr(t, field) for t in tokens]
            if len(set(values)) != len(values):
                raise ValueError(f"two tokens have the same {field}")
    except (ValueError, McpowerError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        reason = e.message if isinstance(e, McpowerError) else str(e)[:200]
        raise McpowerError(
            f"the tokens file {path} is not valid: {reason}; fix it, or manage it with `mcpower token add/revoke`"
        ) from None
    return tokens


def write_tokens(path: Path, tokens: Sequence[NamedToken]) -> None:
    """Replace the file with ``tokens`` at once (a reader sees the old file or the new, whole), mode 0600.

    Raises:
        McpowerError: the folder cannot be written.
    """
    text = json.dumps({"version": FORMAT_VERSION, "tokens": [t.to_json() for t in tokens]}, indent=2) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # created 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as e:
        raise McpowerError(f"cannot write the tokens file {path}: {e.strerror or e}") from None


@contextlib.contextmanager
def editing(path: Path) -> Iterator[None]:
    """Hold the tokens file's lock (a ``.lock`` file beside it, POSIX) while it is read and written
    again, so two `mcpower token add` at once both land.

    Raises:
        McpowerError: the folder cannot be written.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.parent / f".{path.name}.lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError as e:
        raise McpowerError(f"cannot write the tokens file {path}: {e.strerror or e}") from None
    try:
        if os.name == "posix":
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _token(entry: object, index: int) -> NamedToken:
    if not isinstance(entry, dict):
        raise ValueError(f"token {index + 1} is not an object")
    name, sha, datasets = entry.get("name"), entry.get("sha256"), entry.get("datasets")
    if not isinstance(name, str):
        raise ValueError(f"token {index + 1} has no name")
    check_name(name)
    if not isinstance(sha, str) or not _HEX64.fullmatch(sha):
        raise ValueError(f"token {name!r}: sha256 is not 64 lower-case hex digits")
    if not isinstance(datasets, list) or not all(isinstance(d, str) for d in datasets):
        raise ValueError(f"token {name!r}: datasets is not a list of ids and patterns")
    expires, metrics = entry.get("expires"), entry.get("metrics", False)
    if not isinstance(metrics, bool):
        raise ValueError(f"token {name!r}: metrics is not true or false")
    return NamedToken(
        name=name,
        sha256=sha,
        datasets=check_patterns(datasets, metrics),
        created=_parse_time(entry.get("created"), f"token {name!r}: created"),
        expires=None if expires is None else _parse_time(expires, f"token {name!r}: expires"),
        metrics=metrics,
    )


def _parse_time(value: object, what: str = "") -> datetime:
    """An ISO date and time; without a zone, UTC. Raises ValueError."""
    if not isinstance(value, str):
        raise ValueError(f"{what} is not a date and time")
    try:
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"{what} is not an ISO date and time: {value[:40]!r}") from None
    return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)


def _start_of(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=timezone.utc)


def _iso(when: datetime) -> str:
    return when.astimezone(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
