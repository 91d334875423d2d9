"""Manifest rules, safe reading and atomic writing."""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from conftest import valid_manifest as valid

from mcpower.errors import DatasetUnavailableError, InvalidManifestError
from mcpower.layout import write_manifest
from mcpower.manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES, Manifest, read_manifest


def write_raw(tmp_path: Path, content: str | bytes) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir(exist_ok=True)
    path = folder / MANIFEST_NAME
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def read_dict(tmp_path: Path, data: object) -> Manifest:
    return read_manifest(write_raw(tmp_path, json.dumps(data)))


def loc(path: str) -> str:
    """A pattern for pydantic's error text naming the field at ``path`` (its own line)."""
    return rf"(?m)^{re.escape(path)}$"


def with_field(key: str, value: object) -> dict[str, Any]:
    data = valid()
    data[key] = value
    return data


def test_valid_manifest_reads() -> None:
    m = Manifest.model_validate(valid())

    assert m.id == "docs"
    assert m.default_top_k == 5
    assert m.embedding.dimension == 384
    assert m.created_at == datetime(2025, 1, 1, tzinfo=timezone.utc)


def test_default_top_k_defaults_to_5() -> None:
    data = valid()
    del data["defaultTopK"]

    assert Manifest.model_validate(data).default_top_k == 5


@pytest.mark.parametrize("value", ["a", "docs", "my-docs-2", "0", "-", "a" * 64])
def test_id_accepted(value: str) -> None:
    assert Manifest.model_validate(with_field("id", value)).id == value


@pytest.mark.parametrize("value", ["", "a" * 65, "Docs", "my_docs", "my docs", "döcs", "docs\n", "docs/x", "../x"])
def test_id_rejected(value: str) -> None:
    with pytest.raises(ValueError, match=loc("id")):
        Manifest.model_validate(with_field("id", value))


@pytest.mark.parametrize(("key", "limit"), [("name", 128), ("description", 512)])
def test_text_field_lengths(key: str, limit: int) -> None:
    assert Manifest.model_validate(with_field(key, "x")).model_dump()[key] == "x"
    assert Manifest.model_validate(with_field(key, "x" * limit)).model_dump()[key] == "x" * limit
    for bad in ["", "x" * (limit + 1), "   ", "\t\n"]:
        with pytest.raises(ValueError, match=loc(key)):
            Manifest.model_validate(with_field(key, bad))


@pytest.mark.parametrize("key", ["index", "metadata"])
@pytest.mark.parametrize(
    "value",
    [
        "/etc/passwd",
        "/abs/index.faiss",
        "../other/index.faiss",
        "v-1/../../x",
        "..",
        "v-1\\index.faiss",
        "v-1/\x00x",
        "",
    ],
)
def test_paths_must_be_relative_and_inside(key: str, value: str) -> None:
    with pytest.raises(ValueError, match=loc(key)):
        Manifest.model_validate(with_field(key, value))


@pytest.mark.parametrize("key", ["index", "metadata"])
def test_relative_paths_accepted(key: str) -> None:
    assert Manifest.model_validate(with_field(key, "v-1/file.bin")).model_dump()[key] == "v-1/file.bin"


@pytest.mark.parametrize(("value", "ok"), [(1, True), (100, True), (5, True), (0, False), (101, False), (-1, False)])
def test_default_top_k_range(value: int, ok: bool) -> None:
    if ok:
        assert Manifest.model_validate(with_field("defaultTopK", value)).default_top_k == value
    else:
        with pytest.raises(ValueError, match=loc("defaultTopK")):
            Manifest.model_validate(with_field("defaultTopK", value))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("id", 5),
        ("name", ["x"]),
        ("description", None),
        ("defaultTopK", "5"),
        ("defaultTopK", True),
        ("defaultTopK", 2.5),
        ("embedding", "all-MiniLM-L6-v2"),
        ("counts", [3, 10]),
        ("createdAt", "yesterday"),
        ("checksums", {"index": "not-hex", "metadata": "b" * 64}),
        ("vectorIndex", {"kind": "ivf"}),
        ("schemaVersion", 2),
    ],
)
def test_wrong_types_and_values_rejected(key: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"(?m)^{key}(\.\w+)?$"):
        Manifest.model_validate(with_field(key, value))


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("embedding", "dimension", "384"),
        ("embedding", "dimension", 0),
        ("embedding", "backend", "tensorflow"),
        ("embedding", "normalized", "yes"),
        ("chunking", "chunkTokens", 8),
        ("counts", "chunks", -1),
        ("counts", "documents", 1.5),
    ],
)
def test_nested_fields_validated(section: str, key: str, value: object) -> None:
    data = valid()
    data[section] = {**data[section], key: value}

    with pytest.raises(ValueError, match=loc(f"{section}.{key}")):
        Manifest.model_validate(data)


