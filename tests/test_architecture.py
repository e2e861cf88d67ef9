"""The layout rules of docs/architecture.md, checked on the source tree: every module of
``auditor`` has one job and stays short, and module-level imports never form a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "auditor"
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _top_level_imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """Modules of ``auditor`` imported at module level (not inside functions or TYPE_CHECKING)."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for child in [node] if not isinstance(node, ast.If) else node.body:
            if isinstance(child, ast.Import):
                names.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                names.add(child.module)
                names.update(f"{child.module}.{a.name}" for a in child.names)
    return {n for n in names if n in modules}


def test_no_module_is_longer_than_the_limit() -> None:
    long = {str(p.relative_to(PACKAGE.parent)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_module_level_imports_form_no_cycle() -> None:
    modules = _modules()
    graph = {name: _top_level_imports(path, modules) - {name} for name, path in modules.items()}
    # A package imports its submodules to re-export them: that edge is not a cycle.
    graph = {name: {d for d in deps if not d.startswith(name + ".")} for name, deps in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                pytest.fail("import cycle: " + " -> ".join(stack[stack.index(dep):] + [dep]))
            if dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)


def test_architecture_doc_lists_every_module() -> None:
    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    missing = [str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*.py")
               if str(p.relative_to(PACKAGE)) not in doc and p.name != "__main__.py"]
    assert not missing, missing
