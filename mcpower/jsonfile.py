"""A JSON file read within bounds: one descriptor (no symlink followed, never blocking), its size
checked before reading and its values counted before parsing, so a hostile file costs at most its
limits. Manifests, the original format's files and a crawl's sidecar are read through it."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any


def read_json(path: Path, max_bytes: int, what: str, max_values: int | None = None) -> Any:
    """The JSON value in the regular file ``path`` of at most ``max_bytes`` bytes (and, if given,
    at most about ``max_values`` values: parsed, each costs ~60-90 bytes however short its text).

    The file is opened once (no symlink followed, without blocking) and that descriptor is checked
    and read, so what is checked is what is read; its size is checked before anything is read, its
    values are counted before it is parsed.

    Raises:
        ValueError: what was wrong, for a message (no path in it): unreadable, not a regular file,
            over the limits for ``what``, not UTF-8 JSON, NaN or Infinity, nested too deeply.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise ValueError(
            "not a regular file (a symlink)" if e.errno == errno.ELOOP else f"cannot read ({e.strerror})"
        ) from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if st.st_size > max_bytes:
            raise ValueError(f"{st.st_size} bytes, over the {max_bytes}-byte limit for {what}")
        parts, size = [], 0
        while size <= max_bytes and (block := os.read(fd, max_bytes + 1 - size)):  # the file may have grown
            parts.append(block)
            size += len(block)
    except OSError as e:
        raise ValueError(f"cannot read ({e.strerror})") from e
    finally:
        os.close(fd)
    if size > max_bytes:
        raise ValueError(f"over the {max_bytes}-byte limit for {what}")
    data = b"".join(parts)
    del parts
    if max_values is not None:
        # Every value but the first follows a , : [ or { (one in a string is counted too: an upper bound).
        values = 1 + sum(data.count(c) for c in (b",", b":", b"[", b"{"))
        if values > max_values:
            raise ValueError(f"~{values} values (counting , : [ and {{), over the {max_values}-value limit for {what}")
    try:
        text = data.decode("utf-8")
        del data  # not held beside the text while it is parsed
        return json.loads(text, parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:  # RecursionError: `[[[[...` nesting
        raise ValueError(f"not valid UTF-8 JSON ({e})") from e


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not allowed")