def test_required_field_missing() -> None:
    data = valid()
    del data["checksums"]

    with pytest.raises(ValueError, match=loc("checksums")):
        Manifest.model_validate(data)


def test_unknown_fields_rejected_at_every_level() -> None:
    with pytest.raises(ValueError, match=loc("surprise")):
        Manifest.model_validate(with_field("surprise", 1))
    data = valid()
    data["embedding"] = {**data["embedding"], "extra_key": True}
    with pytest.raises(ValueError, match=loc("embedding.extra_key")):
        Manifest.model_validate(data)


def test_round_trip(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    manifest = Manifest.model_validate(valid())

    path = write_manifest(manifest, folder)

    assert path == folder / MANIFEST_NAME
    assert read_manifest(path) == manifest
    assert json.loads(path.read_text())["defaultTopK"] == 5  # camelCase on disk
    assert sorted(p.name for p in folder.iterdir()) == [MANIFEST_NAME]  # no temporary file left


def test_write_replaces_the_previous_manifest(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    write_manifest(Manifest.model_validate(valid()), folder)

    write_manifest(Manifest.model_validate(with_field("defaultTopK", 9)), folder)

    assert read_manifest(folder / MANIFEST_NAME).default_top_k == 9


def test_read_valid_file(tmp_path: Path) -> None:
    assert read_dict(tmp_path, valid()).name == "My docs"


def test_read_accepts_snake_case_keys(tmp_path: Path) -> None:
    data = valid()
    data["default_top_k"] = data.pop("defaultTopK")

    assert read_dict(tmp_path, data).default_top_k == 5


def test_errors_are_invalid_manifest_errors_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidManifestError, match="defaultTopK") as info:
        read_dict(tmp_path, with_field("defaultTopK", 0))

    assert isinstance(info.value, DatasetUnavailableError)
    assert info.value.code == "INVALID_MANIFEST"
    assert info.value.message.startswith("docs/manifest.json: ")


def test_oversized_file_rejected_before_parsing(tmp_path: Path) -> None:
    path = write_raw(tmp_path, "{" + " " * MAX_MANIFEST_BYTES + "}")  # would be valid JSON, if it were read

    with pytest.raises(InvalidManifestError, match="limit") as info:
        read_manifest(path)
    assert "JSON" not in info.value.message


def test_file_at_the_size_limit_is_read(tmp_path: Path) -> None:
    text = json.dumps(valid())
    path = write_raw(tmp_path, text + " " * (MAX_MANIFEST_BYTES - len(text)))

    assert os.path.getsize(path) == MAX_MANIFEST_BYTES
    assert read_manifest(path).id == "docs"


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("not json", "JSON"),
        ("", "JSON"),
        ('{"id": "docs",', "JSON"),
        (b"\xff\xfe{}", "JSON"),
        ("[]", "object"),
        ('["docs"]', "object"),
        ('"docs"', "object"),
        ("null", "object"),
    ],
)
def test_not_a_json_object(tmp_path: Path, content: str | bytes, reason: str) -> None:
    with pytest.raises(InvalidManifestError, match=reason):
        read_manifest(write_raw(tmp_path, content))


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_rejected(tmp_path: Path, constant: str) -> None:
    text = json.dumps(valid()).replace('"defaultTopK": 5', f'"defaultTopK": {constant}')
    assert constant in text

    with pytest.raises(InvalidManifestError, match=constant):
        read_manifest(write_raw(tmp_path, text))


