"""Input specs: the `--input` grammar and the example inputs a model source declares.

Grammar of one ``--input`` value::

    SPEC  := [NAME "="] [DTYPE ":"] DIMS
    DIMS  := INT ("," INT)*            (``x`` works as a separator too: 3x224x224)
    DTYPE := float|float32|f32|half|float16|fp16|bfloat16|bf16|double|float64|
             long|int64|int|int32|int16|int8|uint8|bool

* ``3,224,224``        one float32 tensor; the batch dimension is prepended -> (1,3,224,224)
* ``1,3,224,224``      already has the model's rank -> used as is
* ``long:1,128``       an int64 tensor (token ids)
* ``ids=long:1,128``   passed as the keyword argument ``ids``
* repeat ``--input`` for several positional inputs, in order.

Batch rule (``fit_to_example``, the same for every model source): the model's own
example gives each input's rank R and dtype. A spec of rank R is used as is, a spec of rank
R-1 gets the batch prepended, any other rank is an error naming R. A spec without a
dtype takes the example's (``--input 512`` for token ids is int64:1,512); a written float
dtype is kept (a model error it causes names ``long:`` in its hint). When the example is keyword
inputs only (Hugging Face's ``input_ids=...``), positional specs stand for its keywords in
order. When the rank is unknown (a python spec without example), the batch is prepended.
``--batch N`` sets the batch size (replacing dim 0 of a full-rank spec); ``--no-batch``
uses every shape exactly as written.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from torchinspect.arguments import MAX_BATCH, MAX_TENSOR_BYTES, as_list
from torchinspect.dtypes import ALIASES, SIZES
from torchinspect.errors import InspectError

DTYPE_ALIASES = ALIASES  # the words --input takes for a dtype (dtypes.py)

GRAMMAR_HELP = (
    "--input [NAME=][DTYPE:]D1,D2,... e.g. --input 3,224,224 (batch 1 is prepended), "
    "--input 1,3,224,224, --input long:1,128, --input ids=long:1,128; "
    f"dtypes: {', '.join(sorted(set(DTYPE_ALIASES)))}"
)

# torch sizes are int64: a tensor of this many elements or more cannot exist on any device
MAX_NUMEL = 2**63
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class TensorSpec:
    """The shape and dtype of one example tensor (no data)."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    name: str | None = None
    high: int | None = None  # integer inputs: values drawn from [0, high); None -> zeros

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return SIZES[self.dtype]

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    def __str__(self) -> str:
        dims = ",".join(str(d) for d in self.shape)
        text = dims if self.dtype == "float32" else f"{self.dtype}:{dims}"
        return f"{self.name}={text}" if self.name else text

    def make(self, device: Any = "cpu", generator: Any = None) -> Any:
        """A tensor of this spec: randn for floats, zeros or randint(high) for integers."""
        import torch

        dtype = getattr(torch, self.dtype)
        device = torch.device(device)
        if device.type == "meta":
            return torch.empty(self.shape, dtype=dtype, device=device)
        if dtype.is_floating_point:
            t = torch.randn(self.shape, generator=generator, dtype=torch.float32)
            return t.to(device=device, dtype=dtype)
        if self.high is not None and dtype != torch.bool:
            t = torch.randint(0, self.high, self.shape, generator=generator, dtype=torch.int64)
            return t.to(device=device, dtype=dtype)
        return torch.zeros(self.shape, dtype=dtype, device=device)


def _map_tree(tree: Any, fn: Any) -> Any:
    if isinstance(tree, TensorSpec):
        return fn(tree)
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):  # namedtuple: keep its type
        return type(tree)(*(_map_tree(t, fn) for t in tree))
    if isinstance(tree, tuple):
        return tuple(_map_tree(t, fn) for t in tree)
    if isinstance(tree, list):
        return [_map_tree(t, fn) for t in tree]
    if isinstance(tree, dict):
        return {k: _map_tree(v, fn) for k, v in tree.items()}
    return tree


def _iter_tree(tree: Any) -> Iterator[TensorSpec]:
    if isinstance(tree, TensorSpec):
        yield tree
    elif isinstance(tree, (tuple, list)):
        for t in tree:
            yield from _iter_tree(t)
    elif isinstance(tree, dict):
        for t in tree.values():
            yield from _iter_tree(t)


