"""`inspect params` and count_params(): totals, dtype, frozen and tied tensors, no forward."""

from __future__ import annotations

import json

import torch
import torchvision
from torch import nn

from torchinspect import count_params


def test_cli_params_resnet18(invoke, golden) -> None:
    result = invoke("params", "resnet18", "--depth", "1")
    assert result.exit_code == 0, result.output
    n = torchvision.models.ResNet18_Weights.IMAGENET1K_V1.meta["num_params"]
    assert f"{n:,}" in result.output
    golden("params_resnet18_depth1.txt", result.output)


def test_params_json(invoke) -> None:
    result = invoke("params", "resnet18", "--format", "json", "--depth", "1")
    data = json.loads(result.output)
    assert data["schema"] == "torchinspect/params/v2"
    root, *rest = data["modules"]
    assert root["name"] == "" and root["params"] == data["total"]  # inclusive: the root is all
    assert root["self_params"] + sum(r["params"] for r in rest) == data["total"]  # depth 1
    assert data["by_dtype"]["float32"]["bytes"] == 4 * data["total"]


def test_several_models_one_table(invoke) -> None:
    result = invoke("params", "resnet18", "vgg11")
    assert result.exit_code == 0, result.output
    vgg = torchvision.models.VGG11_Weights.IMAGENET1K_V1.meta["num_params"]
    assert f"{vgg:,}" in result.output


def test_frozen_tied_and_dtypes() -> None:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(10, 4)
            self.head = nn.Linear(4, 10, bias=False)
            self.head.weight = self.emb.weight
            self.fp16 = nn.Linear(4, 4).to(torch.float16)
            self.register_buffer("steps", torch.zeros(3, dtype=torch.int64))

    m = M()
    m.fp16.bias.requires_grad_(False)
    r = count_params(m, depth=1)
    assert r.total == 40 + 16 + 4
    assert r.stats.frozen == 4 and r.stats.frozen_names == ["fp16.bias"]
    assert r.stats.tied == [("head.weight", "emb.weight")]
    assert r.stats.by_dtype["float16"].bytes == 2 * 20
    assert r.stats.buffers == 3 and r.stats.buffer_bytes == 24
    data = r.to_dict()
    assert data["tied"] == [{"name": "head.weight", "tied_to": "emb.weight"}]


def test_params_need_no_input_and_stay_on_meta() -> None:
    r = count_params("zoo:llama-70b", depth=0)
    assert r.total == 70_553_706_496


def test_container_rows_match_summary() -> None:
    from torchinspect import summarize

    for depth in (1, 2):
        p = {r.name: (r.params, r.self_params)
             for r in count_params("zoo:llama-tiny", depth=depth).rows}
        s = {r.name: (r.params, r.self_params)
             for r in summarize("zoo:llama-tiny", depth=depth).rows if r.params}
        assert p == s
        assert p["layers"][0] > 0  # a container shows what it holds, not 0


# ------------------------------------------------------------ a weights file, no architecture


def _no_tensor_data(monkeypatch) -> None:
    """Any read of tensor data (torch.load, safetensors loaders) fails the test."""
    import safetensors
    import safetensors.torch

    def refuse(*a: object, **k: object) -> None:
        raise AssertionError("tensor data was read")

    for mod, name in ((safetensors, "safe_open"), (safetensors.torch, "load_file"),
                      (safetensors.torch, "load"), (torch, "load")):
        monkeypatch.setattr(mod, name, refuse)


def test_params_of_a_checkpoint_without_architecture(invoke, tmp_path, monkeypatch) -> None:
    model = torchvision.models.resnet18()
    path = tmp_path / "ckpt.pth"
    torch.save({"model": model.state_dict(), "epoch": 3}, path)
    n_params = sum(p.numel() for p in model.parameters())
    n_buffers = sum(b.numel() for b in model.buffers())
    _no_tensor_data(monkeypatch)
    r = invoke("params", str(path), "--depth", "1", "-f", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["schema"] == "torchinspect/params-checkpoint/v1" and d["architecture"] is None
    assert d["tensors"] == len(model.state_dict())
    assert d["elements"] == n_params + n_buffers
    assert d["likely_params"] == n_params  # BatchNorm statistics recognised by name
    assert d["likely_buffers"]["elements"] == n_buffers
    assert d["by_dtype"]["float32"]["bytes"] == 4 * (n_params + n_buffers - 20)  # 20 int64 counters
    rows = {m["name"]: m for m in d["modules"]}
    assert rows[""]["elements"] == d["elements"]
    assert rows["fc"]["elements"] == model.fc.weight.numel() + model.fc.bias.numel()
    assert rows["layer1"]["elements"] == sum(t.numel() for t in model.layer1.state_dict().values())
    assert rows["layer1"]["self_elements"] == 0
    table = invoke("params", str(path), "--depth", "1")
    text = " ".join(table.output.split())
    assert "parameters cannot be told from buffers" in text and "likely" in text
    assert f"Likely parameters {n_params:,}" in text


def test_params_of_a_safetensors_file_with_tied_keys(invoke, tmp_path, monkeypatch) -> None:
    from safetensors.torch import save_file

    emb = torch.zeros(10, 4)
    path = tmp_path / "w.safetensors"
    save_file({"emb.weight": emb, "head.weight": torch.ones(10, 4),
               "pos.position_ids": torch.arange(7)}, str(path))
    _no_tensor_data(monkeypatch)
    d = json.loads(invoke("params", str(path), "-f", "json").stdout)
    assert d["tensors"] == 3 and d["elements"] == 87
    assert d["likely_buffers"]["keys"] == ["pos.position_ids"] and d["likely_params"] == 80


def test_summary_of_a_checkpoint_without_architecture_points_to_params(invoke, tmp_path) -> None:
    path = tmp_path / "ckpt.pth"
    torch.save(nn.Linear(3, 2).state_dict(), path)
    r = invoke("summary", str(path))
    assert r.exit_code == 2
    assert "Traceback" not in r.output
    assert f"inspect params {path}" in r.output
    ok = invoke("summary", str(path), "--arch", f"{_linear_spec(tmp_path)}", "--input", "3")
    assert ok.exit_code == 0, ok.output


def _linear_spec(tmp_path) -> str:
    f = tmp_path / "lin.py"
    f.write_text("from torch import nn\n\ndef make():\n    return nn.Linear(3, 2)\n")
    return f"{f}:make"
