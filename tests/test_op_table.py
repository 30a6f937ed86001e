"""The one op table (trace/ops.py): torch's schema and tags first, a hand table for the rest,
and every consumer (MAC counter, latency predictor, memory tracker) asking it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchinspect.trace.ops import (
    CUBLAS_OPS,
    HAND_KINDS,
    OpKind,
    op_info,
    op_kind,
    op_name,
    packet,
    table_names,
)


@pytest.mark.parametrize("name", table_names())
def test_every_name_in_the_table_exists_in_the_installed_torch(name: str) -> None:
    assert packet(name) is not None, f"{name}: no such op in torch {torch.__version__}"


@pytest.mark.parametrize("name", sorted(CUBLAS_OPS))
def test_every_cublas_op_is_a_matmul(name: str) -> None:
    info = op_info(name)
    assert info.kind is OpKind.matmul and info.cublas and not info.free


def test_the_hand_table_says_only_what_torch_does_not() -> None:
    """A hand entry whose kind torch's schema or tags already give is a second list to drift."""
    from torchinspect.trace.ops import _from_torch

    said = {name: kind for kind, names in HAND_KINDS.items() for name in names
            if (_from_torch(name) or (None,))[0] is kind}
    assert said == {}
    names = [n for names in HAND_KINDS.values() for n in names]
    assert len(names) == len(set(names)), "a name with two kinds"


@pytest.mark.parametrize(("op", "kind", "source"), [
    (torch.ops.aten.add.Tensor, OpKind.elementwise, "tags"),  # Tag.pointwise
    (torch.ops.aten.relu_.default, OpKind.elementwise, "tags"),  # in place: its own tags
    (torch.ops.aten.permute.default, OpKind.view, "schema"),  # Tensor(a) -> Tensor(a)
    (torch.ops.aten.t_.default, OpKind.view, "schema"),  # Tag.inplace_view
    (torch.ops.aten.permute_copy.default, OpKind.copy, "tags"),  # Tag.view_copy
    (torch.ops.aten.amax.default, OpKind.reduction, "tags"),  # Tag.reduction
    (torch.ops.aten.clone.default, OpKind.copy, "table"),  # tagged pointwise; a copy
    (torch.ops.aten.where.self, OpKind.select, "table"),
    (torch.ops.aten.mm.default, OpKind.matmul, "table"),
    (torch.ops.aten._unsafe_view.default, OpKind.view, "table"),  # no alias annotation
    (torch.ops.aten.fill_.Scalar, OpKind.creation, "table"),  # in place, found as "fill"
    (torch.ops.aten.nonzero.default, OpKind.other, "default"),
])
def test_torch_says_what_it_can_and_the_table_the_rest(op, kind, source) -> None:
    info = op_info(op)
    assert (info.kind, info.source) == (kind, source)


def test_free_ops_launch_no_kernel() -> None:
    assert op_info("view").free and op_info("sym_size").free and op_info("empty_like").free
    assert not op_info("zeros").free  # a fill kernel
    assert not op_info("add").free and op_info("add").arithmetic
    assert not op_info("cat").arithmetic and not op_info("eq").arithmetic


def test_one_op_name_for_every_form() -> None:
    assert op_name(torch.ops.aten.mm.default) == op_name(torch.ops.aten.mm) == "mm"
    assert op_name("aten::mm") == op_name("aten.mm") == "mm"
    assert op_name("quantized::conv2d") == "quantized.conv2d"
    assert op_kind("prim.device") is OpKind.metadata
    assert op_kind("_c10d_functional.all_reduce") is OpKind.collective


class _Mixed(nn.Module):
    def forward(self, x):
        y = torch.cat([x, x], 1).permute(0, 1).contiguous()  # moves data: not listed
        return torch.where(y > 0, y, y * 2).sum()  # the multiply and the sum do work


def test_the_counter_lists_only_ops_that_compute() -> None:
    from torchinspect.analysis.flops import count_flops

    result = count_flops(_Mixed(), "4")
    assert set(result.not_counted) == {"mul", "sum"}  # not cat, permute, gt, where


def test_the_memory_tracker_takes_a_cublas_workspace_for_dot() -> None:
    """``dot`` takes the thread's cuBLAS handle (aten/src/ATen/native/cuda/Blas.cpp): its
    workspace, as ``mm`` does (the tracker's own list left it out)."""
    from torchinspect.memory.tracker import StorageTracker

    x = torch.randn(64)
    with StorageTracker(workspace=1 << 20) as tracker:
        torch.dot(x, x)
    assert [a.module for a in tracker.log.allocs.values()
            if a.phase == "workspace"] == ["cuBLAS (main thread)"]
