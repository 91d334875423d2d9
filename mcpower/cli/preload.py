"""A search's query model, loaded in a thread while the rest of the command starts.

A cold `mcpower search` waits on two things: Python importing code (typer, pydantic, mcpower's
modules, numpy, faiss; one thread at a time, the GIL) and ONNX Runtime opening the model (~0.25 s,
mostly with the GIL released). They overlap when the model starts loading first:

- :func:`head_start`, called by :func:`mcpower.cli.main` before typer, pydantic or any command is
  imported, starts loading the operator's model (MCPOWER_MODEL, the packaged one by default) when
  the command looks like a search that will embed its query. It reads the raw environment only
  (env.py): a guess, which costs some CPU when wrong and never changes an answer.
- :func:`query_model` gives the registry what loads query models: the model started early, if the
  validated Settings name the same model and cache folder and the dataset's manifest names that
  model; else one it starts loading now. A dataset of another model loads its own when asked, and
  a search that needs no model does not wait for one.

benchmarks/suite/cold.py measures the effect against the floor (docs/benchmarks.md).
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING

from mcpower import env
from mcpower.defaults import DEFAULT_MODEL, MANIFEST_NAME, MAX_MANIFEST_BYTES, is_valid_id

if TYPE_CHECKING:
    from mcpower.config import Settings
    from mcpower.embedding import Embedder
    from mcpower.registry import EmbedderFactory


class _Loading:
    """One model loading in a thread; :meth:`get` waits for it and raises what it raised."""

    def __init__(self, model: str, cache_dir: Path, allowed: Collection[str]) -> None:
        self.model, self.cache_dir = model, cache_dir
        self._done = threading.Event()
        self._result: Embedder | None = None
        self._error: BaseException | None = None
        # Not a daemon: a command that fails before it needs the model (an unknown dataset, a bad
        # option) must not end the interpreter under ONNX Runtime while it opens the session,
        # which aborts the process (std::bad_alloc, exit 134). It waits the load out, ~0.3 s.
        threading.Thread(target=self._load, args=(allowed,), name="mcpower-preload", daemon=False).start()

    def _load(self, allowed: Collection[str]) -> None:
        try:
            from mcpower.embedding import load_query_embedder

            self._result = load_query_embedder(self.model, self.cache_dir, allowed)
        except BaseException as e:  # handed to whoever asks for the model
            self._error = e
        finally:
            self._done.set()

    def get(self) -> Embedder:
        self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


_early: _Loading | None = None


def head_start(argv: list[str]) -> None:
    """Start loading the operator's query model if ``argv`` (the words after `mcpower`) is a search
    that will embed its query: `search`, without --help and without --mode keyword."""
    global _early
    if _embeds_query(argv):
        # The libraries are imported here, before the thread starts: imported there, they would
        # share the GIL with typer's and pydantic's imports and delay the part that overlaps
        # them, the ONNX session opening (FastAPI docs search: 1.45x the floor -> 0.98x, 2 cores).
        import onnxruntime  # noqa: F401
        import tokenizers  # noqa: F401

        import mcpower.embedding.onnx  # noqa: F401
        from mcpower.cli.notices import setup_logging

        setup_logging()  # before the thread: its first export is announced, not waited out in silence
        model = env.raw("model") or DEFAULT_MODEL
        cache_dir = Path(env.raw("cache_dir") or env.default_cache_dir())
        _early = _Loading(model, cache_dir, [model])  # the operator's own model is always allowed


def _embeds_query(argv: list[str]) -> bool:
    if not argv or argv[0] != "search" or "--help" in argv or "--mode=keyword" in argv:
        return False
    return not any(word == "--mode" and following == "keyword" for word, following in itertools.pairwise(argv))


def query_model(s: Settings, dataset: str | None) -> EmbedderFactory | None:
    """The registry's embedder factory for a search of ``dataset`` (None: every dataset) that embeds
    its query; None leaves loading to the registry (a dataset of another model, or --all without a
    head start)."""
    global _early
    early, _early = _early, None  # taken once: a later command in this process starts afresh
    if early is not None and (early.model, early.cache_dir) != (s.query_model, s.cache_dir):
        early = None  # the environment did not say what Settings say: not the operator's model
    if dataset is not None and _model_hint(s.datasets_dir, dataset) != s.query_model:
        return None
    if early is None:
        if dataset is None:
            return None
        early = _Loading(s.query_model, s.cache_dir, s.query_models())
    loading = early

    def factory(model: str) -> Embedder:
        if model != s.query_model:  # what the Registry would do itself
            from mcpower.embedding import load_query_embedder

            return load_query_embedder(model, s.cache_dir, s.query_models())
        return loading.get()

    return factory


def _model_hint(root: Path, dataset: str) -> str | None:
    """The model a local dataset's manifest names, read as plain JSON without loading the manifest
    machinery: only a hint (the registry reads and checks the manifest in full), None if unsure."""
    if not is_valid_id(dataset):
        return None
    try:
        with open(root / dataset / MANIFEST_NAME, "rb") as f:
            data = json.loads(f.read(MAX_MANIFEST_BYTES))
        model = data["embedding"]["model"]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return model if isinstance(model, str) else None