@dataclass(frozen=True)
class ExampleInputs:
    """Positional and keyword example inputs of a model, as specs (nested containers allowed)."""

    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def materialize(self, device: Any = "cpu", seed: int = 0) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Real (or meta) tensors for these specs; deterministic for a given seed."""
        import torch

        gen = torch.Generator().manual_seed(seed)
        args = _map_tree(self.args, lambda s: s.make(device, gen))
        kwargs = _map_tree(self.kwargs, lambda s: s.make(device, gen))
        return tuple(args), dict(kwargs)

    def specs(self) -> list[TensorSpec]:
        return list(_iter_tree(self.args)) + list(_iter_tree(self.kwargs))

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.specs())

    def describe(self) -> str:
        def show(tree: Any) -> str:
            if isinstance(tree, TensorSpec):
                return str(tree)
            if isinstance(tree, list):
                return "[" + ", ".join(show(t) for t in tree) + "]"
            if isinstance(tree, tuple):
                return "(" + ", ".join(show(t) for t in tree) + ")"
            if isinstance(tree, dict):
                return "{" + ", ".join(f"{k}: {show(v)}" for k, v in tree.items()) + "}"
            return repr(tree)

        parts = [show(a) for a in self.args]
        for k, v in self.kwargs.items():
            named = isinstance(v, TensorSpec) and v.name == k
            parts.append(show(v) if named else f"{k}={show(v)}")
        return " ".join(parts)


def _bad_spec(text: str, why: str) -> InspectError:
    return InspectError(f"--input {text!r}: {why}", hint=GRAMMAR_HELP)


def parse_spec(text: str) -> TensorSpec:
    """Parse one ``[NAME=][DTYPE:]DIMS`` value as written (no batch handling)."""
    return _parse_spec(text)[0]


def _parse_spec(text: str) -> tuple[TensorSpec, bool]:
    """The spec, and whether its dtype was written (rather than defaulted to float32)."""
    raw = text.strip()
    name = None
    if "=" in raw:
        name, _, raw = raw.partition("=")
        name = name.strip()
        if not _NAME_RE.match(name):
            raise _bad_spec(text, f"{name!r} is not a valid keyword-argument name")
    dtype = "float32"
    explicit = ":" in raw
    if explicit:
        dt, _, raw = raw.partition(":")
        key = dt.strip().lower()
        if key not in DTYPE_ALIASES:
            raise _bad_spec(text, f"unknown dtype {dt.strip()!r}")
        dtype = DTYPE_ALIASES[key]
    raw = raw.strip().strip("()[]")
    if not raw:
        raise _bad_spec(text, "no dimensions given")
    parts = [p.strip() for p in re.split(r"[,xX]", raw)]
    dims: list[int] = []
    for p in parts:
        if not p.isdigit():
            raise _bad_spec(text, f"dimension {p!r} is not a positive integer")
        d = int(p)
        if d <= 0:
            raise _bad_spec(text, "dimensions must be positive")
        dims.append(d)
    if len(dims) > 8:
        raise _bad_spec(text, "more than 8 dimensions")
    if math.prod(dims) >= MAX_NUMEL:
        raise _bad_spec(text, f"{math.prod(dims):.3g} elements: more than any tensor can hold")
    return TensorSpec(tuple(dims), dtype, name), explicit


def _default_for(default: ExampleInputs | None, index: int, name: str | None) -> Any:
    if default is None:
        return None
    if name is not None:
        return default.kwargs.get(name)
    if index < len(default.args):
        return default.args[index]
    return None


def _positional_name(default: ExampleInputs | None, index: int) -> str | None:
    """The keyword a positional spec stands for when the example is keywords only.

    Hugging Face examples are ``input_ids=...`` (and ``decoder_input_ids=...``): the i-th
    ``--input`` without a name is the i-th keyword of the example, so it takes that input's
    rank and dtype and is passed by the same name (never as forward's second positional
    parameter, which is ``attention_mask`` there).
    """
    if default is None or default.args or index >= len(default.kwargs):
        return None
    return list(default.kwargs)[index]


def _rank_error(text: str, spec: TensorSpec, rank: int, what: str,
                example: tuple[int, ...] | None = None) -> InspectError:
    """``--input`` of the wrong rank: the message names both ranks; the hint gives the
    corrected ``--input`` (the model's example, without its batch, completed from what was
    written) and ``--no-batch`` for a shape meant exactly."""
    shown = ",".join(map(str, example)) if example else ""
    fixed = _completed(spec.shape, example[1:]) if example else None
    prefix = text[:len(text) - len(text.rpartition(":")[2].rpartition("=")[2])]
    return InspectError(
        f"--input {text!r} has rank {len(spec.shape)}; the model's example{what}"
        f"{' ' + shown if shown else ''} has rank {rank}",
        hint=(f"--input {prefix}{','.join(map(str, fixed))} (batch prepended)" if fixed
              else f"give {rank} dimension(s) (batch included) or {rank - 1}")
        + "; --no-batch takes a shape as written")


def _completed(dims: tuple[int, ...], want: tuple[int, ...]) -> tuple[int, ...] | None:
    """``dims`` made the rank of ``want`` (an example shape without its batch): ``3,224`` ->
    ``3,224,224`` where what was written begins or ends ``want``; else ``want`` itself."""
    if not want:
        return None
    if len(dims) < len(want) and tuple(want[:len(dims)]) == tuple(dims):
        return tuple(want)
    if len(dims) < len(want) and dims and tuple(want[len(want) - len(dims):]) == tuple(dims):
        return tuple(want)
    if len(dims) < len(want) and dims and dims[0] == want[0]:  # 3,64 -> 3,64,64
        return (*dims, *([dims[-1]] * (len(want) - len(dims))))
    if len(dims) > len(want) and tuple(dims[len(dims) - len(want):]) == tuple(want):
        return tuple(want)
    return tuple(want)


def _example_dtype(spec: TensorSpec, like: TensorSpec, explicit: bool) -> str:
    """A written dtype is kept; an unwritten one is the example's (token ids stay int64)."""
    return spec.dtype if explicit else like.dtype


