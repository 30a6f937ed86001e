"""`inspect memory`: the storage tracker against hand-computed peaks, the caching-allocator
model, optimizer state, CUDA emulation, the CLI, and (on a GPU) prediction vs measurement.

Hand-computed tests predict for ``device="cpu"``: exact bytes, no 512-byte rounding, no cuBLAS
workspace, so the expected numbers follow from the shapes alone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from torch import nn

from torchinspect.errors import InspectError
from torchinspect.inputs import ExampleInputs, TensorSpec
from torchinspect.memory import StepConfig, predict_case, predict_memory
from torchinspect.memory.allocator import CachingAllocator, round_size
from torchinspect.memory.faking import make_target
from torchinspect.sources.case import make_case

F32 = 4


def nbytes(*modules: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for m in modules for p in m.parameters())


def predict(model: nn.Module, shape: tuple[int, ...], **cfg: object):
    case = make_case(model, ExampleInputs((TensorSpec(shape),)))
    config = StepConfig(**{"optimizer": "sgd", **cfg})  # type: ignore[arg-type]
    return predict_case(case, config, make_target("cpu"), inference=True)


def phase(run, name: str, step: int = 1) -> int:
    found = run.phase_peak(name, step)
    assert found is not None, f"no {name}:{step} phase"
    return found.peak


# ---------------------------------------------------------------- hand-computed peaks

def test_linear_chain_inference_and_forward():
    n, dims = 8, (32, 64, 128, 16)
    model = nn.Sequential(*(nn.Linear(a, b) for a, b in zip(dims, dims[1:], strict=False)))
    r = predict(model, (n, dims[0]))
    weights, x = nbytes(model), n * dims[0] * F32
    h = [n * d * F32 for d in dims[1:]]
    # inference: a layer's input is alive while its output is allocated, then dropped
    assert r.inference.peak == weights + x + max(h[0] + h[1], h[1] + h[2])
    assert r.inference.breakdown["activations"] == max(h[0] + h[1], h[1] + h[2])
    # training forward: every output is alive at the end (inputs saved for the weight
    # gradients, the last one is the output) plus the 4-byte loss
    assert phase(r.training, "forward") == weights + x + sum(h) + F32
    assert r.weight_bytes == weights and r.input_bytes == x


class Residual(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.lin1, self.lin2 = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.lin2(torch.relu(self.lin1(x)))


def test_residual_block():
    n, d = 16, 64
    model = Residual(d)
    r = predict(model, (n, d))
    act = n * d * F32
    # two activations at a time: lin1 out + relu out, relu out + lin2 out, lin2 out + sum
    assert r.inference.peak == nbytes(model) + act + 2 * act
    # training: relu's output is saved (lin2's input and relu's own result: one storage), so
    # at the add it is alive with lin2's output and the sum; lin1's output is not saved
    # (died after relu); at the loss lin2's output is gone: 2 acts + 4 bytes < 3 acts
    assert phase(r.training, "forward") == nbytes(model) + act + 3 * act


class InPlace(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        y.mul_(2)
        y.relu_()
        return y


class OutOfPlace(InPlace):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        z = y * 2
        w = z.relu()
        return w


@pytest.mark.slow
def test_in_place_ops_allocate_nothing():
    n, d = 16, 64
    act = n * d * F32
    inplace, outofplace = predict(InPlace(d), (n, d)), predict(OutOfPlace(d), (n, d))
    weights = nbytes(nn.Linear(d, d))
    assert inplace.inference.peak == weights + act + act
    assert outofplace.inference.peak == weights + act + 3 * act  # y, z, w all bound


class Views(nn.Module):
    def __init__(self, d: int, copy: bool) -> None:
        super().__init__()
        self.lin, self.copy = nn.Linear(d, d), copy

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        v = y.view(y.shape[0], 2, -1).transpose(1, 2)  # views share y's storage
        return v.reshape(y.shape[0], -1) if self.copy else v.unsqueeze(0)[0]


@pytest.mark.slow
def test_view_chain_shares_storage_and_reshape_copies():
    n, d = 16, 64
    act = n * d * F32
    weights = nbytes(nn.Linear(d, d))
    assert predict(Views(d, copy=False), (n, d)).inference.peak == weights + act + act
    # reshape of a transposed view cannot be a view: a copy, alive with y
    assert predict(Views(d, copy=True), (n, d)).inference.peak == weights + act + 2 * act


class Loop(nn.Module):
    def __init__(self, d: int, k: int) -> None:
        super().__init__()
        self.lin, self.k = nn.Linear(d, d), k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.k):
            x = self.lin(x)
        return x


@pytest.mark.slow
def test_module_reused_in_a_loop_saves_every_call():
    n, d, k = 8, 32, 100
    model = Loop(d, k)
    r = predict(model, (n, d))
    act = n * d * F32
    assert r.inference.peak == nbytes(model) + act + 2 * act
    # torchinfo counts one call; autograd keeps the input of each of the k calls
    assert phase(r.training, "forward") == nbytes(model) + act + k * act + F32
    assert r.training.saved[0][0] == "lin"
    # alive when backward starts: the k-1 saved inputs and the loss (the output was dropped)
    assert r.training.saved_total == (k - 1) * act + F32


def test_lstm_holds_output_and_states():
    b, t, i, h = 4, 10, 16, 32
    model = nn.LSTM(i, h, batch_first=True)
    r = predict(model, (b, t, i))
    floor = nbytes(model) + b * t * i * F32 + b * t * h * F32 + 2 * b * h * F32
    assert floor <= r.inference.peak <= floor + 16 * b * 4 * h * F32  # plus a few gate buffers
    assert phase(r.training, "forward") > r.inference.peak  # every step's gates are saved


# ---------------------------------------------------------------- fake = real (CPU)

def _real_cpu_run(model: nn.Module, x: torch.Tensor, cfg: StepConfig):
    """The same steps on real CPU tensors under the same tracker (no fake tensors)."""
    import copy

    from torch.distributed._tools.mod_tracker import ModTracker

    from torchinspect.memory import step as steps
    from torchinspect.memory.timeline import replay
    from torchinspect.memory.tracker import StorageTracker

    model = copy.deepcopy(model)
    tracker = StorageTracker(device_type="cpu")
    state = {n: t.detach().clone().requires_grad_(t.requires_grad) for n, t in model.named_parameters()}
    for t in state.values():
        tracker.register(t, "weights")
    tracker.register(x, "input")
    with tracker, ModTracker() as modules:
        tracker.modules = modules
        params = list(state.values())
        opt = steps.make_optimizer(cfg.optimizer, params, False)
        for p in params:
            p.register_post_accumulate_grad_hook(
                lambda p: setattr(tracker.log.allocs[tracker.storage_serial(p.grad)], "kind", "grad"))
        for n in (1, 2):
            tracker.step = n
            steps.train_step(model, state, (x,), {}, optimizer=opt, loss="sum",
                             autocast=steps.contextlib.nullcontext, name="m", on_phase=tracker.mark)
            for entry in (opt.state.values() if opt else ()):
                for v in entry.values():
                    tracker.log.allocs[tracker.storage_serial(v)].kind = "state"
        tracker.mark("end")
    return replay(tracker.log, len(tracker.log.events), mode="training", device="cpu",
                  root=type(model).__name__)


@pytest.mark.parametrize("optimizer", ["sgd", "sgd-momentum", "adam"])
@pytest.mark.slow
def test_fake_prediction_equals_tracked_real_cpu_run(optimizer):
    torch.manual_seed(0)
    model = nn.Sequential(Residual(32), nn.ReLU(), Residual(32), nn.Linear(32, 8))
    x = torch.randn(16, 32)
    cfg = StepConfig(optimizer=optimizer)
    real = _real_cpu_run(model, x, cfg)
    fake = predict_case(make_case(model, ExampleInputs((TensorSpec((16, 32)),))), cfg,
                        make_target("cpu"), inference=False).training
    assert {(p.phase, p.step): p.peak for p in fake.phases} == \
        {(p.phase, p.step): p.peak for p in real.phases}


# ---------------------------------------------------------------- optimizers

@pytest.mark.parametrize(("optimizer", "copies"), [
    ("adamw", 2), ("adam", 2), ("sgd", 0), ("sgd-momentum", 1), ("none", 0)])
def test_optimizer_state_size(optimizer, copies):
    model = nn.Sequential(nn.Linear(64, 128), nn.Linear(128, 10))
    r = predict(model, (4, 64), optimizer=optimizer)
    tensors = len(list(model.parameters()))
    steps = F32 * tensors if optimizer.startswith("adam") else 0  # one float32 step counter each
    assert r.training.optimizer_state == copies * nbytes(model) + steps
    if optimizer == "none":
        assert r.training.phase_peak("optimizer", 1).breakdown["gradients"] == nbytes(model)


def test_cuda_target_keeps_adam_step_counters_on_the_host():
    model = nn.Sequential(nn.Linear(256, 256), nn.Linear(256, 256))
    case = make_case(model, ExampleInputs((TensorSpec((4, 256)),)))
    r = predict_case(case, StepConfig(optimizer="adam"), make_target("cuda", "h100"), inference=False)
    blocks = sum(round_size(p.numel() * 4) for p in model.parameters())
    assert r.training.optimizer_state == 2 * blocks
    assert r.config["foreach"] is True  # what PyTorch picks for CUDA parameters


# ---------------------------------------------------------------- CUDA rules

def test_caching_allocator_rounding_splitting_and_reuse():
    mib = 1 << 20
    assert round_size(1) == 512 and round_size(513) == 1024
    a = CachingAllocator()
    x = a.malloc(int(10.5 * mib))  # 12 MiB segment, 1.5 MiB left: split
    assert a.allocated == int(10.5 * mib)
    y = a.malloc(int(11.5 * mib))  # 12 MiB segment, 0.5 MiB left: not split, counted whole
    assert a.allocated == int(10.5 * mib) + 12 * mib
    a.free(y)
    z = a.malloc(11 * mib)  # best fit reuses the freed 12 MiB block, again unsplit
    assert a.allocated == int(10.5 * mib) + 12 * mib and a.reserved == 24 * mib
    a.free(x)
    a.free(z)
    assert a.allocated == 0
    small = [a.malloc(1000) for _ in range(3)]  # small pool: one 2 MiB segment, 1 KiB blocks
    assert a.allocated == 3 * 1024 and a.reserved == 26 * mib
    for s in small:
        a.free(s)


def test_cublas_workspace_per_thread_and_operand_copies():
    d, n = 64, 8
    model = nn.Sequential(nn.Linear(d, d))
    case = make_case(model, ExampleInputs((TensorSpec((n, d)),)))
    target = make_target("cuda", "h100")
    r = predict_case(case, StepConfig(optimizer="sgd"), target)
    assert target.workspace == 32 << 20
    # the forward thread's cuBLAS handle, and its cuBLASLt workspace (a Linear with a bias)
    assert r.inference.breakdown["workspace"] == (32 << 20) + (1 << 20)
    assert r.training.phase_peak("backward", 1).breakdown["workspace"] == (64 << 20) + (1 << 20)
    a100 = make_target("cuda", "a100")
    assert a100.workspace == 4096 * 1024 * 2 + 16 * 1024 * 8


def test_cuda_autocast_lists_on_cpu():
    from torchinspect.memory.autocast import cuda_autocast_on_cpu

    x, w = torch.randn(4, 8), torch.randn(8, 8)
    with cuda_autocast_on_cpu(torch.bfloat16):
        assert torch.nn.functional.linear(x, w).dtype == torch.bfloat16
        assert torch.nn.functional.layer_norm(x.bfloat16(), (8,)).dtype == torch.float32
        assert x.bfloat16().softmax(-1).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):  # CPU's own lists are back
        assert torch.nn.functional.layer_norm(x.bfloat16(), (8,)).dtype == torch.bfloat16


def test_autocast_names_are_cuda_autocast_ops():
    from torchinspect.memory.autocast import policies

    key = "AutocastCUDA"
    if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::mm", key):
        pytest.skip("this torch build has no CUDA autocast kernels to compare with")
    cpu_only = {n for n, p in policies().items() if p == "unchanged"}
    for name in set(policies()) - cpu_only:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", key), name


def test_attention_follows_the_gpu_kernel():
    class Attn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(64, 64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q = self.proj(x).view(x.shape[0], x.shape[1], 4, 16).transpose(1, 2)
            return torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)

    b, t = 2, 512
    case = make_case(Attn(), ExampleInputs((TensorSpec((b, t, 64)),)))
    cuda = predict_case(case, StepConfig(amp="bf16"), make_target("cuda", "h100"))
    scores = b * 4 * t * t * 2  # the (T x T) matrix in bf16 that flash attention never builds
    assert cuda.training.saved_total < scores


# ---------------------------------------------------------------- API and what-ifs

def test_user_model_is_left_as_given():
    model = nn.Sequential(Residual(16), nn.BatchNorm1d(16))
    model.eval()
    before = {n: p for n, p in model.named_parameters()}
    predict_memory(model, ExampleInputs((TensorSpec((4, 16)),)), device="cpu",
                   checkpointing="Residual")
    assert not model.training and all(
        p is before[n] and p.device.type == "cpu" for n, p in model.named_parameters())
    assert all("forward" not in m.__dict__ for m in model.modules())


@pytest.mark.slow
def test_checkpointing_lowers_the_training_peak():
    model = nn.Sequential(*(Residual(64) for _ in range(8)))
    case = make_case(model, ExampleInputs((TensorSpec((4096, 64)),)))
    plain = predict_case(case, StepConfig(), make_target("cpu"), inference=False).training
    ckpt = predict_case(case, StepConfig(checkpointing="Residual"), make_target("cpu"),
                        inference=False).training
    assert ckpt.saved_total < plain.saved_total / 2
    assert ckpt.peak < plain.peak


def test_no_floating_output_is_a_clear_error():
    class Argmax(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x).argmax(-1)

    with pytest.raises(InspectError, match="no floating-point tensor.*--loss"):
        predict_memory(Argmax(), ExampleInputs((TensorSpec((2, 8)),)))
    r = predict_memory(Argmax(), ExampleInputs((TensorSpec((2, 8)),)), train=False)
    assert r.training is None and r.inference.peak > 0


@pytest.mark.slow
def test_dtype_cast_halves_weights():
    model = nn.Linear(128, 128)
    fp32 = predict_memory(model, ExampleInputs((TensorSpec((4, 128)),)), device="cpu")
    bf16 = predict_memory(model, ExampleInputs((TensorSpec((4, 128)),)), device="cpu", dtype="bf16")
    assert bf16.weight_bytes * 2 == fp32.weight_bytes


@pytest.mark.slow
def test_fit_finds_the_largest_batch():
    from torchinspect.memory.fit import fit

    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256))
    case = make_case(model, ExampleInputs((TensorSpec((1, 256)),)))
    cfg, target = StepConfig(optimizer="sgd"), make_target("cpu")
    budget = predict_case(case, cfg, target, batch=37).training.peak
    found = fit(case, cfg, target, budget)
    assert found.training == 37
    assert predict_case(case, cfg, target, batch=38).training.peak > budget
    assert found.inference >= found.training


# ---------------------------------------------------------------- CLI

@pytest.mark.slow
def test_cli_prediction(runner):
    from torchinspect.cli.app import app

    res = runner.invoke(app, ["memory", "resnet18", "--input", "3,32,32", "--batch", "2"])
    assert res.exit_code == 0, res.output
    assert "Inference (eval, inference_mode)" in res.output
    assert "Training step" in res.output and "fwd 1" in res.output
    js = runner.invoke(app, ["memory", "resnet18", "--input", "3,32,32", "-f", "json",
                             "--optimizer", "sgd-momentum", "--no-train"])
    data = json.loads(js.output)
    assert data["schema"] == "torchinspect/memory/v1" and data["training"] is None
    assert data["inference"]["peak"] > data["weight_bytes"]


def test_cli_sweep_and_fit_rows(runner):
    from torchinspect.cli.app import app

    res = runner.invoke(app, ["memory", "resnet18", "--input", "3,32,32", "--batch", "2,4",
                              "--fit", "0.5GB", "-f", "json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert [r["batch"] for r in data["results"]] == [2, 4]
    # 0.5 GB of a GPU is 0.5 GiB; the peaks are held to what a process can use of it
    memory = data["memory"]
    assert memory["total"] == 2**29 and memory["read_as"] == "0.5 GiB"
    assert memory["usable"] == int(2**29 * 0.99) - memory["cuda_context"]
    assert data["fit"]["budget"] == memory["usable"] and data["fit"]["inference"] >= 1
    tiny = runner.invoke(app, ["memory", "resnet18", "--input", "3,32,32", "--batch", "2",
                               "--fit", "1MB"])
    assert tiny.exit_code == 0 and "no: inference, training" in tiny.output  # a row, not an error


def test_a_gpus_memory_is_read_as_it_is_sold():
    """--fit 24GB: a card sold as 24 GB holds 24 GiB; the output says how it read the size,
    and what of it tensors may use (the CUDA context and the allocator's reserve cited)."""
    from torchinspect.gpus import ALLOCATOR_RESERVE, CUDA_CONTEXT_BYTES
    from torchinspect.memory.budget import gpu_memory

    card = gpu_memory("24GB")
    assert card.total == 24 * 2**30 and card.size == "24 GiB" and "GB on a GPU are GiB" in card.read_as
    assert card.usable == int(24 * 2**30 * (1 - ALLOCATOR_RESERVE)) - CUDA_CONTEXT_BYTES
    assert card.gpu is None  # a size names no GPU
    assert gpu_memory("80GiB").read_as == "" and gpu_memory("80GiB").total == 80 * 2**30
    assert gpu_memory("512MB").total == 512 * 2**20
    assert gpu_memory("25769803776").total == 25769803776 and gpu_memory("25769803776").size == (
        "25,769,803,776 bytes")
    for bad in ("lots", "24XB", "24G", "0B", "-1GB", "24iB", "1e400GB", "1e26", "2048TB"):
        with pytest.raises(InspectError):
            gpu_memory(bad)


def test_cli_fit_says_how_it_read_the_size_and_what_is_usable(runner):
    from torchinspect.cli.app import app

    res = runner.invoke(app, ["memory", "zoo:mnist-net", "--fit", "1GB", "--no-train"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "GPU memory 1 GiB (1.07 GB): GB on a GPU are GiB, as its memory is sold" in text
    from torchinspect.memory.budget import gpu_memory
    from torchinspect.report.base import fmt_bytes

    card = gpu_memory("1GB")
    assert (f"Usable {fmt_bytes(card.usable)} ({card.usable / 2**30:.2f} GiB): less the CUDA "
            f"context ({fmt_bytes(card.context)}") in text
    assert f"caching allocator's reserve (1%: {fmt_bytes(card.reserve_bytes)})" in text
    assert "Headroom" in text and "Fits 1 GiB" in text
    # the first table shows the input's own batch, not "-"
    row = next(line for line in res.output.splitlines() if "1,1,28,28" in line)
    assert row.split()[0] == "1"


def test_fit_h100_is_the_h100s_memory_as_cuda_reports_it_less_context_and_reserve():
    """--fit h100: the catalogue's H100, as CUDA reported its total on this project's H100,
    less the cited CUDA context and 1% for the caching allocator (issue 42)."""
    from torchinspect.gpus import ALLOCATOR_RESERVE, CATALOGUE, CUDA_CONTEXT_BYTES
    from torchinspect.memory.budget import memory_budget

    h100 = CATALOGUE["h100"]
    b = memory_budget("h100")
    assert b.gpu is h100 and b.total == h100.cuda_total and b.read_as == "as CUDA reports it"
    assert b.size == "80 GiB" and b.context == CUDA_CONTEXT_BYTES
    assert b.usable == int(h100.cuda_total * (1 - ALLOCATOR_RESERVE)) - CUDA_CONTEXT_BYTES
    assert b.usable == h100.usable_bytes() and b.reserve_bytes == b.total - int(b.total * 0.99)
    # below a card sold as 80GB: the driver keeps its share, the context and reserve go too
    assert b.usable < memory_budget("80GB").usable < 80 * 2**30
    assert memory_budget(h100) == memory_budget("h100")  # a Gpu works as well as its name
    assert b.to_dict()["gpu"] == "h100" and b.to_dict()["usable"] == b.usable


def _names() -> list[tuple[str, str]]:
    from torchinspect.gpus import CATALOGUE

    return [(g.name, alias) for g in CATALOGUE.values() for alias in (g.name, *g.aliases)]


@pytest.mark.parametrize(("name", "alias"), _names(), ids=[a for _, a in _names()])
def test_every_catalogue_name_is_a_fit_target(name: str, alias: str):
    from torchinspect.gpus import CATALOGUE
    from torchinspect.memory.budget import memory_budget

    for written in (alias, alias.upper(), alias.replace(" ", "-")):
        b = memory_budget(written)
        assert b.gpu is CATALOGUE[name] and b.usable == CATALOGUE[name].usable_bytes()


@pytest.mark.parametrize("name", [n for n, a in _names() if n == a])
def test_cli_fit_takes_every_catalogue_gpu_and_predicts_for_it(invoke, monkeypatch, name):
    """``inspect memory --fit NAME`` for each card: the fit is held to its usable memory and
    the prediction is for that card (the search itself is cut to one probe per mode here;
    test_cli_sweep_and_fit_rows runs it whole)."""
    import torchinspect.memory.fit as fit
    from torchinspect.gpus import CATALOGUE

    monkeypatch.setattr(fit, "largest_fitting", lambda peak, budget, limit: (
        1 if peak(1) <= budget else None, False))
    res = invoke("memory", "zoo:mnist-net", "--fit", name, "--no-train", "-f", "json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    card = CATALOGUE[name]
    assert data["memory"]["gpu"] == name and data["memory"]["total"] == card.total_bytes
    assert data["fit"]["budget"] == data["memory"]["usable"] == card.usable_bytes()
    assert data["results"][0]["gpu"] == name and data["fit"]["inference"] == 1


def test_cli_fit_h100_says_what_of_the_card_is_usable(invoke):
    from torchinspect.gpus import CATALOGUE, CUDA_CONTEXT_BYTES
    from torchinspect.report.base import fmt_bytes

    res = invoke("memory", "zoo:mnist-net", "--fit", "NVIDIA H100 80GB HBM3", "--no-train",
                 "--batch", "2")
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    h100 = CATALOGUE["h100"]
    total, usable = h100.total_bytes, h100.usable_bytes()
    assert (f"GPU memory h100 (NVIDIA H100 SXM5 80GB): {fmt_bytes(total)} "
            f"({total / 2**30:.2f} GiB) as CUDA reports it; sold as 80 GiB") in text
    assert (f"Usable {fmt_bytes(usable)} ({usable / 2**30:.2f} GiB): less the CUDA context "
            f"({fmt_bytes(CUDA_CONTEXT_BYTES)}, as PyTorch measured it) and the caching "
            f"allocator's reserve (1%: {fmt_bytes(total - int(total * 0.99))})") in text
    assert "Fits h100" in text and "predicted for cuda (h100)" in text and "Headroom" in text
    row = next(line for line in res.output.splitlines() if line.lstrip().startswith("2 "))
    assert "yes" in row.split()


@pytest.mark.parametrize(("args", "message", "hint"), [
    (["--fit", "h100", "--gpu", "a10"], "--gpu a10 and --fit h100 name different GPUs",
     "--fit h100 alone predicts for the h100"),
    (["--fit", "h10"], "--fit 'h10': not a GPU this tool knows, nor a memory size",
     "did you mean h100? known GPUs: h100"),
    (["--fit", "a100-sxm5"], "--fit 'a100-sxm5': not a GPU", "did you mean a100?"),
    (["--fit", "24XB"], "--fit '24XB': expected a GPU's memory", "or a GPU's name, like h100"),
])
def test_cli_fit_names_a_known_gpu_or_says_which_it_meant(invoke, args, message, hint):
    res = invoke("memory", "zoo:mnist-net", "--no-train", *args)
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert message in text and hint in text and "Traceback" not in res.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_cli_fit_cuda_needs_the_gpu_it_measures(invoke):
    res = invoke("memory", "zoo:mnist-net", "--fit", "cuda", "--no-train")
    assert res.exit_code == 2, res.output
    assert "--fit cuda: no CUDA device is available to measure" in res.output
    assert "--fit h100 or --fit 80GB" in " ".join(res.output.split())


def test_cli_fit_and_gpu_may_name_the_same_card(invoke, monkeypatch):
    import torchinspect.memory.fit as fit

    monkeypatch.setattr(fit, "largest_fitting", lambda peak, budget, limit: (1, False))
    for gpu in ("h100", "NVIDIA H100 80GB HBM3", "H-100"):
        res = invoke("memory", "zoo:mnist-net", "--fit", "h100", "--gpu", gpu, "--no-train",
                     "-f", "json")
        assert res.exit_code == 0, res.output
        assert json.loads(res.output)["results"][0]["gpu"] == "h100"
    # a size names no GPU: --gpu alone says what the prediction is for
    res = invoke("memory", "zoo:mnist-net", "--fit", "24GB", "--gpu", "a10", "--no-train",
                 "-f", "json")
    data = json.loads(res.output)
    assert data["results"][0]["gpu"] == "a10" and data["memory"]["gpu"] is None
    # 4090 is the card, not 4,090 bytes
    res = invoke("memory", "zoo:mnist-net", "--fit", "4090", "--no-train", "-f", "json")
    assert json.loads(res.output)["memory"]["gpu"] == "rtx4090"


def test_the_fit_progress_speaks_the_tables_unit():
    from torchinspect.memory.fit import fit

    heard: list[str] = []
    model = nn.Sequential(nn.Linear(64, 64))
    case = make_case(model, ExampleInputs((TensorSpec((1, 64)),)))
    fit(case, StepConfig(train=False), make_target("cpu"), 10**6,
        progress=lambda text, final=False: heard.append(text))
    peaks = [t for t in heard if "peaks at" in t]
    assert peaks and all(t.endswith(" GB") for t in peaks) and not any("MiB" in t for t in heard)


@pytest.mark.parametrize(("args", "message"), [
    (["--fit", "lots"], "--fit 'lots'"),
    (["--checkpointing", "Nope"], "--checkpointing Nope: resnet18 has no module"),
    (["--optimizer", "lion"], "--optimizer 'lion'"),
    (["--amp", "--dtype", "fp8"], "--amp 'fp8': expected bf16 or fp16"),
])
def test_cli_usage_errors(runner, args, message):
    from torchinspect.cli.app import app

    res = runner.invoke(app, ["memory", "resnet18", "--input", "3,32,32", *args])
    assert res.exit_code == 2
    assert message in res.output and "hint:" in res.output
    assert "Traceback" not in res.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_cli_verify_needs_cuda(runner):
    from torchinspect.cli.app import app

    res = runner.invoke(app, ["memory", "resnet18", "--input", "3,32,32", "--verify"])
    assert res.exit_code == 2 and "no CUDA device" in res.output


# ---------------------------------------------------------------- scale and the GPU

_PREDICT_70B = """
import json
from torchinspect import predict_memory
from torchinspect.sources.case import ModelOptions
r = predict_memory("zoo:llama-70b", options=ModelOptions(inputs=["long:4096"]), dtype="bf16",
                   optimizer="adamw", inference=False)
print(json.dumps({"params": r.params, "weights": r.weight_bytes, "state": r.training.optimizer_state,
                  "peak": r.training.peak,
                  "hwm_kib": int(next(line.split()[1] for line in open("/proc/self/status")
                                      if line.startswith("VmHWM:")))}))
"""


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads VmHWM (Linux)")
def test_70b_decoder_on_a_cpu():
    """The 70B AdamW step predicted on a CPU in its own process, under 2 GiB. Measured as the
    process's VmHWM: ru_maxrss is kept across fork and exec, so a child of a pytest worker
    would report the worker's own high-water mark."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _PREDICT_70B], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    r = json.loads(done.stdout.strip().splitlines()[-1])
    assert r["params"] == 70_553_706_496
    # bf16 weights and gradients, AdamW state in the weights' dtype (2 copies)
    assert r["state"] >= 2 * r["weights"]
    assert r["peak"] > 4 * r["weights"]
    assert r["hwm_kib"] < 2 * 1024 * 1024  # KiB: < 2 GiB


@pytest.mark.cuda
@pytest.mark.parametrize("cfg", [StepConfig(train=False), StepConfig(optimizer="adam"),
                                 StepConfig(optimizer="adamw", amp="bf16")])
def test_prediction_matches_the_gpu(cfg):
    from torchinspect.memory.predict import example_at
    from torchinspect.memory.verify import verify
    from torchinspect.sources.case import ModelOptions

    # resnet50 at batch 32, as in benchmarks/RESULTS-memory.md (within 0.2% on an H100); small
    # conv nets at small batches are dominated by cuDNN workspaces, which are not predicted
    case = make_case("resnet50", options=ModelOptions(inputs=["3,224,224"], batch=32), device="meta")
    result = predict_case(case, cfg, make_target("cuda"))
    checked = verify(result, case, example_at(case, None), cfg, tolerance=0.05)
    if cfg.amp:
        # known limit (docs/concepts/memory.md, RESULTS-memory.md): the bf16 inference forward
        # of resnet50 gets a cuDNN convolution workspace the prediction cannot know (-5.1% and
        # -5.7% on two H100 runs); every training phase is within 0.2%
        train = [c for c in checked.checks if c.mode == "training"]
        assert train and all(abs(c.error) <= 0.05 for c in train), [(c.phase, c.error) for c in train]
        infer = [c for c in checked.checks if c.mode == "inference"]
        assert all(-0.08 <= c.error <= 0.05 for c in infer), [(c.phase, c.error) for c in infer]
        return
    assert checked.ok, [(c.mode, c.phase, c.error) for c in checked.checks]


@pytest.mark.slow
def test_cli_verify_reports_each_phase_and_fails_beyond_tolerance(runner, monkeypatch):
    """The --verify wiring without a GPU: the measurement is replaced, the comparison is real."""
    import torchinspect.memory.verify as verify_mod
    from torchinspect.cli.app import app

    monkeypatch.setattr(verify_mod, "require_cuda", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU")

    def measured(case, example, cfg, mode, on_mark=None):  # 10% above every predicted phase
        r = predict_case(case, cfg, make_target("cuda"), inference=mode == "inference")
        run = r.inference if mode == "inference" else r.training
        out = {f"{p.phase}:{p.step}": int(p.peak * 1.1) for p in run.phases}
        out["peak"] = max(out.values())
        return out

    monkeypatch.setattr(verify_mod, "measure", measured)
    args = ["memory", "zoo:llama-tiny", "--optimizer", "sgd", "--verify"]
    loose = runner.invoke(app, [*args, "--tolerance", "0.2"])
    assert loose.exit_code == 0, loose.output
    assert "Predicted vs torch.cuda.max_memory_allocated on Fake GPU" in loose.output
    assert "-9.09%" in loose.output and "verification passed" in loose.output
    strict = runner.invoke(app, args)
    assert strict.exit_code == 1 and "FAIL" in strict.output


def test_value_dependent_forward_is_refused_clearly():
    class Masked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.lin(x)
            return y[y > 0].sum()  # the shape depends on the values

    with pytest.raises(InspectError, match="depends on tensor values") as info:
        predict_memory(Masked(), ExampleInputs((TensorSpec((2, 4)),)))
    assert info.value.status == 70


def test_batch_of_one_with_batchnorm_predicts_inference_and_says_why_not_training(runner):
    from torchinspect.cli.app import app

    res = runner.invoke(app, ["memory", "resnet18", "--input", "3,32,32", "-f", "json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["training"] is None and data["inference"]["peak"] > 0
    assert "pass --batch 2 or more" in data["notes"][0]


# ---------------------------------------------------------------- cuDNN RNN (CUDA targets)

RNN_MEASURED = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "cudnn-rnn-h100.jsonl"


def test_cudnn_rnn_reserve_matches_every_measured_shape():
    """The reserve formula against the reserve tensors cuDNN allocated on an H100 (read from
    the autograd node's saved tensors by benchmarks/cudnn_rnn_memory.py)."""
    import json

    from torchinspect.memory.cudnn_rnn import reserve_bytes

    rows = [json.loads(line) for line in RNN_MEASURED.read_text().splitlines()]
    trained = [r for r in rows if r.get("train") and "saved" in r]
    assert len(trained) >= 60
    kinds = {"lstm": "lstm", "gru": "gru", "rnn": "rnn_tanh"}
    for r in trained:
        size = 4 if r["dtype"] == "fp32" else 2
        want = reserve_bytes(kinds[r["kind"]], r["layers"], r["seq"], r["batch"], r["hidden"],
                             2 if r["bidir"] else 1, size)
        assert r["saved"]["_saved_result3"] == want, r


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
@pytest.mark.slow
def test_cuda_target_keeps_cudnns_reserve_for_backward(kind):
    from torchinspect.memory.cudnn_rnn import reserve_bytes

    layers, seq, batch, hidden = 2, 16, 4, 32
    rnn = getattr(nn, kind)(8, hidden, layers, batch_first=True)
    case = make_case(rnn, torch.zeros(batch, seq, 8))
    gpu = predict_case(case, StepConfig(optimizer="sgd"), make_target("cuda", "h100"),
                       inference=False)
    cpu = predict_case(case, StepConfig(optimizer="sgd"), make_target("cpu"), inference=False)
    reserve = reserve_bytes({"LSTM": "lstm", "GRU": "gru", "RNN": "rnn_tanh"}[kind], layers,
                            seq, batch, hidden, 1, 4)
    # what waits for backward on CUDA: the reserve and the output (one allocation each, the
    # caching allocator's 512-byte rounding aside), not the unrolled cells' saved tensors
    out = batch * seq * hidden * 4
    rounded = sum(-(-n // 512) * 512 for n in (reserve, out))
    assert gpu.training.saved_total >= reserve
    assert gpu.training.saved_total <= rounded + 4 * 512 * layers  # + hy (cy), no per-step cells
    assert cpu.training.saved_total != gpu.training.saved_total
    # eval mode: no reserve (what is allocated at the inference peak, workspace aside, is
    # smaller than the reserve alone)
    inf = predict_case(case, StepConfig(train=False), make_target("cuda", "h100"))
    assert inf.inference.breakdown["activations"] < reserve


def test_forward_modules_name_and_nest_as_modtracker_does():
    """Inference follows the running module with two forward hooks (no torch.distributed
    import); the names and parents it reports are ModTracker's."""
    from torch.distributed._tools.mod_tracker import ModTracker

    from torchinspect.memory.modules import ForwardModules

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(2)])
            self.shared = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for b in self.blocks:
                x = self.shared(b(x))
            return self.shared(x)

    def seen(tracker_cls: type) -> list[tuple[str, ...]]:
        net, out = Net(), []
        with tracker_cls() as t:
            hook = torch.nn.modules.module.register_module_forward_hook(
                lambda m, i, o: out.append(tuple(sorted(t.parents - {"Global"}))))
            try:
                with torch.no_grad():
                    net(torch.zeros(2, 4))
            finally:
                hook.remove()
        return out

    assert seen(ForwardModules) == seen(ModTracker)
    assert ("Net", "Net.blocks.1") in seen(ForwardModules)  # ModuleList children by index


def test_cudnn_rnn_final_state_carries_gradients():
    """A head on h_n (not on the output) still trains every parameter before the LSTM."""
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb, self.lstm, self.head = nn.Linear(8, 8), nn.LSTM(8, 16, batch_first=True), nn.Linear(16, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            _, (h, _) = self.lstm(self.emb(x))
            return self.head(h[-1])

    net = Net()
    r = predict_case(make_case(net, torch.zeros(4, 5, 8)), StepConfig(optimizer="sgd"),
                     make_target("cuda"), inference=False)
    assert r.training.gradients == sum(round_size(p.numel() * 4) for p in net.parameters())


def test_cli_amp_reads_dtype_as_bench_does(runner, monkeypatch):
    """--amp is a flag in every command: --dtype names the autocast dtype (fp16 by default)."""
    from torchinspect.cli import memory as cli_memory

    assert cli_memory._amp("bf16", True) == (None, "bf16")
    assert cli_memory._amp(None, True) == (None, "fp16")
    assert cli_memory._amp("bf16", False) == ("bf16", None)
