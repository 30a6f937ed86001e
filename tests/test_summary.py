"""`inspect summary` and summarize(): CLI exit codes and numbers, golden tables, JSON."""

from __future__ import annotations

import json

import pytest
import torch
import torchvision
from torch import nn

from torchinspect import summarize
from torchinspect.analysis.summary import Column
from torchinspect.report.summary import summary_cell

R18 = torchvision.models.ResNet18_Weights.IMAGENET1K_V1.meta


def test_cli_resnet18_numbers(invoke) -> None:
    result = invoke("summary", "resnet18", "--input", "3,224,224")
    assert result.exit_code == 0, result.output
    assert f"{R18['num_params']:,}" in result.output  # 11,689,512
    assert f"{R18['_ops']:.2f}G" in result.output  # 1.81G MACs (torchvision: 1.814 GFLOPS)
    assert "FLOPs = 2 x MACs" in result.output
    assert "traced on meta" in result.output


def test_golden_resnet18_depth2(invoke, golden) -> None:
    result = invoke("summary", "resnet18", "--input", "3,224,224", "--depth", "2")
    assert result.exit_code == 0, result.output
    golden("summary_resnet18_depth2.txt", result.output)


def test_golden_folded_columns(invoke, golden) -> None:
    result = invoke("summary", "resnet50", "--depth", "2", "--fold",
                    "--columns", "output,params,macs")
    assert result.exit_code == 0, result.output
    assert "(×" in result.output  # layer blocks 1..N folded
    golden("summary_resnet50_fold.txt", result.output)


def test_json_schema_and_totals(invoke) -> None:
    result = invoke("summary", "resnet18", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["schema"] == "torchinspect/summary/v1"
    assert data["totals"]["params"] == R18["num_params"]
    assert data["totals"]["flops"] == 2 * data["totals"]["macs"]
    assert data["layers"][0]["type"] == "ResNet"
    # the shown rows add up to the totals (depth folding keeps the sums)
    assert sum(r["params"] or 0 for r in data["layers"]) == data["totals"]["params"]
    assert sum(r["macs"] for r in data["layers"]) == data["totals"]["macs"]


@pytest.mark.parametrize("fmt", ["csv", "markdown"])
def test_other_formats(invoke, fmt: str) -> None:
    result = invoke("summary", "resnet18", "--format", fmt, "--depth", "1")
    assert result.exit_code == 0, result.output
    assert "conv1" in result.output and "9408" in result.output.replace(",", "")


def test_totals_for_several_models(invoke) -> None:
    result = invoke("summary", "resnet18", "resnet50", "--totals")
    assert result.exit_code == 0, result.output
    r50 = torchvision.models.ResNet50_Weights.IMAGENET1K_V1.meta
    assert f"{R18['num_params']:,}" in result.output and f"{r50['num_params']:,}" in result.output
    assert "conv1" not in result.output  # one row per model, no layer tree


def test_single_model_totals_only(invoke) -> None:
    result = invoke("summary", "resnet18", "--totals")
    assert result.exit_code == 0
    assert "Total params" in result.output and "layer1" not in result.output


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--depth", "-1"], "--depth -1"),
        (["--input", "3,32,32"], "forward failed"),  # resnet18 survives 32x32; use a bad rank
        (["--columns", "layer,bogus"], "bogus"),
        (["--device", "gpu0"], "--device"),
    ],
)
def test_bad_input_exits_2_without_traceback(invoke, args: list[str], needle: str) -> None:
    if args[:2] == ["--input", "3,32,32"]:
        args = ["--input", "7,7"]  # rank 2 into a conv net
    result = invoke("summary", "resnet18", *args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert needle.split()[0] in result.output
    assert sum(line.startswith("error:") for line in result.output.splitlines()) == 1


def test_summarize_api_object_and_columns() -> None:
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 4 * 4, 2))
    s = summarize(model, torch.zeros(1, 3, 4, 4), columns="output,params")
    assert s.columns == (Column.layer, Column.output, Column.params)
    assert s.totals.params == sum(p.numel() for p in model.parameters())
    assert s.totals.macs == 8 * 3 * 9 * 16 + 8 * 16 * 2
    assert s.to_dict()["layers"][1]["kernel"] == "3×3 p1"
    from torchinspect.report.summary import summary_report

    assert summary_report(s).schema == "torchinspect/summary/v1"


def test_depth_zero_is_one_row() -> None:
    s = summarize("resnet18", "3,224,224", depth=0)
    assert len(s.rows) == 1 and s.rows[0].params == R18["num_params"]


