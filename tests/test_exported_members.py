"""mcpower.__all__ lists exactly the public API (as encode/httpx tests/test_exported_members.py does)."""

from __future__ import annotations

import inspect
import subprocess
import sys
from types import ModuleType

import pytest

import mcpower
from mcpower import errors


def test_all_is_sorted_and_unique() -> None:
    assert mcpower.__all__ == sorted(set(mcpower.__all__))


@pytest.mark.parametrize("name", mcpower.__all__)
def test_every_exported_name_resolves_to_mcpower_code(name: str) -> None:
    value = getattr(mcpower, name)

    if name == "__version__":
        assert isinstance(value, str)
    else:
        assert value.__module__.startswith("mcpower.")
        assert value.__name__ == name


def test_all_matches_the_public_members() -> None:
    for name in mcpower.__all__:
        getattr(mcpower, name)  # names load lazily; bring them all in

    public = {
        name
        for name, value in vars(mcpower).items()
        if not name.startswith("_")
        and not isinstance(value, ModuleType)
        and getattr(value, "__module__", "").startswith("mcpower")
    }
    assert public | {"__version__"} == set(mcpower.__all__)


@pytest.mark.parametrize("first", ["import mcpower.ingestion", "mcpower.IngestReport"])
def test_ingest_is_the_function_whatever_was_loaded_first(first: str) -> None:
    code = f"import mcpower; {first}; import mcpower; print(callable(mcpower.ingest))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)

    assert out.stdout.strip() == "True"


def test_star_import_gives_the_public_api() -> None:
    namespace: dict[str, object] = {}
    exec("from mcpower import *", namespace)

    assert set(namespace) - {"__builtins__"} == set(mcpower.__all__)


def test_unknown_attribute_raises() -> None:
    with pytest.raises(AttributeError):
        _ = mcpower.NoSuchThing  # type: ignore[attr-defined]


def test_every_error_class_is_exported() -> None:
    error_classes = {
        name
        for name, value in vars(errors).items()
        if inspect.isclass(value) and issubclass(value, errors.McpowerError)
    }

    assert error_classes <= set(mcpower.__all__)
    codes = [getattr(mcpower, name).code for name in error_classes]
    assert len(codes) == len(set(codes))  # every error has its own code
