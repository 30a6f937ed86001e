"""The MAC-formula registry: one table, duplicates refused, users add their own ops at run time,
and torch's flop_registry overlaps only where stated. The "Counted:" note and the op list of
docs/concepts/counting.md come from the same table."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

import torchinspect
from torchinspect import InspectError, count_flops, mac_formulas, register_mac_formula
from torchinspect.analysis.conventions import convention_notes, conventions
from torchinspect.trace import formulas

ROOT = Path(__file__).resolve().parents[1]


@torch.library.custom_op("torchinspect_test::scaled_mm", mutates_args=())
def scaled_mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x @ w) * 2.0


@scaled_mm.register_fake
def _(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x.new_empty((x.shape[0], w.shape[1]))


class UsesCustomOp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return scaled_mm(x, self.w)


@pytest.fixture
def clean_registry() -> Iterator[None]:
    before = dict(formulas._FORMULAS)
    yield
    formulas._FORMULAS.clear()
    formulas._FORMULAS.update(before)


def test_a_user_adds_a_formula_for_their_own_op_at_run_time(clean_registry: None) -> None:
    model, inputs = UsesCustomOp(), "16"  # with the batch: x is (1, 16)
    before = count_flops(model, inputs)
    assert before.macs == 0
    assert "torchinspect_test.scaled_mm" in before.not_counted  # listed, never a silent 0

    @register_mac_formula("torchinspect_test::scaled_mm", family="matmul/linear")
    def scaled_mm_macs(args, kwargs, out):
        x, w = args
        return x.shape[0] * x.shape[1] * w.shape[1]

    after = count_flops(model, inputs)
    assert after.macs == 1 * 16 * 4
    assert after.by_op == {"torchinspect_test.scaled_mm": 1 * 16 * 4}
    assert "torchinspect_test.scaled_mm" not in after.not_counted
    assert mac_formulas()["torchinspect_test.scaled_mm"].source == "user"

    torchinspect.unregister_mac_formula("torchinspect_test.scaled_mm")
    assert count_flops(model, inputs).macs == 0


def test_a_second_formula_for_an_op_is_refused_unless_it_says_replace(clean_registry) -> None:
    with pytest.raises(InspectError, match=r"'_trilinear' already has a MAC formula \(from "
                                           r"torchinspect\)"):
        register_mac_formula("aten._trilinear", lambda a, k, o: 0, family="bilinear")
    # torch's flop_registry counts too: overlapping it is refused the same way
    with pytest.raises(InspectError, match=r"'mm' already has a MAC formula \(from "
                                           r"torch.utils.flop_counter\)") as info:
        register_mac_formula(torch.ops.aten.mm, lambda a, k, o: 0, family="matmul/linear")
    assert "replace=True" in (info.value.hint or "")


def test_replace_true_wins_over_torch_and_says_so(clean_registry) -> None:
    model = nn.Linear(16, 4, bias=False)
    assert count_flops(model, "8,16").macs == 8 * 16 * 4  # torch's mm formula
    register_mac_formula(torch.ops.aten.mm.default, lambda a, k, o: 1, family="matmul/linear",
                         replace=True)
    entry = mac_formulas()["mm"]
    assert (entry.source, entry.replaces_torch) == ("user", True)
    assert count_flops(model, "8,16").macs == 1


class Int8Linear(nn.Module):
    """Weight-only int8 linear (as torchao's int8 weight-only quantization runs it)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("weight", torch.randint(-8, 8, (16, 64), dtype=torch.int8))
        self.register_buffer("scales", torch.ones(16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch._int_mm(x.to(torch.int8), self.weight.t().contiguous())  # (M, 64) x (64, 16)
        b = torch.ops.aten._weight_int8pack_mm(x, self.weight, self.scales)
        return a.float() + b


def test_int8_matmuls_count_one_mac_per_multiply_add() -> None:
    result = count_flops(Int8Linear(), "64")  # x: (1, 64), traced on meta
    assert result.by_op == {"_int_mm": 64 * 16, "_weight_int8pack_mm": 64 * 16}
    assert result.not_counted == {"add": 1}  # the elementwise add: work without a formula


def test_builtin_formulas_are_not_removed_only_replaced() -> None:
    with pytest.raises(InspectError, match="no user-registered formula"):
        torchinspect.unregister_mac_formula("_trilinear")


def test_no_builtin_formula_overlaps_torch_silently() -> None:
    torch_ops = formulas._torch_formulas()
    ours = [e for e in mac_formulas().values() if e.source == formulas.OURS]
    assert len(ours) >= 20  # attention, RNN, MoE, bilinear, quantized
    assert [e.op for e in ours if e.op in torch_ops and not e.replaces_torch] == []


def test_the_counted_note_names_every_family_of_the_registry() -> None:
    families = {e.family for e in mac_formulas().values() if "backward" not in e.op}
    note = " ".join(" ".join(convention_notes()).split())
    for family in families:
        assert family in note and family in conventions()["counted"], family
    assert all(len(line) <= 80 for line in convention_notes())


def test_the_counting_page_lists_the_registry(clean_registry) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    page = (ROOT / "docs" / "concepts" / "counting.md").read_text()
    assert "<!-- mac-formulas -->" in page
    register_mac_formula("mylib::fused", lambda a, k, o: 0, family="matmul/linear")
    table = hooks.mac_formula_table()
    for op in mac_formulas():
        assert f"`{op}`" in table, op
    assert "mylib.fused" in table  # generated from the live registry, not a copy
