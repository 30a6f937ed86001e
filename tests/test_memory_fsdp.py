"""`inspect memory --fsdp N`: FSDP2 run on fake tensors over a fake process group.

Predictions for ``device="cpu"`` count exact bytes (no 512-byte rounding, no workspace), so the
sharded sizes follow from the shapes: each rank holds ``ceil(dim0 / N)`` rows of every
parameter (FSDP2 pads dim 0 to a multiple of N; rank 0 holds a full chunk), and the same for
its gradient shard and optimizer state. The per-GPU accuracy against real FSDP2 training on
2 GPUs is in benchmarks/RESULTS-memory.md (benchmarks/memory_fsdp.py, run under torchrun).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from torchinspect.errors import InspectError
from torchinspect.inputs import ExampleInputs, TensorSpec
from torchinspect.memory import StepConfig, predict_case
from torchinspect.memory.faking import make_target
from torchinspect.memory.fsdp import choose_unit, default_unit, unit_modules
from torchinspect.sources.case import make_case

F32 = 4


class Block(nn.Module):
    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.up = nn.Linear(d, hidden)
        self.down = nn.Linear(hidden, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.down(torch.relu(self.up(x))))


class Tiny(nn.Module):
    """Odd sizes on purpose (7, 5, 13): dim 0 is not a multiple of 2 or 3."""

    def __init__(self, blocks: int = 3, d: int = 7, hidden: int = 13, tied: bool = False) -> None:
        super().__init__()
        self.emb = nn.Embedding(5, d)
        self.blocks = nn.ModuleList(Block(d, hidden) for _ in range(blocks))
        self.head = nn.Linear(d, 5, bias=False)
        if tied:
            self.head.weight = self.emb.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def case_of(model: nn.Module, shape: tuple[int, ...] = (4, 6)):
    return make_case(model, ExampleInputs((TensorSpec(shape, "int64", None, 5),)))


def predict(model: nn.Module, n: int | None, optimizer: str = "sgd-momentum", **kw: object):
    cfg = StepConfig(optimizer=optimizer, fsdp=n, **kw)  # type: ignore[arg-type]
    return predict_case(case_of(model), cfg, make_target("cpu"), inference=False)


def shard_bytes(model: nn.Module, n: int) -> int:
    """One rank's bytes of every parameter: ceil(dim0 / n) rows."""
    return sum(math.ceil(p.shape[0] / n) * (p.numel() // p.shape[0]) * p.element_size()
               for p in model.parameters())


# ---------------------------------------------------------------- sharded sizes

@pytest.mark.parametrize("n", [2, 3])
def test_weights_gradients_and_state_are_one_padded_shard(n):
    model = Tiny()
    r = predict(model, n)
    expected = shard_bytes(model, n)
    assert expected < sum(p.numel() * F32 for p in model.parameters())  # it is sharded
    assert r.weight_bytes == expected
    run = r.training
    # gradients: the reduce-scatter outputs, one shard per parameter; SGD momentum: one buffer
    # shaped like each shard
    assert run.gradients == expected
    assert run.optimizer_state == expected
    assert r.params == sum(p.numel() for p in model.parameters())  # all ranks together


def test_library_entry_point():
    from torchinspect.memory import predict_memory

    model = Tiny()
    r = predict_memory(model, ExampleInputs((TensorSpec((4, 6), "int64", None, 5),)),
                       optimizer="sgd-momentum", device="cpu", fsdp=2, inference=False)
    assert r.weight_bytes == shard_bytes(model, 2) and r.config["fsdp"] == 2
    assert r.notes[0].startswith("FSDP2 over 2 GPUs")


def test_one_gpu_holds_everything():
    model = Tiny()
    r = predict(model, 1)
    full = sum(p.numel() * F32 for p in model.parameters())
    assert r.weight_bytes == full and r.training.optimizer_state == full


def test_tied_weights_stay_tied():
    model = Tiny(tied=True)
    r = predict(model, 2)
    assert r.weight_bytes == shard_bytes(model, 2)  # parameters() counts the tied tensor once
    assert model.head.weight is model.emb.weight


def test_unsharded_parameters_are_freed_after_each_unit():
    """FSDP2 frees a unit's unsharded parameters by resizing their storage to 0: the forward
    holds a few units' full parameters at a time, not all of them."""
    blocks, d = 16, 128
    model = nn.Sequential(*(Block(d, d) for _ in range(blocks)))
    case = make_case(model, ExampleInputs((TensorSpec((1, d)),)))
    r = predict_case(case, StepConfig(optimizer="sgd", fsdp=2), make_target("cpu"),
                     inference=False)
    unit = sum(p.numel() * F32 for p in model[0].parameters())
    forward = r.training.phase_peak("forward", 1).peak
    # sharded weights + input + at most two units gathered (all-gather buffer + copy-out each)
    assert forward - r.weight_bytes < 5 * unit
    assert forward < r.weight_bytes + blocks * unit / 2


def test_checkpointing_applies_to_the_units():
    """--checkpointing wraps the copy before fully_shard renames its classes (FSDPBlock)."""
    plain = predict(Tiny(), 2).training
    checkpointed = predict(Tiny(), 2, checkpointing="Block").training
    assert checkpointed.saved_total < plain.saved_total


def test_users_model_unchanged():
    model = Tiny()
    before = {n: (type(p), p.device) for n, p in model.named_parameters()}
    predict(model, 2)
    assert type(model) is Tiny and type(model.blocks[0]) is Block
    assert {n: (type(p), p.device) for n, p in model.named_parameters()} == before
    assert not torch.distributed.is_initialized()  # the fake process group is gone


# ---------------------------------------------------------------- the units

def test_default_unit_is_the_repeated_block():
    assert default_unit(Tiny()) == "Block"  # not Linear (a leaf), not ModuleList
    from torchvision.models import resnet50

    with torch.device("meta"):
        assert default_unit(resnet50()) == "Bottleneck"
    assert default_unit(nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))) is None  # root only


