"""The shape of the package: rooms, import directions, module sizes (STYLE.md, docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mcpower"
MAX_LINES = 420  # "no module over ~400 lines"


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path) -> list[tuple[str, list[str]]]:
    """(module, imported names) of every import in the module, outside `if TYPE_CHECKING:` blocks."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, list[str]]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return
        if isinstance(node, ast.Import):
            found.extend((a.name, []) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            found.append((base, [a.name for a in node.names]))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


MODULES = modules()


def internal_edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for name, path in MODULES.items():
        for module, names in imports(name, path):
            if not module.startswith("mcpower"):
                continue
            targets = [f"{module}.{n}" for n in names if f"{module}.{n}" in MODULES] or [module]
            edges[name].update(t for t in targets if t in MODULES and t != name)
    return edges


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_is_over_400_lines(name: str) -> None:
    assert len(MODULES[name].read_text().splitlines()) <= MAX_LINES


def test_typer_only_in_the_cli_and_mcp_only_in_the_server() -> None:
    for name, path in MODULES.items():
        roots = {module.split(".")[0] for module, _ in imports(name, path)}
        if "typer" in roots:
            assert name.startswith("mcpower.cli"), name
        if roots & {"mcp", "mcp_types"}:
            assert name.startswith("mcpower.server"), name


DOORS = ("mcpower.cli", "mcpower.server", "mcpower.web", "mcpower.__main__")


def test_the_core_never_imports_the_cli_or_the_server() -> None:
    for name, targets in internal_edges().items():
        if not name.startswith(DOORS):
            assert not {t for t in targets if t.startswith(DOORS)}, name


def test_the_web_pages_are_reached_only_through_the_http_server() -> None:
    """mcpower/web is a door over the server's tools, built only with the HTTP app."""
    for name, targets in internal_edges().items():
        if any(t.startswith("mcpower.web") for t in targets) and not name.startswith("mcpower.web"):
            assert name == "mcpower.server.http", name
        if name.startswith("mcpower.web"):
            assert not {t for t in targets if t.startswith("mcpower.cli")}, name


def test_the_auth_room_is_below_the_transports() -> None:
    """mcpower/server/auth is the boundary the transports call: it never reaches back into them
    (http, app, sessions, metrics ...) nor into the web pages, so one folder holds every access rule."""
    auth = [name for name in MODULES if name.startswith("mcpower.server.auth")]
    assert {"mcpower.server.auth.gate", "mcpower.server.auth.callers", "mcpower.server.auth.scoped"} <= set(auth)
    for name, targets in internal_edges().items():
        if name.startswith("mcpower.server.auth"):
            outside = {t for t in targets if t.startswith(DOORS) and not t.startswith("mcpower.server.auth")}
            assert not outside - {"mcpower.server"}, (name, outside)


def test_no_module_imports_another_modules_private_names() -> None:
    for name, path in MODULES.items():
        for module, names in imports(name, path):
            if module.startswith("mcpower") and module != name:
                assert not [n for n in names if n.startswith("_") and not n.startswith("__")], (name, module)


def test_no_import_cycles() -> None:
    edges = internal_edges()
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def walk(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                pytest.fail("import cycle: " + " -> ".join([*path[path.index(nxt) :], nxt]))
            if nxt not in state:
                walk(nxt, [*path, nxt])
        state[node] = 2

    for start in sorted(edges):
        if start not in state:
            walk(start, [start])


def test_the_checker_sees_imports() -> None:
    """The rules above would pass vacuously if imports went unseen."""
    edges = internal_edges()
    assert "mcpower.store.local.store" in edges["mcpower.store.local.catalog"]  # a lazy import, inside a method
    assert "mcpower.registry" in edges["mcpower.search"]
    assert ("typer", []) in imports("mcpower.cli.app", MODULES["mcpower.cli.app"])
