"""Library code never spells a command-line flag (docs/architecture.md): messages name a
setting through ``auditor.errors.setting(name)`` and the CLI spells it while a command runs, so
the same message says ``--item-ids`` on the command line and ``item_ids`` to a library
caller or in a batch manifest.

The check walks every module of ``auditor`` outside ``auditor/cli/`` and looks at the
string constants a running program can show: every string literal and every literal part
of an f-string, except docstrings (a string standing alone as a statement: module, class,
function and attribute docstrings, never shown at run time).
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "auditor"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]+")
"""A token that looks like a long command-line option: ``--item-ids``, not ``a--b`` or ``---``."""
BUILT_FLAG = re.compile(r"(?<![\w-])--$")
"""An f-string literal part ending in ``--`` right before a replacement field: ``f"--{name}"``."""

ALLOWED: dict[str, set[str]] = {
    # CSS custom properties (--ink, --muted, ...) of the HTML report's style sheet.
    "report/html.py": {"CSS"},
}
"""Module (relative to ``auditor/``) -> names of its module-level constants whose strings
are not flags. Only whole named constants are allowed, never a file."""


def _exempt_nodes(tree: ast.Module, allowed_names: set[str]) -> set[int]:
    """ids of the string nodes that are docstrings or inside an allowed constant."""
    exempt: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            exempt.add(id(node.value))
    for node in tree.body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        if value is not None and any(isinstance(t, ast.Name) and t.id in allowed_names for t in targets):
            exempt.update(id(child) for child in ast.walk(value))
    return exempt


def flag_strings(source: str, allowed_names: set[str] | frozenset[str] = frozenset()) -> list[tuple[int, str]]:
    """(line, token) of every flag-looking token in the non-docstring strings of ``source``."""
    tree = ast.parse(source)
    exempt = _exempt_nodes(tree, set(allowed_names))
    found: list[tuple[int, str]] = []
    in_fstring: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            # literal parts of an f-string: reported at the f-string's line
            for at, part in enumerate(node.values):
                in_fstring.add(id(part))
                if isinstance(part, ast.Constant) and isinstance(part.value, str) and id(node) not in exempt:
                    found += [(node.lineno, m.group()) for m in FLAG.finditer(part.value)]
                    following = node.values[at + 1] if at + 1 < len(node.values) else None
                    if isinstance(following, ast.FormattedValue) and BUILT_FLAG.search(part.value):
                        found.append((node.lineno, "--{" + ast.unparse(following.value) + "}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in exempt and id(node) not in in_fstring:
                found += [(node.lineno, m.group()) for m in FLAG.finditer(node.value)]
    return sorted(found)


def test_the_scanner_finds_flags_in_messages_only() -> None:
    source = textwrap.dedent(
        '''
        """Module docstring: --trust-pickle is fine here."""
        CSS = ":root { --ink: #000; }"
        OTHER = "--ink"

        class Settings:
            """Class docstring --epochs."""

            lr: float = 1.0
            """Attribute docstring --lr."""

        def check(value):
            """Function docstring --batch-size."""
            if value < 0:
                raise ValueError(f"{value} is negative: lower --lr or pass "
                                 "--weight-decay 0")
            label = "a--b, ---, -- and --Upper are not flags"
            built = f"--{name.replace('_', '-')} is built; a--{name} and -- {name} are not"
            return f"use {setting('init_std')}" + "--xy"
        '''
    )
    # Implicitly joined literals are one f-string node: both tokens are on its first line.
    assert flag_strings(source, {"CSS"}) == [
        (4, "--ink"), (15, "--lr"), (15, "--weight-decay"), (18, "--{name.replace('_', '-')}"), (19, "--xy"),
    ]
    assert (3, "--ink") in flag_strings(source)  # the constant is exempt only when named


def test_no_library_module_spells_a_cli_flag() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith("cli/"):
            continue
        for line, token in flag_strings(path.read_text(encoding="utf-8"), ALLOWED.get(relative, set())):
            offenders.append(f"auditor/{relative}:{line}: {token}")
    assert not offenders, (
        "library code spells command-line flags; name the setting with auditor.errors.setting(name) "
        "and register its spelling in option_names() (auditor/cli/_common.py):\n" + "\n".join(offenders)
    )


def test_every_allowed_constant_exists() -> None:
    """The allow-list names real constants (a renamed one would silently stop being checked)."""
    for relative, names in ALLOWED.items():
        tree = ast.parse((PACKAGE / relative).read_text(encoding="utf-8"))
        defined = {
            t.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(t, ast.Name)
        }
        assert names <= defined, f"auditor/{relative} defines none of {sorted(names - defined)}"
