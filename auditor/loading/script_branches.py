"""A TorchScript ``forward()`` with its branches on recorded flags folded (text only, never run).

A module written with a config flag (``if self.cos: u = F.normalize(u) ...``) keeps both
branches in its saved code, and the flag's value in the archive's ``data.pkl`` (read by the
restricted unpickler, like the tensors). TorchScript saves ``if self.cos:`` as::

    cos = self.cos
    if cos:
      u1 = _0(u, 2., -1, ...)
      u0 = u1
    else:
      u0 = u

Where the flag is a ``bool`` the archive records, the ``if`` is replaced by the branch the
module takes, and the plain renames that join the branches (``u0 = u1``, ``u0, i0 = u, i``)
are resolved, so :mod:`auditor.loading.script_scoring` reads the code the module runs: the
normalisation of a branch not taken is no doubt. A condition on anything else stays as it
is (and a normalisation inside it stays a ``scoring_doubt``).
"""

from __future__ import annotations

import re
from typing import Any

from auditor.loading.safe_pickle import placeholder_attrs

MAX_LINES = 2_000
"""A longer ``forward()`` is not folded (the renames are resolved in quadratic time)."""
_SELF = re.compile(r"def forward\((\w+)\b")
_IF = re.compile(r"^( *)if (torch\.__not__\()?(\w+)\)?:$")
_RENAME = re.compile(r"^ +(\w+(?:, \w+)*) = (\w+(?:, \w+)*)$")
_ASSIGNED = re.compile(r"^ +([\w, ]+?) = ", re.M)
_UNUSED_ALIAS = re.compile(r"^ +(\w+) = [\w.]+$")


def recorded_flags(root: Any) -> dict[str, bool]:
    """The root module's ``bool`` attributes as the archive records them."""
    attrs = placeholder_attrs(root) or {}
    return {name: value for name, value in attrs.items() if isinstance(value, bool) and name != "training"}


def folded_forward(forward: str, flags: dict[str, bool]) -> str:
    """``forward`` with each ``if`` on a recorded flag replaced by the branch taken (module docstring)."""
    found = _SELF.search(forward)
    if found is None or not flags or forward.count("\n") > MAX_LINES:  # a hostile size: left as it is
        return forward
    held = {local: flags[attr] for local, attr in re.findall(rf"^ +(\w+) = {found.group(1)}\.(\w+)$", forward, re.M)
            if attr in flags}  # fmt: skip
    lines = forward.split("\n")
    while (folded := _fold_one(lines, held)) is not None:
        lines = folded
    return _tidy(lines) if lines != forward.split("\n") else forward


def _fold_one(lines: list[str], held: dict[str, bool]) -> list[str] | None:
    """``lines`` with the first ``if`` on a held flag folded (None: there is none)."""
    for at, line in enumerate(lines):
        match = _IF.match(line)
        if match is None or match.group(3) not in held:
            continue
        indent = len(match.group(1))
        then_end = _block_end(lines, at + 1, indent)
        else_end = then_end
        if then_end < len(lines) and lines[then_end] == " " * indent + "else:":
            else_end = _block_end(lines, then_end + 1, indent)
        taken = held[match.group(3)] != bool(match.group(2))
        body = lines[at + 1 : then_end] if taken else lines[then_end + 1 : else_end]
        return lines[:at] + [b[2:] for b in body if b.strip() != "pass"] + lines[else_end:]
    return None


def _block_end(lines: list[str], start: int, indent: int) -> int:
    end = start
    while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    return end


def _tidy(lines: list[str]) -> str:
    """Renames assigned once resolved (``u0 = u``), then aliases no longer used dropped."""
    text = "\n".join(lines)
    while (rename := _rename(text)) is not None:
        line, pairs = rename
        text = text.replace(line + "\n", "", 1)
        for n, o in pairs:
            text = re.sub(rf"\b{n}\b", o, text)
    lines = text.split("\n")
    unused = {at for at, line in enumerate(lines) if (alias := _UNUSED_ALIAS.match(line)) and not any(
        re.search(rf"\b{alias.group(1)}\b", other) for other in lines[:at] + lines[at + 1 :])}  # fmt: skip
    return "\n".join(line for at, line in enumerate(lines) if at not in unused)


def _rename(text: str) -> tuple[str, list[tuple[str, str]]] | None:
    """The first plain rename whose new names are each assigned once (a branch join), if any."""
    assigned = [name for names in _ASSIGNED.findall(text) for name in names.split(", ")]
    for line in text.split("\n"):
        if (match := _RENAME.match(line)) is not None:
            new, old = match.group(1).split(", "), match.group(2).split(", ")
            if len(new) == len(old) and all(assigned.count(n) == 1 for n in new):
                return line, list(zip(new, old))
    return None


__all__ = ["MAX_LINES", "folded_forward", "recorded_flags"]
