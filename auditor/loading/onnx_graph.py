"""What an ONNX graph computes from an embedding table's rows before they meet the other side.

From each ``Gather`` of a table, the nodes whose every runtime input derives from the
looked-up rows (or is a constant) belong to that table's tower; the first node that also
takes something else (the other tower's vectors, a graph input) is the score, where the
walk stops. Of the tower's nodes, shape-only ones change no vector; an L2 normalisation
(``LpNormalization`` with p = 2, or ``x / ReduceL2(x)`` as ``torch.onnx`` exports
``F.normalize``) makes the side a direction; every other node (a ``MatMul`` with a weight,
an ``Add``, an activation) makes the served vectors more than the table's rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from auditor.loading.pickle_scan import shown

SHAPE_ONLY = frozenset({"Cast", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Transpose", "Expand",
                        "Shape", "Gather"})
"""Ops that move or reshape values without changing a vector (a ``Gather`` after the
lookup picks rows or coordinates of it)."""
PASS_IDS = ("Cast", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Clip", "Mod")
"""Ops between a graph input and a Gather's indices that keep them the same ids."""
LAST_AXIS = (-1, 1)
"""The axis a vector's coordinates lie on, for a (rows, dim) lookup: -1, or 1."""
_DIVISOR = frozenset({"Clip", "Max", "Add", "Expand", "Unsqueeze", "Reshape", "Identity", "Cast"})
"""Ops between ``ReduceL2(x)`` and the ``Div`` that divides ``x`` by it (an epsilon, a broadcast)."""


@dataclass(frozen=True)
class Tower:
    """What one table's tower computes from its rows, as far as the graph shows."""

    ops: tuple[str, ...]
    """The nodes that change the vectors, in words (``MatMul with `W2```)."""
    normalised: bool
    """The side is L2-normalised before the score."""


def _side(graph: Any, table: str, constants: set[str]) -> tuple[list[Any], set[str]]:
    """The nodes whose every runtime input derives from ``table``'s looked-up rows, and the
    values they derive (the lookups' outputs included)."""
    derived = {n.output[0] for n in graph.node if n.op_type == "Gather" and n.input and n.input[0] == table and n.output}
    side: list[Any] = []
    for node in graph.node:  # ONNX keeps nodes in topological order
        if node.op_type == "Gather" and node.input and node.input[0] == table:
            continue
        runtime = [i for i in node.input if i and i not in constants]
        if runtime and all(i in derived for i in runtime):
            side.append(node)
            derived.update(node.output)
    return side, derived


def tower_of(graph: Any, table: str) -> Tower:
    """The tower of initializer ``table`` (looked up by one or more ``Gather`` nodes)."""
    constants = _constants(graph)
    side, _ = _side(graph, table, constants)
    producers = {o: n for n in side for o in n.output}
    normalising = {id(n) for n in side if n.op_type == "LpNormalization" and _attr(n, "p", 2) == 2
                   and _attr(n, "axis", -1) in LAST_AXIS}
    helpers: set[int] = set()
    initial = constant_tensors(graph)
    for node in side:
        chain = _l2_divisor(node, producers, initial)
        if chain is not None:
            normalising.add(id(node))
            helpers.update(id(n) for n in chain)
    changing = [n for n in side if n.op_type not in SHAPE_ONLY and id(n) not in helpers]
    ops = tuple(_describe(n, constants) for n in changing if id(n) not in normalising)
    # A direction only when the normalisation is the last node that changes the vectors.
    return Tower(ops, bool(changing) and id(changing[-1]) in normalising)


def id_source(producers: dict[str, Any], value: str) -> str:
    """Where the ids in ``value`` come from: back through the ops that keep them the same
    ids (:data:`PASS_IDS`) to a graph input, or the first other node's output."""
    steps = 0
    while value in producers and producers[value].op_type in PASS_IDS and steps < 16:
        value, steps = producers[value].input[0], steps + 1
    return value


def looked_up_by(graph: Any, table: str) -> set[str]:
    """The id sources (:func:`id_source`) of every ``Gather`` (axis 0) of initializer ``table``."""
    producers = {o: n for n in graph.node for o in n.output}
    return {id_source(producers, n.input[1]) for n in graph.node if n.op_type == "Gather" and len(n.input) >= 2
            and n.input[0] == table and _attr(n, "axis", 0) == 0}  # fmt: skip


