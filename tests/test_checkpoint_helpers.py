"""Fixture builders shared by test_checkpoint/test_safety/test_diff/test_convert (no tests here).

Every checkpoint is written by the tests themselves from small real models, so the
expected keys, shapes and values are computed, never hard-coded.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import torch
from torch import nn

DATA_DIR = Path(__file__).parent / "data"


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.attn = nn.ModuleDict({"q": nn.Linear(d, d), "k": nn.Linear(d, d)})
        self.norm = nn.LayerNorm(d)


class Net(nn.Module):
    """Conv stem with BatchNorm, 6 repeated blocks, a classification head."""

    def __init__(self, num_classes: int = 10, d: int = 8, n_layers: int = 6) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, d, 3)
        self.bn = nn.BatchNorm2d(d)
        self.layers = nn.ModuleList(Block(d) for _ in range(n_layers))
        self.head = nn.Linear(d, num_classes)


class TiedLM(nn.Module):
    """Embedding and LM head share one weight (tied)."""

    def __init__(self, vocab: int = 32, d: int = 8) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.proj = nn.Linear(d, d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.tok.weight


HELPERS = Path(__file__)  # this file, for python specs like f"{HELPERS}:Net"


def cli_json(result) -> dict:
    """The JSON a CLI run printed; exit 0 (ok) or 1 (incompatible/partial) only."""
    import json

    assert result.exit_code in (0, 1), result.output
    return json.loads(result.output)


def net(seed: int = 0, **kw) -> Net:
    torch.manual_seed(seed)
    return Net(**kw)


def save_plain(path: Path, model: nn.Module | None = None) -> dict[str, torch.Tensor]:
    model = model or net()
    sd = model.state_dict()
    torch.save(sd, path)
    return sd


class _DataParallelLike(nn.Module):
    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module


def save_dataparallel(path: Path, model: nn.Module | None = None) -> dict[str, torch.Tensor]:
    """{"state_dict": {"module."...}, "optimizer": SGD momentum state, "scheduler", "epoch"}."""
    model = model or net()
    # nn.DataParallel would move the model to cuda:0 on a GPU machine; a wrapper holding it
    # as ``.module`` gives the same "module." keys everywhere.
    dp = _DataParallelLike(model)
    opt = torch.optim.SGD(dp.parameters(), lr=0.1, momentum=0.9)
    for p in dp.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
    torch.save({"state_dict": dp.state_dict(), "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(), "epoch": 5, "best_acc": 0.75, "arch": "Net"}, path)
    return dp.state_dict()


def save_compiled(path: Path, model: nn.Module | None = None) -> dict[str, torch.Tensor]:
    """A torch.compile'd module's state_dict (keys under "_orig_mod.")."""
    model = model or net()
    compiled = torch.compile(model)  # lazy: nothing is compiled until called
    sd = compiled.state_dict()
    torch.save(sd, path)
    return sd


def save_simulated_gpu(path: Path, obj: object, device: str = "cuda:0") -> None:
    """torch.save ``obj`` with every storage tagged ``device``, as a GPU save would.

    torch.save records each storage's device with ``location_tag``; tagging it here gives
    the exact bytes a GPU save writes, without a GPU. The real GPU file is made by
    tests/data/make_gpu_checkpoint.py.
    """
    import torch.serialization as ser

    original = ser.location_tag
    ser.location_tag = lambda storage: device
    try:
        torch.save(obj, path)
    finally:
        ser.location_tag = original


# ------------------------------------------------------------------ malicious payloads

class _Reduce:
    """Pickles as ``func(*args)``: what a malicious checkpoint does."""

    def __init__(self, func, args) -> None:
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def payloads(marker: Path) -> dict[str, object]:
    """Objects that would create ``marker`` when unpickled."""
    import builtins

    cmd = f"touch {marker}"
    code = f"open({str(marker)!r}, 'w').close()"
    inner = pickle.dumps(_Reduce(os.system, (cmd,)))
    return {
        "os_system": _Reduce(os.system, (cmd,)),
        "eval": _Reduce(builtins.eval, (code,)),
        "exec": _Reduce(builtins.exec, (code,)),
        "nested_pickle_loads": _Reduce(pickle.loads, (inner,)),
    }


def write_payload(path: Path, obj: object, how: str) -> None:
    """how: "zip" (torch.save), "legacy" (old torch.save), "pickle" (pickle.dump, protocol 4)."""
    wrapped = {"state_dict": {"w": torch.zeros(2)}, "evil": obj}
    if how == "zip":
        torch.save(wrapped, path)
    elif how == "legacy":
        torch.save(wrapped, path, _use_new_zipfile_serialization=False)
    else:
        path.write_bytes(pickle.dumps(wrapped, protocol=4))


# ------------------------------------------------------------------ checkpoints in the wild


class FP8Linear(nn.Linear):
    """A TransformerEngine-style layer: FP8 scaling state through get/set_extra_state."""

    def __init__(self, i: int, o: int, as_tensor: bool = False) -> None:
        super().__init__(i, o)
        self.as_tensor = as_tensor
        self.fp8_meta = {"scale": 1.5, "amax_history": [0.25, 0.5], "recipe": "delayed"}

    def get_extra_state(self):
        if self.as_tensor:  # TE >= 1.x serializes its state into a uint8 tensor
            return torch.tensor(list(b"scale=1.5"), dtype=torch.uint8)
        return dict(self.fp8_meta)

    def set_extra_state(self, state) -> None:
        if isinstance(state, dict):
            self.fp8_meta = dict(state)


class ExtraStateNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = FP8Linear(8, 8)
        self.b = FP8Linear(8, 4, as_tensor=True)


class QNet(nn.Module):
    """torch.ao quantized Linear head (what torchvision's quantization.* models hold)."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.fc = torch.ao.nn.quantized.Linear(16, num_classes)


class ClipLike(nn.Module):
    """CLIP's 0-dim ``logit_scale`` parameter."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.logit_scale = nn.Parameter(torch.tensor(2.6592))


class Stage(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer1 = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
        self.head = nn.Linear(4, 2)


class TiedBN(nn.Module):
    """Tied embedding/LM head plus a BatchNorm (its num_batches_tracked counter)."""

    def __init__(self, vocab: int = 32, d: int = 8) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.bn = nn.BatchNorm1d(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.tok.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.bn(self.tok(x).transpose(1, 2)).transpose(1, 2)
        return self.lm_head(h)