def test_huge_number_rejected(tmp_path: Path) -> None:
    text = json.dumps(valid()).replace('"defaultTopK": 5', '"defaultTopK": 1e999')

    with pytest.raises(InvalidManifestError, match="defaultTopK"):
        read_manifest(write_raw(tmp_path, text))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidManifestError, match="cannot read"):
        read_manifest(tmp_path / "docs" / MANIFEST_NAME)


def test_symlink_rejected_even_to_a_valid_manifest(tmp_path: Path) -> None:
    real = write_raw(tmp_path, json.dumps(valid()))
    other = tmp_path / "other"
    other.mkdir()
    link = other / MANIFEST_NAME
    link.symlink_to(real)

    with pytest.raises(InvalidManifestError, match="not a regular file"):
        read_manifest(link)


def test_fifo_rejected_without_blocking(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    fifo = folder / MANIFEST_NAME
    os.mkfifo(fifo)

    with pytest.raises(InvalidManifestError, match="not a regular file"):
        read_manifest(fifo)


def test_directory_rejected(tmp_path: Path) -> None:
    (tmp_path / "docs" / MANIFEST_NAME).mkdir(parents=True)

    with pytest.raises(InvalidManifestError, match="not a regular file"):
        read_manifest(tmp_path / "docs" / MANIFEST_NAME)


# ---------------------------------------------------------------- the source record


def source(**changes: object) -> dict[str, Any]:
    record: dict[str, Any] = {
        "path": "/home/me/notes",
        "include": ["*.md"],
        "exclude": [],
        "followSymlinks": False,
        "maxFileBytes": 10485760,
    }
    return {**record, **changes}


def test_a_manifest_without_a_source_reads_and_writes_back_without_one(tmp_path: Path) -> None:
    manifest = Manifest.model_validate(valid())
    assert manifest.source is None
    assert "source" not in json.loads(manifest.to_json())


def test_the_source_record_round_trips(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    manifest = Manifest.model_validate(with_field("source", source()))
    read = read_manifest(write_manifest(manifest, folder))
    assert read.source is not None
    assert (read.source.path, read.source.include, read.source.max_file_bytes) == (
        "/home/me/notes",
        ("*.md",),
        10485760,
    )
    assert list(json.loads((folder / MANIFEST_NAME).read_text()))[-1] == "source"  # after the older keys


@pytest.mark.parametrize(
    "record",
    [
        source(path="notes"),  # relative
        source(path="/home/me/../etc"),
        source(path="/home/me/notes\n"),
        source(path="/home/me/\x01notes"),
        source(path="/" + "a" * 1024),
        source(include=["*.md"] * 33),
        source(exclude=["x" * 257]),
        source(include=["ok\x00"]),
        source(followSymlinks="yes"),
        source(maxFileBytes=0),
        source(maxFileBytes="10"),
        source(extra=1),
        "/home/me/notes",
    ],
)
def test_a_bad_source_record_is_refused(tmp_path: Path, record: object) -> None:
    with pytest.raises(InvalidManifestError, match="source"):
        read_dict(tmp_path, with_field("source", record))


def test_the_largest_source_record_keeps_the_manifest_under_its_limit(tmp_path: Path) -> None:
    patterns = ["p" * 120] * 11  # two lists of these: about as much as the record's own limit allows
    record = source(path="/" + "d" * 1000, include=patterns, exclude=patterns)
    data = {**with_field("source", record), "name": "\U0001f600" * 128, "description": "\U0001f600" * 512}
    manifest = Manifest.model_validate(data)
    assert len(manifest.to_json().encode()) < MAX_MANIFEST_BYTES
    with pytest.raises(InvalidManifestError, match="at most 4096 bytes"):
        read_dict(tmp_path, with_field("source", source(path="/" + "d" * 1000, include=["p" * 200] * 16)))