def bias_role(graph: Any, bias: str, item_table: str) -> str | None:
    """None when the rows of initializer ``bias`` that a ``Gather`` looks up reach the score
    through shape-only nodes into an ``Add`` whose other operand is no item-tower value (a
    bias added to the score, u·i + b_i); else what the graph does with them, in words (a
    role popaudit does not serve: the item table then stands in)."""
    constants = _constants(graph)
    side, derived = _side(graph, bias, constants)
    if any(n.op_type not in SHAPE_ONLY for n in side):
        return f"`{shown(bias)}` looked up and changed by {', '.join(sorted({n.op_type for n in side}))}"
    _, tower = _side(graph, item_table, constants)
    meets = [n for n in graph.node if any(i in derived for i in n.input) and n not in side
             and not (n.op_type == "Gather" and n.input[0] == bias)]  # fmt: skip
    others = [i for n in meets for i in n.input if i and i not in derived and i not in constants]
    if meets and all(n.op_type == "Add" for n in meets) and others and not all(i in tower for i in others):
        return None
    ops = ", ".join(sorted({n.op_type for n in meets})) or "no node"
    return f"`{shown(bias)}` looked up by the item ids and combined by {ops}"


def constant_tensors(graph: Any) -> dict[str, Any]:
    """Name -> TensorProto of every value the graph stores: its initializers, and the
    outputs of ``Constant`` nodes (``value``, ``value_ints``, ``value_int``), where
    ``torch.onnx.export`` puts small values such as a ``ReduceL2``'s axes from opset 18 on."""
    found = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type != "Constant" or not node.output:
            continue
        for a in node.attribute:
            if a.name == "value" and a.type == 4:  # TENSOR
                found[node.output[0]] = a.t
            elif a.name in ("value_ints", "value_int"):
                from onnx import helper  # heavy optional library; its graph is already loaded

                values = list(a.ints) if a.name == "value_ints" else [a.i]
                dims = [len(values)] if a.name == "value_ints" else []
                found[node.output[0]] = helper.make_tensor(node.output[0], 7, dims, values)  # INT64
    return found


def _constants(graph: Any) -> set[str]:
    """Initializers, and every value computed from them alone (Constant nodes included)."""
    found = {t.name for t in graph.initializer}
    for node in graph.node:
        if all(not i or i in found for i in node.input):
            found.update(node.output)
    return found


def _l2_divisor(node: Any, producers: dict[str, Any], initial: dict[str, Any]) -> list[Any] | None:
    """The nodes from ``ReduceL2(x)`` over the last axis to a ``Div(x, ·)`` node (None:
    not such a division)."""
    if node.op_type != "Div" or len(node.input) < 2:
        return None
    chain: list[Any] = []
    value = node.input[1]
    while value in producers and len(chain) < 8:
        step = producers[value]
        chain.append(step)
        if step.op_type == "ReduceL2":
            last = _reduced_axes(step, initial) in [[axis] for axis in LAST_AXIS]
            return chain if last and step.input and step.input[0] == node.input[0] else None
        if step.op_type not in _DIVISOR or not step.input:
            return None
        value = step.input[0]
    return None


def _reduced_axes(node: Any, initial: dict[str, Any]) -> list[int] | None:
    """A ``ReduceL2``'s axes: its attribute (opset < 18) or its constant second input (an
    initializer or a ``Constant`` node: :func:`constant_tensors`)."""
    axes = next((list(a.ints) for a in node.attribute if a.name == "axes"), None)
    if axes is None and len(node.input) > 1 and node.input[1] in initial:
        from onnx import numpy_helper  # heavy optional library; its graph is already loaded

        try:
            values = numpy_helper.to_array(initial[node.input[1]])
        except Exception:  # a malformed constant: no axes known, so no normalisation recognised
            return None
        axes = [int(a) for a in values.reshape(-1)] if values.dtype.kind in "iu" else None
    return axes


def _attr(node: Any, name: str, default: int) -> int:
    return next((int(a.i) for a in node.attribute if a.name == name), default)


def _describe(node: Any, constants: set[str]) -> str:
    weights = [f"`{shown(i)}`" for i in node.input if i and i in constants]
    return node.op_type + (f" with {', '.join(weights[:3])}" if weights else "")


__all__ = ["PASS_IDS", "Tower", "bias_role", "constant_tensors", "id_source", "looked_up_by", "tower_of"]
