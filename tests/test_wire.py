"""The stdio transport's bytes (server/wire.py): bounded lines from a pipe or a file, lines out by a thread."""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import termios
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest

from mcpower.server import wire
from mcpower.server.wire import HEAD_BYTES, LineReader, LineWriter

pytestmark = pytest.mark.anyio

LIMIT = 100
DEADLINE = 30  # seconds before a hung test fails (never reached when the code is right)


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        with contextlib.suppress(OSError):
            os.close(fd)


def unread(fd: int) -> int:
    """Bytes waiting in a pipe."""
    return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0])


async def lines_of(reader: LineReader) -> list[tuple[bytes, bool]]:
    out = []
    with anyio.fail_after(DEADLINE):
        while True:
            line = await reader.next()
            if line == (b"", False):
                return out
            out.append(line)


CASES = [
    b'{"a": 1}\n{"b": 2}\n',  # two lines in one read
    b"x" * LIMIT + b"\n" + b"y" * (LIMIT + 1) + b"\nafter\n",  # at the limit: kept; one over: refused
    b"z" * (5 * LIMIT) + b"\nnext\n",  # far over, then the next line as it is
    b"no newline at the end",  # the last line at EOF
    b"w" * (3 * LIMIT),  # over the limit, and EOF before its end
    b"\r\n\n" + "é ü 😀".encode() + b"\n",  # blank lines are lines; bytes stay bytes
]
EXPECTED = [
    [(b'{"a": 1}\n', False), (b'{"b": 2}\n', False)],
    [(b"x" * LIMIT + b"\n", False), (b"y" * HEAD_BYTES, True), (b"after\n", False)],
    [(b"z" * HEAD_BYTES, True), (b"next\n", False)],
    [(b"no newline at the end", False)],
    [(b"w" * HEAD_BYTES, True)],
    [(b"\r\n", False), (b"\n", False), ("é ü 😀".encode() + b"\n", False)],
]


@pytest.mark.parametrize(("data", "expected"), list(zip(CASES, EXPECTED)))
async def test_a_pipe_is_read_on_the_event_loop_line_by_line(
    pipe: tuple[int, int], data: bytes, expected: list[tuple[bytes, bool]]
) -> None:
    r, w = pipe
    os.write(w, data)
    os.close(w)
    reader = LineReader(r, LIMIT)
    assert reader.on_loop
    assert await lines_of(reader) == expected


@pytest.mark.parametrize(("data", "expected"), list(zip(CASES, EXPECTED)))
async def test_a_file_is_read_by_a_thread_with_the_same_lines(
    tmp_path: Path, data: bytes, expected: list[tuple[bytes, bool]]
) -> None:
    path = tmp_path / "stdin"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        reader = LineReader(fd, LIMIT)
        assert not reader.on_loop  # the event loop cannot watch a regular file
        assert await lines_of(reader) == expected
    finally:
        os.close(fd)


async def two_lines_fed_in_pieces(
    reader: LineReader, pipe: tuple[int, int], pieces: list[bytes], each: Callable[[], object] = lambda: None
) -> list[tuple[bytes, bool]]:
    """The first two lines ``reader`` reads while ``pieces`` are written to ``pipe``, each piece taken
    by the reader before the next is written (``each`` runs then)."""
    r, w = pipe
    got: list[tuple[bytes, bool]] = []

    async def read_two() -> None:
        got.append(await reader.next())
        got.append(await reader.next())

    with anyio.fail_after(DEADLINE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_two)
            for piece in pieces:
                os.write(w, piece)
                while unread(r):  # the reader has taken this piece before the next is written
                    await anyio.sleep(0)
                each()
    return got


async def test_a_line_arriving_in_pieces_is_read_whole(pipe: tuple[int, int]) -> None:
    reader = LineReader(pipe[0], LIMIT)
    got = await two_lines_fed_in_pieces(reader, pipe, [b'{"jsonrpc": "2.0", ', b'"id": 1}\n{"tail":', b" true}\n"])
    assert got == [(b'{"jsonrpc": "2.0", "id": 1}\n', False), (b'{"tail": true}\n', False)]