class _LoopModel(nn.Module):
    """Containers never called themselves: a ModuleList and a ModuleDict run in loops."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(4, 8)
        self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))
        self.heads = nn.ModuleDict({"a": nn.Linear(8, 2), "b": nn.Linear(8, 3)})

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return [head(x) for head in self.heads.values()]


def _n(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _linear_macs(module: nn.Module, batch: int) -> int:
    return sum(batch * m.in_features * m.out_features for m in module.modules()
               if isinstance(m, nn.Linear))


def test_uncalled_containers_are_rows_at_their_depth() -> None:
    model, batch = _LoopModel(), 2
    s = summarize(model, torch.zeros(batch, 4), depth=1)
    rows = {r.name: r for r in s.rows}
    assert [r.name for r in s.rows] == ["", "stem", "blocks", "heads"]
    for name in ("blocks", "heads"):
        sub = getattr(model, name)
        row = rows[name]
        assert (row.type, row.depth, row.called) == (type(sub).__name__, 1, False)
        assert row.params == _n(sub) and row.macs == _linear_macs(sub, batch)
        assert str(summary_cell(row, Column.input)) == "-" and str(summary_cell(row, Column.output)) == "-"
    assert rows[""].params == 0 and str(summary_cell(rows[""], Column.params)) == "--"
    assert sum(r.params or 0 for r in s.rows) == s.totals.params == _n(model)
    assert sum(r.macs for r in s.rows) == s.totals.macs == _linear_macs(model, batch)

    deep = summarize(model, torch.zeros(batch, 4), depth=2)
    names = [r.name for r in deep.rows]
    assert names == ["", "stem", "blocks", "blocks.0", "blocks.1", "blocks.2", "heads",
                     "heads.a", "heads.b"]
    blocks = deep.rows[2]
    assert blocks.container and str(summary_cell(blocks, Column.params)) == "--" and blocks.macs == 0
    assert [r.label for r in deep.rows[2:6]] == ["├─blocks", "│ ├─0", "│ ├─1", "│ └─2"]
    assert sum(r.params or 0 for r in deep.rows) == _n(model)
    assert sum(r.macs for r in deep.rows) == _linear_macs(model, batch)
    folded = summarize(model, torch.zeros(batch, 4), depth=2, fold=True)
    row = next(r for r in folded.rows if r.repeat > 1)
    assert (row.label, row.repeat, row.params) == ("│ └─0…2 (×3)", 3, _n(model.blocks))


def test_shared_block_with_an_uncalled_container() -> None:
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.parts = nn.ModuleList([nn.Linear(6, 6), nn.Linear(6, 6)])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for part in self.parts:
                x = part(x)
            return x

    class Shared(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = Block()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.block(self.block(x))  # the same block, called twice

    model = Shared()
    for depth in (1, 2, 3):
        s = summarize(model, torch.zeros(1, 6), depth=depth)
        assert sum(r.params or 0 for r in s.rows) == s.totals.params == _n(model)
        assert sum(r.macs for r in s.rows) == s.totals.macs == 2 * _linear_macs(model, 1)
    parts = [r for r in s.rows if r.name == "block.parts"]
    assert len(parts) == 2 and not any(r.called for r in parts)  # once under each call
    assert str(summary_cell(parts[0], Column.params)) == "--" and parts[1].params is None
    at2 = summarize(model, torch.zeros(1, 6), depth=2).rows
    parts = [r for r in at2 if r.name == "block.parts"]
    assert [r.params for r in parts] == [_n(model.block.parts), None]
    assert [r.macs for r in parts] == [_linear_macs(model, 1)] * 2


def test_llama_tiny_layers_row(invoke) -> None:
    from torchinspect.zoo.llama import llama

    model = llama("llama-tiny")
    result = invoke("summary", "zoo:llama-tiny", "--depth", "1")
    assert result.exit_code == 0, result.output
    assert "├─layers" in result.output and "ModuleList" in result.output
    data = json.loads(invoke("summary", "zoo:llama-tiny", "--depth", "1", "--format", "json").output)
    rows = {r["name"]: r for r in data["layers"]}
    assert list(rows) == ["", "embed_tokens", "layers", "norm", "lm_head"]
    assert rows["layers"]["called"] is False and rows["lm_head"]["called"] is True
    assert rows["layers"]["params"] == _n(model.layers)
    assert rows["layers"]["input"] == "-" and rows[""]["params"] == 0
    assert rows["layers"]["macs"] == data["totals"]["macs"] - rows["lm_head"]["macs"]
    assert sum(r["params"] or 0 for r in data["layers"]) == data["totals"]["params"]
    assert sum(r["macs"] for r in data["layers"]) == data["totals"]["macs"]
    folded = invoke("summary", "zoo:llama-tiny", "--depth", "2", "--fold")
    assert "├─layers" in folded.output and "│ └─0…1 (×2)" in folded.output


def test_golden_llama_tiny_containers(invoke, golden) -> None:
    result = invoke("summary", "zoo:llama-tiny", "--depth", "2", "--fold")
    assert result.exit_code == 0, result.output
    golden("summary_llama_tiny_depth2_fold.txt", result.output)


def test_csv_has_raw_numbers(invoke) -> None:
    import csv
    import io

    result = invoke("summary", "resnet18", "--depth", "1", "--format", "csv")
    assert result.exit_code == 0, result.output
    rows = {r["Layer"].lstrip("├└─"): r for r in csv.DictReader(io.StringIO(result.stdout))}
    data = json.loads(invoke("summary", "resnet18", "--depth", "1", "--format", "json").stdout)
    by_name = {layer["name"] or "resnet18": layer for layer in data["layers"]}
    assert int(rows["conv1"]["MACs"]) == by_name["conv1"]["macs"]
    assert int(rows["fc"]["Params"]) == by_name["fc"]["params"]
    assert sum(int(r["MACs"]) for r in rows.values()) == data["totals"]["macs"]
