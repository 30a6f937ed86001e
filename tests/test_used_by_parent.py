"""A module whose weights its parent's functional call reads ran: "used by its parent", its
MACs on the parent's row, never "never ran" (summary, flops, the report's tables, doctor's
TI003). nn.MultiheadAttention's out_proj (F.multi_head_attention_forward), swin_v2's
attention (qkv/proj through shifted_window_attention) and a hand-written F.linear."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import torchinspect as ti
from torchinspect.analysis.doctor import diagnose
from torchinspect.trace.tree import never_ran, tied_runs


class Functional(nn.Module):
    """``proj`` is read through F.linear by the parent; ``unused`` truly never runs."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 32)
        self.unused = nn.Linear(16, 4)
        self.head = nn.Linear(32, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.relu(F.linear(x, self.proj.weight, self.proj.bias)))


def test_hand_written_functional_module_is_used_by_its_parent() -> None:
    s = ti.summarize(Functional(), "16", depth=2)
    rows = {r.name: r for r in s.rows}
    assert rows["proj"].runs_as == "" and rows["proj"].ran and "(used by" in rows["proj"].label
    assert rows["proj"].params == 16 * 32 + 32
    assert not rows["unused"].ran and "(not run)" in rows["unused"].label
    assert rows[""].self_macs == 16 * 32  # F.linear's MACs are the parent's own
    assert s.totals.macs == 16 * 32 + 32 * 3
    note = [n for n in s.notes if "never ran" in n]
    assert len(note) == 1 and "unused" in note[0] and "proj" not in note[0]
    flops = ti.count_flops(Functional(), "16")
    assert [n for n in flops.notes if "never ran" in n] == note
    # the doctor: proj gets its gradient (no TI003), unused is never called
    found = diagnose(Functional(), torch.randn(1, 16), select=["TI003"]).findings
    assert [(f.module, "never called" in f.what) for f in found] == [("unused", True)]


def test_multihead_attention_out_proj_of_vit_is_used_by_its_parent() -> None:
    s = ti.summarize("vit_b_16", depth=5)
    used = [r for r in s.rows if r.runs_as is not None]
    assert len(used) == 12 and all(r.name.endswith("self_attention.out_proj") for r in used)
    assert all(r.ran and r.runs_as == r.name.rpartition(".")[0] for r in used)
    assert sum(r.params or 0 for r in used) == 12 * (768 * 768 + 768)
    assert not [n for n in s.notes if "never ran" in n], s.notes
    # out_proj's MACs are on its parent's row: in_proj, QKᵀ, AV and out_proj of 197 tokens
    attention = [r for r in s.rows if r.name.endswith("self_attention")]
    tokens, width, heads = 197, 768, 12
    expected = tokens * width * 3 * width + 2 * heads * tokens * tokens * (width // heads) \
        + tokens * width * width
    assert {r.self_macs for r in attention} == {expected}
    assert never_ran(s.trace) == []


def test_swin_attention_qkv_and_proj_are_used_by_their_parent() -> None:
    s = ti.summarize("swin_v2_t", depth=6)
    used = {r.name for r in s.rows if r.runs_as is not None}
    attention = [r for r in s.rows if r.type == "ShiftedWindowAttentionV2"]
    assert used == {f"{a.name}.{part}" for a in attention for part in ("qkv", "proj")}
    assert not [n for n in s.notes if "never ran" in n], s.notes
    first = attention[0]  # 64x64 tokens of 96 channels, 8x8 windows, 3 heads of 32
    tokens, c, window, heads = 64 * 64, 96, 64, 3
    expected = tokens * c * 3 * c + tokens * c * c \
        + 2 * (tokens // window) * heads * window * window * (c // heads)
    assert first.self_macs == expected
    assert set(tied_runs(s.trace)) == used


def test_a_tie_still_runs_as_the_module_that_uses_it() -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.shared = nn.Embedding(50, 8)
            self.enc = nn.Embedding(50, 8)
            self.enc.weight = self.shared.weight

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.enc(ids)

    s = ti.summarize(Tied(), "long:1,5", depth=1)
    shared = next(r for r in s.rows if r.name == "shared")
    assert shared.runs_as == "enc" and "(tied, runs as enc)" in shared.label
