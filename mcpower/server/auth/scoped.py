"""A registry limited to some datasets: what a caller who may read only those sees through every door.

:class:`ScopedRegistry` is a view over a :class:`~mcpower.registry.Registry`, sharing its state (the
datasets, the loaded stores and embedders, freshness): nothing is loaded twice, and a dataset
published or re-indexed shows in every view at once. Which datasets it shows is one predicate,
given by the server (``callers.allowed``); the view never decides itself.

A dataset the predicate refuses answers exactly as an id no catalog holds: the same
DatasetNotFoundError, listing only the ids the view shows and the catalog failures of its own
datasets, so neither a listing, an error message nor a "could not be read" reason names a dataset
the caller may not read. Searches of every dataset cover the view's datasets only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from mcpower.errors import DatasetNotFoundError
from mcpower.manifest import DatasetInfo
from mcpower.registry import Registry
from mcpower.store import Catalog, DatasetEntry, Store

if TYPE_CHECKING:
    from mcpower.embedding import Embedder

T = TypeVar("T")
MAX_NAMED = 8  # patterns of a token named in what a caller that sees no dataset is told


class ScopedRegistry(Registry):
    """The datasets of ``registry`` whose id ``permits`` accepts, as a registry.

    Every public method of Registry is answered here from the registry it views (a new one must be
    added here too: tests/test_scoped.py checks that none is left to the base class's state, which a
    view does not have). Cheap to make: one per request.
    """

    def __init__(
        self, registry: Registry, permits: Callable[[str], bool], granted: Sequence[str] = ()
    ) -> None:  # no super(): shares state
        self._base = registry
        self._permits = permits
        self._granted = tuple(granted)  # what the caller's token names, said when it shows nothing
        self.root = registry.root  # for redacting paths in messages; never read for datasets
        # No catalogs: a catalog reaches every dataset it holds, the hidden ones too.
        self.catalogs = []
        self.freshness = registry.freshness

    def none_here(self) -> str:
        """To a caller that sees no dataset: its token grants none here (whether or not the server
        has others, which this does not say), and what the token names, where a typo shows."""
        names = ", ".join(repr(p[:64]) for p in self._granted[:MAX_NAMED])
        if len(self._granted) > MAX_NAMED:
            names += f" and {len(self._granted) - MAX_NAMED} more"
        named = f" (it names {names})" if names else ""
        return (
            f"this token grants no dataset on this server{named}: ask whoever runs the server for a token "
            "that names the datasets you need (`mcpower token add NAME --datasets ID`)"
        )

    def permits(self, dataset_id: str) -> bool:
        """Whether the view shows the dataset ``dataset_id``."""
        return isinstance(dataset_id, str) and self._permits(dataset_id)

    def close(self) -> None:
        """Nothing: the stores are the viewed registry's, closed with it."""

    def scan(self) -> list[DatasetEntry]:
        return [e for e in self._base.scan() if self.permits(e.id)]

    def entries(self) -> list[DatasetEntry]:
        return [e for e in self._base.entries() if self.permits(e.id)]

    def entry(self, dataset_id: str) -> DatasetEntry:
        return self._shown(dataset_id, self._base.entry)

    def catalog(self, dataset_id: str) -> Catalog:
        return self._shown(dataset_id, self._base.catalog)

    def store(self, dataset_id: str) -> Store:
        return self._shown(dataset_id, self._base.store)

    def _shown(self, dataset_id: str, get: Callable[[str], T]) -> T:
        """``get(dataset_id)`` for a dataset the view shows; for any other id, and for an id the
        registry does not know, the error of an unknown id in this view."""
        if not self.permits(dataset_id):
            raise self.not_found(dataset_id)
        try:
            return get(dataset_id)
        except DatasetNotFoundError:  # it lists every dataset: say it again with the view's
            raise self.not_found(dataset_id) from None

    def embedder_for(self, info: DatasetInfo) -> Embedder:
        return self._base.embedder_for(info)

    def prefetch_embedder(self, dataset: str | None) -> None:
        if dataset is None:  # the model of the first dataset shown, not of the registry's first
            dataset = next((e.id for e in self.entries() if e.info is not None), None)
        if dataset is not None and self.permits(dataset):
            self._base.prefetch_embedder(dataset)

    def warm_up(self) -> None:
        """Warms the viewed registry: every dataset is the server's to load, whoever asks."""
        self._base.warm_up()