def fit_to_example(text: str, spec: TensorSpec, like: Any, *, batch: int | None = None,
                   no_batch: bool = False, explicit_dtype: bool = True) -> Any:
    """The one batch-and-dtype rule for every model source, guided by the model's example.

    * ``--no-batch``: the spec exactly as written.
    * the example's input is a tensor of rank R: a spec of rank R is used as is (``--batch``
      replaces its dim 0); a spec of rank R-1 gets the batch prepended; any other rank is an
      error naming R. Without a written dtype the spec takes the example's (token ids stay
      int64); a written dtype is kept.
    * the example's input is a list of per-image tensors (detection): a spec of the image's
      rank is one image (``--batch`` copies), one more dimension is that many images.
    * no example (a python spec that declares none): the batch is prepended.
    """
    if no_batch:
        return spec
    if isinstance(like, list) and like and isinstance(like[0], TensorSpec):
        elem = like[0]
        dtype = _example_dtype(spec, elem, explicit_dtype)
        if len(spec.shape) == len(elem.shape):
            return [TensorSpec(spec.shape, dtype, None, elem.high)] * (batch or 1)
        if len(spec.shape) == len(elem.shape) + 1:
            return [TensorSpec(spec.shape[1:], dtype, None, elem.high)] * (batch or spec.shape[0])
        raise _rank_error(text, spec, len(elem.shape) + 1, " (a list of images)",
                          (1, *elem.shape))
    if isinstance(like, TensorSpec):
        spec = TensorSpec(spec.shape, _example_dtype(spec, like, explicit_dtype),
                          spec.name, like.high)
        rank = len(like.shape)
        if len(spec.shape) == rank:
            if batch is not None:
                return TensorSpec((batch, *spec.shape[1:]), spec.dtype, spec.name, spec.high)
            return spec
        if len(spec.shape) == rank - 1 or rank == 0:  # a scalar example says nothing of rank
            return TensorSpec((batch or 1, *spec.shape), spec.dtype, spec.name, spec.high)
        raise _rank_error(text, spec, rank, "", tuple(like.shape))
    return TensorSpec((batch or 1, *spec.shape), spec.dtype, spec.name, spec.high)


