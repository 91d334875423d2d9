"""The scoped registry view (mcpower/server/auth/scoped.py, callers.visible): a caller limited to some datasets
sees only those, and every other id answers exactly as an unknown one. Over HTTP, for every entry
point: test_authorization.py."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeEmbedder

from mcpower import search
from mcpower.errors import NO_DATASETS_YET, DatasetNotFoundError, McpowerError, ResultNotFoundError
from mcpower.registry import Registry
from mcpower.server.auth.callers import LOCAL, Caller, visible
from mcpower.server.auth.scoped import ScopedRegistry


def error_of(call: object, dataset_id: str) -> str:
    """The message ``call(dataset_id)`` fails with, the id written as ID."""
    with pytest.raises(McpowerError) as info:
        call(dataset_id)  # type: ignore[operator]
    return f"{info.value.code}: {info.value.message}".replace(repr(dataset_id), "ID")


def test_every_public_method_of_the_registry_is_answered_by_the_view() -> None:
    """A view has none of the registry's private state: a public method it inherited unchanged would
    read it (or, worse, answer for every dataset). Only methods written over the view's own public
    ones (entries, unreadable) may be inherited."""
    derived = {"ready_ids", "not_found", "unreadable"}  # call self.entries(): the view's own
    public = {n for n, v in inspect.getmembers(Registry, inspect.isfunction) if not n.startswith("_")}
    own = {n for n in vars(ScopedRegistry) if not n.startswith("_")}
    assert public - derived <= own, sorted(public - derived - own)
    for name in derived:
        source = inspect.getsource(getattr(Registry, name))
        assert "self._" not in source, name


def test_all_datasets_and_local_callers_get_the_registry_itself(registry: Registry) -> None:
    assert visible(registry, LOCAL) is registry
    assert visible(registry, Caller("token", None)) is registry


def test_a_restricted_caller_sees_only_its_datasets(registry: Registry) -> None:
    view = visible(registry, Caller("cook", ("rec*",)))
    assert [e.id for e in view.entries()] == ["recipes"]
    assert [e.id for e in view.scan()] == ["recipes"]
    assert view.ready_ids() == ["recipes"]
    assert view.store("recipes").info.id == "recipes"
    assert view.entry("recipes").id == "recipes"
    assert view.catalog("recipes") is registry.catalog("recipes")
    assert view.catalogs == []


def test_an_unpermitted_dataset_fails_exactly_as_an_unknown_one(registry: Registry) -> None:
    view = visible(registry, Caller("cook", ("recipes", "hand-nothing-*")))
    for call in (view.store, view.entry, view.catalog):
        hidden = error_of(call, "handbook")
        assert hidden == error_of(call, "no-such-dataset")
        assert hidden == error_of(call, "hand-nothing-here")  # permitted by pattern, but not there
        assert "handbook" not in hidden and "recipes" in hidden
    # The registry itself names both.
    with pytest.raises(DatasetNotFoundError, match="handbook, recipes"):
        registry.store("nope")


def test_searches_of_all_cover_only_the_callers_datasets(registry: Registry) -> None:
    view = visible(registry, Caller("cook", ("recipes",)))
    everything = search.search(registry, "pumpkin widget", mode="keyword")
    assert set(everything.meta.datasets) == {"handbook", "recipes"}
    scoped = search.search(view, "pumpkin widget", mode="keyword")
    assert scoped.meta.datasets == ["recipes"]
    assert {r.dataset for r in scoped.results} == {"recipes"}


def test_result_ids_of_other_datasets_are_unknown_results(registry: Registry) -> None:
    hit = search.search(registry, "widget", dataset="handbook", mode="keyword").results[0]
    view = visible(registry, Caller("cook", ("recipes",)))
    made_up = hit.result_id.replace("handbook:", "nowhere:")
    for lookup in (search.get_metadata, search.get_source):
        with pytest.raises(ResultNotFoundError) as hidden:
            lookup(view, hit.result_id)
        with pytest.raises(ResultNotFoundError) as unknown:
            lookup(view, made_up)
        assert hidden.value.message.replace("handbook", "X") == unknown.value.message.replace("nowhere", "X")
        assert lookup(registry, hit.result_id).dataset == "handbook"


def test_a_caller_with_no_matching_dataset_sees_an_empty_server(registry: Registry, tmp_path: Path) -> None:
    """Its answers are an empty server's, told that its token grants none (issue 28, item 5: not to
    create a dataset) — the same whether the server has other datasets or none at all."""
    view = visible(registry, Caller("nobody", ("hr-*",)))
    empty = Registry(tmp_path / "empty", embedder_factory=lambda model: FakeEmbedder())
    view_of_empty = visible(empty, Caller("nobody", ("hr-*",)))
    assert view.entries() == [] and view.unreadable() == []
    assert view.none_here().startswith("this token grants no dataset on this server (it names 'hr-*')")

    def said(registry: Registry) -> tuple[str, dict[str, Any]]:
        answer = search.search(registry, "pumpkin", mode="keyword").model_dump(exclude={"meta": {"duration_ms"}})
        return error_of(registry.store, "recipes"), answer

    told = said(view)
    assert told == said(view_of_empty)  # nothing says whether other datasets exist
    assert json.dumps(told).replace(view.none_here(), NO_DATASETS_YET) == json.dumps(said(empty))
