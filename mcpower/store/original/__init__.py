"""Datasets built by the original system (the TypeScript server and Python bridge that the seed
design documents describe), served as they are, read-only, and converted by ``mcpower import``.

Its format, seed 000's DatasetManifest::

    <root>/<id>/
        manifest.json   {id, name, description, index, metadata, defaultTopK} and nothing else
        index/docs.index   one FAISS IndexFlatIP of L2-normalised vectors, row i = record i
        metadata.json   a list of chunk records {id, title, path, content, snippet[, chunk, chunk_total]},
                        or an object {model, createdAt, stats, documents: [records]}

The local catalog recognises such a manifest (store/local/catalog.py) and opens it here:

    files.py    reading and checking the files, trusting nothing (sizes, JSON shape, counts, FAISS header)
    info.py     OriginalInfo (the DatasetInfo of such a dataset) and the model rule
    rows.py     chunk records -> mcpower documents and chunks (line ranges, chunk ids)
    store.py    the dataset loaded into the local store's in-memory form (keyword index built at load)
    convert.py  ``mcpower import``: the same build published as a dataset of mcpower's format
"""

from __future__ import annotations

from mcpower.store.original.files import file_stamps, is_original_manifest
from mcpower.store.original.info import OriginalInfo, read_info, upgrade_note

__all__ = ["OriginalInfo", "file_stamps", "is_original_manifest", "read_info", "upgrade_note"]
