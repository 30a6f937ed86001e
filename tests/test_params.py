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
