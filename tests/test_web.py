"""The web pages (mcpower/web, docs/web.md) in process: every page and its JSON twin, the search
answering exactly as knowledge_search does, the document view, errors, access (token, cookie,
login, Host/Origin), security headers, hostile document text, page weight.

The real-browser tests are in tests/browser/ (Chromium)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from conftest import FakeEmbedder, join_warm_up
from http_fixtures import TOKEN
from mcp import Client
from server_fixtures import add_broken_dataset

from mcpower.registry import Registry
from mcpower.server.app import KnowledgeServer, create_server
from mcpower.server.http import HttpOptions, create_http_app

pytestmark = pytest.mark.anyio

BASE = "http://127.0.0.1:8765"


@pytest.fixture
def registry(datasets: Path) -> Iterator[Registry]:
    reg = Registry(datasets, embedder_factory=lambda model: FakeEmbedder())
    yield reg
    join_warm_up()
    reg.close()


@asynccontextmanager
async def serving(registry: Registry, **options: Any) -> AsyncIterator[tuple[KnowledgeServer, Any]]:
    server, app = create_http_app(registry, HttpOptions(**{"token": None, **options}))
    try:
        async with server.session_manager.run():
            yield server, app
    finally:
        server.close()


def web(app: Any, token: str | None = None, **headers: str) -> httpx2.AsyncClient:
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url=BASE, headers=headers)


async def test_smoke(registry: Registry, datasets: Path) -> None:
    add_broken_dataset(datasets)
    async with serving(registry) as (_, app), web(app) as h:
        for url in ["/", "/?format=json", "/search", "/search?q=pumpkin", "/search?q=pumpkin&format=json", "/login", "/static/web.css"]:
            r = await h.get(url)
            print(url, r.status_code, len(r.content))
            Path("/tmp/webtest/" + re.sub(r"\W", "_", url) + ".html").write_bytes(r.content)
        rid = (await h.get("/search?q=pumpkin&format=json")).json()["response"]["results"][0]["result_id"]
        for url in [f"/doc?id={rid}", f"/doc?id={rid}&chunks=1", f"/doc?id={rid}&format=json", "/doc?id=nope", "/search?q=x&k=0", "/search?q=x&dataset=zzz"]:
            r = await h.get(url)
            print(url, r.status_code, len(r.content))
            Path("/tmp/webtest/" + re.sub(r"\W", "_", url) + ".html").write_bytes(r.content)
