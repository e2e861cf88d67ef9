"""The layout rules of docs/architecture.md, checked on the source tree (the AST, nothing
imported): every module of ``auditor`` has one job and stays short, functions stay short,
imports follow the layers and form no cycle, counting imports inside functions and under
``TYPE_CHECKING``, and a function imports a third-party module only when it is a heavy or
optional dependency named below."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "auditor"
MAX_LINES = 400
MAX_FUNCTION_LINES = 60
"""Lines of a function's code (its docstring, which is --help text for a command, not counted)."""

LONG_FUNCTIONS: dict[str, str] = {
    "retrieval/scorings.py:multi_scoring_topk": "the one-pass kernel's driver: tiles, floors and the exact "
    "merge in one loop whose state a split would have to pass around (tested for exactness as a whole)",
}
"""Functions allowed over the limit, each with why."""

LAZY_THIRD_PARTY = frozenset({
    "torch", "faiss", "matplotlib", "scipy", "sklearn", "pyarrow", "numpy", "dask", "distributed", "h5py", "onnx",
    "mlflow", "lightning", "keras", "tensorboard", "safetensors", "pandas", "rich", "pluggy", "recbole",
})
"""Third-party packages a function may import on first use: heavy to import (``popaudit --help``
and a refused option need none of them) or optional extras. ``ctypes`` too, for one
Linux-only call."""
LAZY_STDLIB = frozenset({"ctypes"})

LAYERS: tuple[tuple[str, str], ...] = (
    ("values", r"auditor(\.(errors|config|values|ranges|model|plugin_api|hookspecs|result|sections|served_section|summaries|flat|report_reader"
               r"|wording|io|output_guard|memory|progress|sampling|idmap|id_shifts|id_spelling|parallel|pool_server|optimizers|probe_results|alpha|lazy_names|trace_section|trace_schema|plugin_names|devices|plain|environment|protocol|mechanism|query_source))?"),
    ("plugins", r"auditor\.plugins(\.(calls|contributions|describe|lending|manager|prints))?"),
    ("load", r"auditor\.loading(\..+)?"),
    ("measure", r"auditor\.(metrics|retrieval|probes)(\..+)?|auditor\.evaluation"),
    ("judge", r"auditor\.conditions(\..+)?|auditor\.(verdict|verdict_text|harm|lists_verdict|advice|gate|gate_names|gate_reasons|gate_reasons_alone|tradeoff)"),
    ("audit", r"auditor\.(audit|audit_record|lists_audit)"),
    ("report", r"auditor\.report(\..+)?"),
    ("edges", r"auditor\.(batch|train|mitigation|monitor|diff)(\..+)?|auditor\.(mitigate|tracking|plugins\.renderers)"),
    ("face", r"auditor\.cli(\..+)?|auditor\.__main__"),
)
"""Each module's layer, lowest first: a module imports only modules of its own layer or
below; ``report`` imports only values and report modules (docs/architecture.md)."""


@cache
def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imported(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """Absolute dotted names an import statement names (``from a import b``: ``a`` and ``a.b``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    module = node.module or ""
    if node.level:
        base = package.split(".")[: len(package.split(".")) - node.level + 1]
        module = ".".join(base + ([module] if module else []))
    return [module, *(f"{module}.{a.name}" for a in node.names)]


@cache
def _graph() -> dict[str, dict[str, int]]:
    """Module -> {popaudit module it imports anywhere (top level, functions, TYPE_CHECKING): line}."""
    modules = _modules()
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for dotted in _imported(node, package):
                    while dotted and dotted not in modules:  # a name inside a module: the module
                        dotted = dotted.rpartition(".")[0]
                    # A package importing its own submodules re-exports them: not an edge back.
                    if dotted and dotted != name and not dotted.startswith(name + "."):
                        deps.setdefault(dotted, node.lineno)
        graph[name] = deps
    return graph


def _layer(module: str) -> int:
    for rank, (_, pattern) in enumerate(LAYERS):
        if re.fullmatch(pattern, module):
            return rank
    raise AssertionError(f"{module} is in no layer of LAYERS: add it where docs/architecture.md puts it")


def _functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((where, node))
    return found


def _code_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    lines = (function.end_lineno or function.lineno) - function.lineno + 1
    first = function.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        lines -= (first.end_lineno or first.lineno) - first.lineno + 1
    return lines


def test_no_module_is_longer_than_the_limit() -> None:
    long = {str(p.relative_to(PACKAGE.parent)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_no_function_is_longer_than_the_limit_outside_the_justified_list() -> None:
    long = {f"{where}:{fn.name}": n for where, fn in _functions() if (n := _code_lines(fn)) > MAX_FUNCTION_LINES}
    assert set(long) <= set(LONG_FUNCTIONS), {k: v for k, v in long.items() if k not in LONG_FUNCTIONS}
    # The list shrinks as functions are split: an entry that no longer applies is removed.
    assert set(LONG_FUNCTIONS) <= set(long), set(LONG_FUNCTIONS) - set(long)


def test_imports_form_no_cycle_counting_function_level_and_type_checking_ones() -> None:
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def strong(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for dep in graph[node]:
            if dep not in index:
                strong(dep)
                low[node] = min(low[node], low[dep])
            elif dep in stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while (member := stack.pop()) != node:
                component.append(member)
            if component:
                cycles.append(sorted([node, *component]))

    for name in sorted(graph):
        if name not in index:
            strong(name)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_imports_follow_the_layers() -> None:
    graph = _graph()
    report = next(rank for rank, (name, _) in enumerate(LAYERS) if name == "report")
    wrong = []
    for module, deps in sorted(graph.items()):
        rank = _layer(module)
        for dep, line in sorted(deps.items()):
            allowed = _layer(dep) == 0 or _layer(dep) == report if rank == report else _layer(dep) <= rank
            if not allowed:
                wrong.append(f"{module}:{line} imports {dep} ({LAYERS[rank][0]} -> {LAYERS[_layer(dep)][0]})")
    assert not wrong, wrong


def test_functions_import_only_heavy_or_optional_third_party_modules() -> None:
    wrong = []
    for where, fn in _functions():
        for node in ast.walk(fn):
            if isinstance(node, ast.Import):
                tops = [a.name.partition(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                tops = [(node.module or "").partition(".")[0]]
            else:
                continue
            wrong += [f"{where}:{node.lineno} {fn.name} imports {top}" for top in tops
                      if top not in ("auditor", *LAZY_THIRD_PARTY, *LAZY_STDLIB)]
    assert not wrong, "import these at module level (or list a heavy optional package): " + "; ".join(wrong)


def test_the_layer_table_places_every_module() -> None:
    for module in _modules():
        _layer(module)  # raises naming the module


def test_architecture_doc_lists_every_module() -> None:
    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    missing = [str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*.py")
               if str(p.relative_to(PACKAGE)) not in doc and p.name != "__main__.py"]
    assert not missing, missing


@pytest.mark.parametrize("cited", sorted(set(re.findall(r"`((?:auditor|tests|docs|benchmarks)/[\w/.-]+\.(?:py|md))`",
                                                        (PACKAGE.parent / "docs" / "architecture.md").read_text()))))
def test_files_the_architecture_doc_cites_exist(cited: str) -> None:
    assert (PACKAGE.parent / cited).exists(), cited
