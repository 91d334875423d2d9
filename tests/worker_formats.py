"""A format for the worker tests (named in FORMATS by the tests): it misbehaves as its input says."""

from __future__ import annotations

import os

from mcpower.chunking.extracted import TextBuilder
from mcpower.chunking.sections import Parsed, UnreadableError

TYPES = frozenset({".hostile"})


def extract(data: bytes) -> Parsed:
    if data == b"hang":
        while True:
            pass
    if data == b"memory":
        hoard = [bytearray(64 << 20) for _ in range(1024)]  # 64 GiB, one 64 MiB block at a time
        return Parsed([], str(len(hoard)))
    if data == b"crash":
        os._exit(3)
    if data == b"bug":
        raise KeyError("a parser bug")
    if data == b"refuse":
        raise UnreadableError("refused on purpose")
    builder = TextBuilder()
    builder.heading(1, "Hostile")
    builder.paragraph(data.decode())
    return builder.build("Fine")
