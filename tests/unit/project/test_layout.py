"""The shape of the house: imports run one way (no module imports one that imports it back,
lazy imports included), and no production module carries fault injection."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
# Source folder -> the package it is installed as (pyproject's package-dir).
PACKAGES = {"hyperlaunch": "hyperlaunch", "train": "hyperlaunch.train", "templates": "hyperlaunch.templates", "env": "hyperlaunch.env"}


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    tree = ast.parse(path.read_text())
    skip = {
        id(child) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for child in ast.walk(node)
    }
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names)
    return {target for target in targets if target in known and target != name}


def test_imports_run_one_way() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, set(modules)) for name, path in modules.items()}
    # A package's __init__ importing its own submodules is not a cycle of the design.
    graph = {name: {t for t in targets if not name.startswith(t + ".")} for name, targets in graph.items()}
    cycles = []

    def visit(node: str, trail: list[str], done: set[str]) -> None:
        if node in trail:
            cycles.append(trail[trail.index(node) :] + [node])
            return
        if node in done:
            return
        for target in sorted(graph[node]):
            visit(target, [*trail, node], done)
        done.add(node)

    done: set[str] = set()
    for name in sorted(graph):
        visit(name, [], done)
    assert cycles == []


def test_no_production_module_injects_faults() -> None:
    for name, path in _modules().items():
        text = path.read_text()
        assert "HYPERLAUNCH_TEST_" not in text and "testing_hooks" not in text and "injected failure" not in text, name
