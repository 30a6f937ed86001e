"""shapes.tensor_leaves: the one walk over nested values (trace, doctor and graph use it)."""

from __future__ import annotations

import collections
import dataclasses

import torch

from torchinspect.shapes import tensor_bytes, tensor_leaves


@dataclasses.dataclass
class Out:
    logits: torch.Tensor
    aux: dict[str, torch.Tensor]
    note: str = "x"


class WithToTuple:
    """A transformers-ModelOutput-like object that is neither a dict nor a dataclass."""

    def __init__(self, *ts: torch.Tensor) -> None:
        self.ts = ts

    def to_tuple(self) -> tuple[torch.Tensor, ...]:
        return self.ts


def test_every_container_kind_in_order() -> None:
    a, b, c, d, e, f = (torch.full((i + 1,), float(i)) for i in range(6))
    pair = collections.namedtuple("pair", "x y")
    value = (a, [pair(b, None)], {"k": Out(c, {"z": d})}, collections.deque([e]),
             WithToTuple(f), "text", 3)
    got = tensor_leaves(value)
    assert [t.numel() for t in got] == [1, 2, 3, 4, 5, 6]
    assert all(x is y for x, y in zip(got, (a, b, c, d, e, f), strict=True))
    assert tensor_bytes(value) == 4 * (1 + 2 + 3 + 4 + 5 + 6)


def test_a_torch_return_type_and_a_plain_object() -> None:
    t = torch.arange(6.0).reshape(2, 3)
    mx = t.max(dim=1)  # torch.return_types.max, a structseq
    assert len(tensor_leaves(mx)) == 2
    assert tensor_leaves(object()) == [] and tensor_leaves(None) == []
