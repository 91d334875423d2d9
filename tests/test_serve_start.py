"""What `serve --http` starts once it listens (server/http.py ``when_listening``): the warm-up of
the datasets and their query model, in the background, and the start message (cli/serve_banner.py).
The end-to-end check of the message, on a real server, is in test_authorization.py."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import FakeEmbedder, join_warm_up

from mcpower.cli.serve_banner import start_message
from mcpower.embedding import Embedder
from mcpower.errors import EmbeddingModelError
from mcpower.registry import Registry
from mcpower.server.app import create_server
from mcpower.server.auth.oauth import OAuthOptions
from mcpower.server.http import HttpOptions, when_listening


def _registry(datasets_dir: Path, factory: Callable[[str], Embedder]) -> Registry:
    return Registry(datasets_dir, embedder_factory=factory, allowed_models=[FakeEmbedder.model_name])


def test_listening_starts_the_warm_up_in_the_background_then_announces(ingested: tuple[Path, Registry]) -> None:
    datasets_dir, _ = ingested
    release, loading = threading.Event(), threading.Event()
    announced: list[tuple[str, int]] = []
    loads: list[bool] = []  # per load: whether the start message was already out

    def factory(model: str) -> Embedder:
        loading.set()
        release.wait(30)  # held until the test lets it go: when_listening must not wait for it
        loads.append(bool(announced))
        return FakeEmbedder()

    registry = _registry(datasets_dir, factory)
    server = create_server(registry)
    try:
        when_listening(server, lambda host, port: announced.append((host, port)), "127.0.0.1", 8765)
        assert announced == [("127.0.0.1", 8765)]
        assert loading.wait(30)  # the model is loading, in another thread
        release.set()
        join_warm_up()
        assert loads == [True]
        assert server.warm.start() is None  # once: the first MCP request does not start it again
        info = registry.entry("docs").info
        assert info is not None
        registry.embedder_for(info).embed_query("toolkit")  # the first search: the model is there already
        assert loads == [True]
    finally:
        release.set()
        server.close()
        registry.close()


def test_a_model_that_cannot_load_is_logged_and_the_first_search_says_so(
    ingested: tuple[Path, Registry], caplog: pytest.LogCaptureFixture
) -> None:
    datasets_dir, _ = ingested

    def factory(model: str) -> Embedder:
        raise EmbeddingModelError(f"model {model!r} is not installed here")

    caplog.set_level(logging.INFO)
    registry = _registry(datasets_dir, factory)
    server = create_server(registry)
    try:
        when_listening(server, None, "127.0.0.1", 8765)  # the server still starts
        join_warm_up()
        errors = [r for r in caplog.records if getattr(r, "event", None) == "dataset.error"]
        assert errors and "is not installed here" in errors[0].getMessage()
        info = registry.entry("docs").info
        assert info is not None
        with pytest.raises(EmbeddingModelError, match="is not installed here"):
            registry.embedder_for(info)
    finally:
        server.close()
        registry.close()


def test_the_start_message_without_a_token_with_oauth_and_without_pages() -> None:
    open_, _ = start_message(HttpOptions(token=None), "127.0.0.1", 8765)
    assert "web pages at http://127.0.0.1:8765/ (search: http://127.0.0.1:8765/search)" in open_
    assert "no token needed" in open_ and "mcpower token add NAME" in open_
    oauth, fields = start_message(HttpOptions(token=None, oauth=OAuthOptions("https://id.example")), "::1", 9000)
    assert "a token is required: an OAuth access token from https://id.example" in oauth
    assert "sign in at http://[::1]:9000/login" in oauth and fields["oauth_issuer"] == "https://id.example"
    bare, fields = start_message(HttpOptions(token="s3cret-token-value", web=False), "127.0.0.1", 8765)
    assert "no web pages (--no-web)" in bare and "Authorization: Bearer" in bare and "/login" not in bare
    assert fields["web_url"] is None and "s3cret" not in bare  # never the token itself
