"""The Milvus store: datasets in a Milvus database — an embedded milvus-lite file (``x.db``) or a
server or cluster (``http://host:19530``, Zilliz Cloud) — through ``pymilvus.MilvusClient``.

    client.py    connecting (pymilvus imported lazily), engine errors as McpowerErrors, literals
    schema.py    collection names and schemas, rows <-> records
    catalog.py   MilvusCatalog: finds datasets by their pointer records, opens them, publishes
    store.py     MilvusStore: one version, read (engine candidates; fusion stays in mcpower)
    lease.py     the write lease that keeps one writer per dataset across machines

Nothing here imports pymilvus at import time: install the extra, ``pip install 'mcpower[milvus]'``.
docs/scale-out.md describes the layout, the choices and what was measured.
"""

from __future__ import annotations

from mcpower.store.milvus.catalog import MilvusCatalog

__all__ = ["MilvusCatalog"]