async def test_an_over_long_line_in_pieces_is_dropped_as_it_comes(pipe: tuple[int, int]) -> None:
    """What is held of a line never passes the limit plus one read, however long the line."""
    reader = LineReader(pipe[0], LIMIT)
    held: list[int] = []  # what the reader holds after each piece: the bound is the point
    pieces = [b"a" * 60] * 20 + [b"a\nok\n"]
    got = await two_lines_fed_in_pieces(reader, pipe, pieces, lambda: held.append(len(reader._partial)))
    assert got == [(b"a" * HEAD_BYTES, True), (b"ok\n", False)]
    assert max(held) <= LIMIT


async def test_a_large_message_crosses_the_pipe_whole(pipe: tuple[int, int]) -> None:
    """A message of 3 MB (many reads; more than a pipe holds) under a 16 MB limit, then EOF."""
    r, w = pipe
    message = b'{"q": "' + b"0123456789abcdef" * (3 << 16) + b'"}\n'
    reader = LineReader(r, 16 << 20)

    def feed() -> None:
        view = memoryview(message + b"{}\n")
        while view:
            view = view[os.write(w, view) :]
        os.close(w)

    with anyio.fail_after(DEADLINE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, feed)
            assert await reader.next() == (message, False)
            assert await reader.next() == (b"{}\n", False)
            assert await reader.next() == (b"", False)


async def test_the_writer_writes_lines_in_order(pipe: tuple[int, int]) -> None:
    r, w = pipe
    writer = LineWriter(w)
    lines = [f'{{"n": {i}}}\n'.encode() for i in range(200)] + [b"x" * 300_000 + b"\n"]
    received = bytearray()

    def read_all() -> None:
        while chunk := os.read(r, 1 << 16):
            received.extend(chunk)

    with anyio.fail_after(DEADLINE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, read_all)
            for line in lines:
                await writer.send(line)
            assert await writer.drain()
            os.close(w)
    assert bytes(received) == b"".join(lines)
    with pytest.raises(anyio.ClosedResourceError):
        await writer.send(b"late\n")


async def test_a_client_that_stops_reading_never_blocks_the_event_loop(
    pipe: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sends past the queue's bound wait (cancellably), the loop runs on; reading lets them through."""
    monkeypatch.setattr(wire, "MAX_QUEUED_BYTES", 200_000)
    r, w = pipe
    writer = LineWriter(w)
    line = b"y" * 99_999 + b"\n"
    sent = 0

    async def send_many() -> None:
        nonlocal sent
        for _ in range(20):
            await writer.send(line)
            sent += 1

    with anyio.fail_after(DEADLINE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(send_many)
            # Nobody reads: the pipe fills (64 KB), the thread blocks in write, the queue fills to
            # its bound, and the sender waits; this task keeps running meanwhile.
            while sent < 3:
                await anyio.sleep(0)
            blocked_at = sent
            for _ in range(100):
                await anyio.sleep(0)
            assert sent == blocked_at < 20
            received = 0
            while received < 20 * len(line):
                received += len(await anyio.to_thread.run_sync(os.read, r, 1 << 20))
    assert sent == 20
    with anyio.fail_after(DEADLINE):
        assert await writer.drain()


async def test_a_closed_client_end_breaks_later_sends(pipe: tuple[int, int]) -> None:
    r, w = pipe
    os.close(r)
    writer = LineWriter(w)
    await writer.send(b"lost\n")  # queued: the write fails on the thread (EPIPE)
    with anyio.fail_after(DEADLINE):
        while writer.error is None:
            await anyio.sleep(0)
        assert isinstance(writer.error, BrokenPipeError)
        with pytest.raises(anyio.BrokenResourceError):
            await writer.send(b"more\n")
        assert await writer.drain()  # the thread ends: nothing is left it could write


async def test_drain_gives_up_on_a_client_that_never_reads(pipe: tuple[int, int]) -> None:
    _, w = pipe
    writer = LineWriter(w)
    await writer.send(b"z" * (1 << 20) + b"\n")  # more than the pipe holds: the thread blocks
    assert await writer.drain(0.2) is False
