"""`inspect summary` and summarize(): CLI exit codes and numbers, golden tables, JSON."""

from __future__ import annotations

import json

import pytest
import torch
import torchvision
from torch import nn

from torchinspect import summarize
from torchinspect.analysis.summary import Column

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
    assert s.to_json()["layers"][1]["kernel"] == "3×3 p1"
    assert s.to_report().schema == "torchinspect/summary/v1"


def test_depth_zero_is_one_row() -> None:
    s = summarize("resnet18", "3,224,224", depth=0)
    assert len(s.rows) == 1 and s.rows[0].params == R18["num_params"]
