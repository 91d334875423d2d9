"""An ingest's plan — what it reads, skips, keeps and embeds, and what the embedding will cost — and
the embedding itself: new chunks' vectors taken from the embedding store where it has them, the
rest embedded a slice at a time, each slice written to the store before the next starts
(mcpower/embedding/store.py), so an interrupted ingest resumes and loses at most a slice. An
ingest with at most a slice of new chunks loses no more than that without the store, and leaves it
closed: a small re-ingest (a save under --watch) costs no store file, no transaction, no fsync.

The time is estimated from this machine's own rate: the one the embedding store recorded for the
model at the last ingest that embedded enough to time, else one measured on ``MEASURE`` chunks
spread over the work (the first slice of the run; a dry run embeds only those, and keeps them).
The rate is in characters a second, so a corpus of longer or shorter chunks is estimated fairly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from mcpower.errors import IngestError

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from mcpower.embedding import Embedder
    from mcpower.embedding.store import EmbeddingStore

logger = logging.getLogger(__name__)

SLICE = 64  # chunks embedded, then stored, at a time: an interruption loses at most this many
MEASURE = 16  # chunks timed when no rate is recorded: a few seconds on a laptop CPU
PLAN_SHOWN = 64  # `mcpower ingest` says the plan before embedding more chunks than this

# (phase, done, total): "waiting" (once, when --wait has to wait for another ingest), "files", "chunks"
ProgressCallback = Callable[[str, int, int], None]


@dataclass
class IngestPlan:
    """What an ingest will do (a dry run's answer), said before its embedding starts."""

    documents: int = 0  # in the version it builds
    chunks: int = 0
    read: int = 0  # files read and chunked: new or changed
    unchanged: int = 0  # documents carried over from the previous version as they were
    duplicates: int = 0  # files skipped as duplicates of a document kept (mcpower/duplicates.py)
    skipped: int = 0  # files skipped for another reason
    carried: int = 0  # chunks whose vectors come from the previous version
    from_store: int = 0  # chunks whose vectors come from the embedding store
    to_embed: int = 0  # chunks the model embeds
    stored: bool = False  # whether they go to the embedding store (an interruption keeps them)
    removed: list[str] = field(default_factory=list)  # documents of the previous version it leaves out
    estimate_seconds: float | None = None  # to embed ``to_embed`` chunks
    chunks_per_second: float | None = None  # the rate the estimate assumes
    rate_basis: str = ""  # where that rate comes from
    sampled: int = 0  # chunks a dry run embedded to measure the rate
    sample_kept: bool = False  # and whether they went to the embedding store (the real run takes them)

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        if self.estimate_seconds is not None:
            data["estimate_seconds"] = round(self.estimate_seconds, 1)
        if self.chunks_per_second is not None:
            data["chunks_per_second"] = round(self.chunks_per_second, 2)
        return data

    def estimate(self, chars: int, chars_per_second: float, basis: str) -> None:
        """Set the time of embedding ``chars`` characters in ``to_embed`` chunks at that rate."""
        self.estimate_seconds = chars / chars_per_second
        self.chunks_per_second = self.to_embed / self.estimate_seconds if self.estimate_seconds > 0 else None
        self.rate_basis = basis


def embed_new(
    emb: Embedder,
    texts: Sequence[str],
    out: NDArray[np.float32],
    rows: Sequence[int],
    open_store: Callable[[], EmbeddingStore | None] | None,
    plan: IngestPlan,
    *,
    reuse_stored: bool = True,
    dry_run: bool = False,
    progress: ProgressCallback | None = None,
    announce: Callable[[IngestPlan], None] | None = None,
) -> int:
    """Fill ``out[rows[i]]`` with the vector of ``texts[i]``: from the store (``open_store()``,
    asked only for more than a slice of texts) when it holds a sound one (unless ``reuse_stored``
    is False: ``--full``), else embedded a slice at a time, each slice stored. Calls ``announce(plan)`` once, when the plan and its estimate are known (before
    the first chunk is embedded, or after the timed first slice). Returns how many were embedded.

    A dry run embeds nothing, but when no rate is recorded a timed sample of ``MEASURE`` chunks.

    Raises:
        IngestError: the model gave non-finite vectors.
    """
    store = open_store() if open_store is not None and len(texts) > SLICE else None
    keys = store.keys(texts) if store is not None else []
    if store is None or not reuse_stored:
        stored = np.zeros(len(texts), dtype=bool)
    else:  # a dry run only counts them; they are read, and checked, when they are used
        stored = store.has(keys) if dry_run else store.load(keys, out, rows)
    todo = [int(i) for i in np.flatnonzero(~stored)]
    plan.from_store, plan.to_embed = len(texts) - len(todo), len(todo)
    plan.stored = store is not None and store.usable
    chars = sum(len(texts[i]) for i in todo)
    recorded = store.rate() if store is not None else None
    if recorded is not None and todo:
        plan.estimate(chars, recorded[0], f"recorded on this machine on {recorded[1]}")
    todo.sort(key=lambda i: -len(texts[i]))  # longest first: each batch pads its texts alike
    # Without a recorded rate, the first slice is a sample spread over the lengths, and is timed.
    first = todo[:: max(1, len(todo) // MEASURE)][:MEASURE] if recorded is None and todo else []
    if dry_run:
        if first:
            started = time.perf_counter()
            _embed_slice(emb, texts, first, keys, out, rows, store, None)
            plan.sampled, plan.sample_kept = len(first), store is not None and store.usable
            measured = time.perf_counter() - started
            plan.estimate(chars, _rate(texts, first, measured), f"measured on {len(first)} chunks")
        if announce:
            announce(plan)
        return 0
    if not first and announce:
        announce(plan)
    picked = set(first)
    rest = [i for i in todo if i not in picked]
    slices = ([first] if first else []) + [rest[s : s + SLICE] for s in range(0, len(rest), SLICE)]
    done = 0
    shown = not first  # progress waits for the plan, so its line comes before the bar

    def tick(n: int) -> None:
        nonlocal done
        done += n
        if progress and shown:
            progress("chunks", done, len(todo))

    if progress and shown and todo:
        progress("chunks", 0, len(todo))
    started = time.perf_counter()
    for piece in slices:
        t0 = time.perf_counter()
        _embed_slice(emb, texts, piece, keys, out, rows, store, tick)
        if not shown:
            shown = True
            plan.estimate(chars, _rate(texts, piece, time.perf_counter() - t0), f"measured on {len(piece)} chunks")
            if announce:
                announce(plan)
            if progress:
                progress("chunks", done, len(todo))
    if store is not None and len(todo) >= SLICE:
        store.record_rate(chars, time.perf_counter() - started)
    return len(todo)


def _embed_slice(
    emb: Embedder,
    texts: Sequence[str],
    piece: list[int],
    keys: list[bytes],
    out: NDArray[np.float32],
    rows: Sequence[int],
    store: EmbeddingStore | None,
    tick: Callable[[int], None] | None,
) -> None:
    vectors = np.asarray(emb.embed_documents([texts[i] for i in piece], progress=tick), dtype=np.float32)
    if vectors.shape != (len(piece), out.shape[1]):
        raise IngestError(f"the model gave vectors of shape {vectors.shape}, not ({len(piece)}, {out.shape[1]})")
    if not np.isfinite(vectors).all():
        raise IngestError("the model produced non-finite vectors; the model files may be damaged")
    if store is not None:
        store.put([keys[i] for i in piece], vectors)
    out[[rows[i] for i in piece]] = vectors


def _rate(texts: Sequence[str], piece: list[int], seconds: float) -> float:
    """Characters a second (a floor on the time keeps a too-fast clock from dividing by zero)."""
    return sum(len(texts[i]) for i in piece) / max(seconds, 1e-6)
