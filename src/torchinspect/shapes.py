"""Shape trees: the shapes and dtypes of (nested) tensors, JSON-ready, no torch at import.

A shape tree is a :class:`TensorShape`, or tuples/lists/dicts of shape trees, or a short
repr of a non-tensor value. The trace records use them for module inputs/outputs, and the
sources use them to describe inputs given as tensors. Leaf module: imports only errors.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TensorShape:
    """The shape and dtype of one tensor seen in a forward."""

    shape: tuple[int, ...]
    dtype: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def to_dict(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype}

    def __str__(self) -> str:
        return "[" + ", ".join(str(d) for d in self.shape) + "]"


# A shape tree: TensorShape, or tuples/lists/dicts of shape trees, or a short repr of a value.
ShapeTree = Any


def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def dataclass_fields(value: Any) -> dict[str, Any] | None:
    """A dataclass instance's fields by name (a model may return one); None otherwise."""
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
    return None


def _pytree_children(value: Any) -> list[Any] | None:
    """The children of a container registered with ``torch.utils._pytree`` (deque,
    ``torch.return_types``, a library's own output classes); None for anything else."""
    from torchinspect.privtorch import pytree_children  # torch: only for such a container

    return pytree_children(value)


def tensor_leaves(value: Any, depth: int = 0) -> list[Any]:
    """Every tensor in a nested value, depth first in the containers' order: tuples, lists
    and dicts (namedtuples, OrderedDicts, transformers' ``ModelOutput``), objects with
    ``to_tuple()``, dataclass fields (a model may return a dataclass, which pytree sees as one
    leaf), and any other container registered with ``torch.utils._pytree``. The one walker:
    the trace, doctor and graph use it."""
    if _is_tensor(value):
        return [value]
    if depth > 8 or value is None or isinstance(value, (str, bytes, int, float)):
        return []
    children: Any
    if isinstance(value, (tuple, list)):
        children = value
    elif isinstance(value, dict):
        children = value.values()
    elif hasattr(value, "to_tuple"):  # transformers ModelOutput-likes
        children = value.to_tuple()
    elif (fields := dataclass_fields(value)) is not None:
        children = fields.values()
    else:
        children = _pytree_children(value) or ()
    return [t for v in children for t in tensor_leaves(v, depth + 1)]


def shape_tree(value: Any, depth: int = 0) -> ShapeTree:
    """Tensors -> TensorShape, containers kept; other values shown by type."""
    if _is_tensor(value):
        return TensorShape(tuple(int(d) for d in value.shape), dtype_name(value.dtype))
    if depth > 6:
        return "…"
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple
        return {f: shape_tree(getattr(value, f), depth + 1) for f in value._fields}
    if isinstance(value, (tuple, list)):
        items = [shape_tree(v, depth + 1) for v in value]
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, dict):
        return {str(k): shape_tree(v, depth + 1) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "tensors") and _is_tensor(value.tensors):  # ImageList
        return shape_tree(value.tensors, depth + 1)
    fields = dataclass_fields(value)
    if fields is not None:
        return {f: shape_tree(v, depth + 1) for f, v in fields.items()}
    return type(value).__name__


def tensor_bytes(value: Any) -> int:
    """Bytes of every tensor in a (nested) value (dataclass fields included)."""
    return sum(t.numel() * t.element_size() for t in tensor_leaves(value))


def map_tensors(value: Any, fn: Callable[[Any], Any]) -> Any:
    """Apply ``fn`` to every tensor in a nested value; container types (namedtuples too) kept."""
    if _is_tensor(value):
        return fn(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(map_tensors(v, fn) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(map_tensors(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: map_tensors(v, fn) for k, v in value.items()}
    return value


def first_tensor(tree: Any) -> TensorShape | None:
    """The first :class:`TensorShape` of a shape tree, depth first (dicts in their order)."""
    if isinstance(tree, TensorShape):
        return tree
    children = tree.values() if isinstance(tree, dict) else tree if isinstance(tree, (tuple, list)) else ()
    for child in children:
        found = first_tensor(child)
        if found is not None:
            return found
    return None


def shape_tree_to_json(tree: ShapeTree) -> Any:
    if isinstance(tree, TensorShape):
        return tree.to_dict()
    if isinstance(tree, (tuple, list)):
        return [shape_tree_to_json(t) for t in tree]
    if isinstance(tree, dict):
        return {str(k): shape_tree_to_json(v) for k, v in tree.items()}
    return tree


def shape_lists(tree: ShapeTree) -> Any:
    """A shape tree as JSON a program can index: a tensor is its list of dimensions, a
    tuple/list a list, a dict an object; anything else (None, a number, a type name) as is.
    A one-element tuple (a module's single positional input) is its element, as
    :func:`format_shape_tree` writes it."""
    if isinstance(tree, TensorShape):
        return list(tree.shape)
    if isinstance(tree, tuple) and len(tree) == 1:
        return shape_lists(tree[0])
    if isinstance(tree, (tuple, list)):
        return [shape_lists(t) for t in tree]
    if isinstance(tree, dict):
        return {str(k): shape_lists(v) for k, v in tree.items()}
    return tree


def format_shape_tree(tree: ShapeTree, *, limit: int = 60) -> str:
    """``[1, 64, 56, 56]``; tuples as ``([..], [..])``, dicts as ``{out: [..]}``."""

    def show(t: ShapeTree) -> str:
        if isinstance(t, TensorShape):
            return str(t)
        if isinstance(t, list):
            if len(t) > 3 and all(x == t[0] for x in t):
                return f"{len(t)}×{show(t[0])}"
            return "[" + ", ".join(show(x) for x in t) + "]"
        if isinstance(t, tuple):
            if len(t) == 1:
                return show(t[0])
            return "(" + ", ".join(show(x) for x in t) + ")"
        if isinstance(t, dict):
            return "{" + ", ".join(f"{k}: {show(v)}" for k, v in t.items()) + "}"
        return "-" if t is None else str(t)

    text = show(tree)
    return text if len(text) <= limit else text[: limit - 1] + "…"