def parse_inputs(
    specs: Sequence[str] | None,
    *,
    batch: int | None = None,
    no_batch: bool = False,
    default: ExampleInputs | None = None,
) -> ExampleInputs | None:
    """Turn ``--input`` values into ExampleInputs; None when no spec and no default.

    Without specs the model's default example is used (``--batch`` then resizes dim 0).
    """
    if batch is not None and (batch <= 0 or batch >= MAX_NUMEL):
        raise InspectError(f"--batch {batch}: the batch size must be a positive integer "
                           "below 2**63", hint="e.g. --batch 8")
    if batch is not None and no_batch:
        raise InspectError("--batch and --no-batch exclude each other",
                           hint="--no-batch takes --input shapes as written, batch included")
    specs = as_list(specs)  # one "3,224,224" text is one input
    if not specs:
        if default is None or batch is None:
            return default
        return rebatch(default, batch)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    positional_as_named = 0  # leading positional specs taken as the example's keywords
    for text in specs:
        spec, explicit = _parse_spec(text)
        if spec.name is None and not args and len(kwargs) == positional_as_named:
            keyword = _positional_name(default, positional_as_named)
            if keyword is not None and keyword not in kwargs:
                spec = TensorSpec(spec.shape, spec.dtype, keyword, spec.high)
                positional_as_named += 1
        like = _default_for(default, len(args), spec.name)
        value = fit_to_example(text, spec, like, batch=batch, no_batch=no_batch,
                               explicit_dtype=explicit)
        if spec.name is not None:
            if spec.name in kwargs:
                raise _bad_spec(text, f"keyword {spec.name!r} given twice")
            kwargs[spec.name] = value
        else:
            if kwargs:
                raise _bad_spec(text, "positional inputs must come before named ones")
            args.append(value)
    return within_bounds(ExampleInputs(tuple(args), kwargs))


#: a list input (detection models take a list of images) holds at most this many tensors
MAX_LIST = 65_536


def within_bounds(example: ExampleInputs) -> ExampleInputs:
    """``example`` when each tensor fits in :data:`~torchinspect.arguments.MAX_TENSOR_BYTES`
    (more than the memory of any machine); else one InspectError naming the shape (exit 2),
    before anything is allocated or traced (a fake tensor of 10**18 elements overflowed
    torch's storage size: "internal error")."""
    for spec in example.specs():
        nbytes = math.prod(spec.shape) * SIZES.get(spec.dtype, 8)
        if nbytes > MAX_TENSOR_BYTES:
            raise InspectError(f"--input {spec}: {nbytes:.3g} bytes in one tensor, over "
                               f"{MAX_TENSOR_BYTES:.3g} (more than the memory of any machine)",
                               hint="check the shape and --batch (e.g. --input 3,224,224)")
    return example


def batch_of(example: Any) -> int | None:
    """The batch an example holds: the leading dimension of its first tensor (the length of
    a list of images); None where that can't be told."""
    if not isinstance(example, ExampleInputs):
        return None
    for tree in (*example.args, *example.kwargs.values()):
        if isinstance(tree, list) and tree and all(isinstance(t, TensorSpec) for t in tree):
            return len(tree)
        if isinstance(tree, TensorSpec):
            return tree.shape[0] if tree.shape else None
    return None


def rebatch(example: ExampleInputs, batch: int) -> ExampleInputs:
    """The same example with every leading (batch) dimension set to ``batch``."""

    if not 1 <= batch <= MAX_BATCH:
        raise InspectError(f"--batch {batch}: samples per batch must be from 1 to {MAX_BATCH:,}",
                           hint="e.g. --batch 8")

    def fix(tree: Any) -> Any:
        if isinstance(tree, list) and tree and all(isinstance(t, TensorSpec) for t in tree):
            if batch > MAX_LIST:
                raise InspectError(f"--batch {batch}: the model takes a list of tensors, and "
                                   f"{batch:,} of them is over {MAX_LIST:,}",
                                   hint="a smaller --batch")
            return [tree[0]] * batch
        if isinstance(tree, TensorSpec):
            if not tree.shape:
                return tree
            return TensorSpec((batch, *tree.shape[1:]), tree.dtype, tree.name, tree.high)
        if isinstance(tree, tuple):
            return tuple(fix(t) for t in tree)
        if isinstance(tree, list):
            return [fix(t) for t in tree]
        if isinstance(tree, dict):
            return {k: fix(v) for k, v in tree.items()}
        return tree

    return within_bounds(ExampleInputs(tuple(fix(a) for a in example.args),
                                       {k: fix(v) for k, v in example.kwargs.items()}))


def example_from_strings(specs: str | Sequence[str]) -> ExampleInputs:
    """A model's declared example written in the grammar, shapes taken as full shapes."""
    if isinstance(specs, str):
        specs = [specs]
    return ExampleInputs(tuple(parse_spec(s) for s in specs if "=" not in s.partition(":")[0]),
                         {str(p.name): p for p in (parse_spec(s) for s in specs
                                                   if "=" in s.partition(":")[0])})