def test_named_unit_and_nesting():
    outer = nn.Sequential(Block(4, 4), nn.Sequential(Block(4, 4), Block(4, 4)))
    assert [n for n, _ in unit_modules(outer, "Block")] == ["0", "1.0", "1.1"]
    assert [n for n, _ in unit_modules(outer, "torch.nn.modules.container.Sequential")] == ["1"]
    case = case_of(Tiny())
    assert choose_unit(case, StepConfig(fsdp=2, fsdp_unit="Linear")) == "Linear"
    with pytest.raises(InspectError, match="--fsdp-unit Nope: .* has no module of that type"):
        choose_unit(case, StepConfig(fsdp=2, fsdp_unit="Nope"))


def test_a_tied_weight_split_across_units_is_refused():
    with pytest.raises(InspectError, match="head.weight is the same tensor as a parameter of emb"):
        predict(Tiny(tied=True), 2, fsdp_unit="Embedding")


@pytest.mark.parametrize("bad", [0, -1, True, 2.5])
def test_bad_gpu_counts(bad):
    with pytest.raises(InspectError, match="--fsdp"):
        StepConfig(fsdp=bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------- CLI

def test_cli_fsdp(runner):
    from torchinspect.cli.app import app

    res = runner.invoke(app, ["memory", "resnet18", "--input", "3,32,32", "--batch", "2",
                              "--fsdp", "2", "--no-train"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "FSDP2 over 2 GPUs" in res.output and "8 BasicBlock modules" in res.output


@pytest.mark.parametrize(("args", "message"), [
    (["--fsdp", "0"], "--fsdp 0: expected a number of GPUs"),
    (["--fsdp", "two"], "--fsdp"),
    (["--fsdp-unit", "BasicBlock"], "--fsdp-unit names the modules FSDP shards"),
    (["--fsdp", "2", "--fsdp-unit", "Nope"], "--fsdp-unit Nope: resnet18 has no module"),
    (["--fsdp", "2", "--verify"], "--fsdp needs one process per GPU"),
])
def test_cli_fsdp_usage_errors(runner, args, message):
    from torchinspect.cli.app import app

    res = runner.invoke(app, ["memory", "resnet18", "--input", "3,32,32", *args])
    assert res.exit_code == 2, res.output
    assert message in res.output and "hint:" in res.output
    assert "Traceback" not in res.output


# ---------------------------------------------------------------- scale

@pytest.mark.slow
def test_70b_decoder_over_8_gpus_on_a_cpu():
    from torchinspect.memory import predict_memory
    from torchinspect.sources.case import ModelOptions

    r = predict_memory("zoo:llama-70b", options=ModelOptions(inputs=["long:4096"]),
                       dtype="bf16", optimizer="adamw", inference=False, fsdp=8)
    assert r.params == 70_553_706_496
    assert 2 * r.params / 8 <= r.weight_bytes < 2 * r.params / 8 * 1.001  # bf16, 1/8 padded
    assert r.training.optimizer_state >= 2 * r.weight_bytes  # AdamW state of the shards only
