"""`inspect summary` and summarize(): CLI exit codes and numbers, golden tables, JSON."""

from __future__ import annotations

import json
import math
from dataclasses import asdict

import pytest
import torch
import torchvision
from torch import nn
from torch.nn import functional as F  # noqa: N812 - PyTorch's own spelling

from torchinspect import summarize
from torchinspect.analysis.summary import Column, Summary
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
    assert data["schema"] == "torchinspect/summary/v4"
    assert data["totals"]["params"] == R18["num_params"]
    assert data["totals"]["flops"] == 2 * data["totals"]["macs"]
    assert data["layers"][0]["type"] == "ResNet"
    # inclusive rows: the root is the total, each row is its own plus its children's
    root = data["layers"][0]
    assert (root["params"], root["macs"]) == (data["totals"]["params"], data["totals"]["macs"])
    check_inclusive(data["layers"], depth=3)


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


def test_totals_only_promises_no_list_it_does_not_show(invoke) -> None:
    result = invoke("summary", "zoo:mnist-net", "zoo:convnet", "--totals")
    assert result.exit_code == 0, result.output
    assert "listed below" not in result.output
    single = invoke("summary", "zoo:mnist-net", "--totals")
    assert "listed below" not in single.output
    assert "not counted (no MAC formula): relu" in single.output  # the list itself is shown


def test_single_model_totals_only(invoke) -> None:
    result = invoke("summary", "resnet18", "--totals")
    assert result.exit_code == 0
    assert "Total params" in result.output and "layer1" not in result.output


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--depth", "-1"], "--depth -1"),
        (["--input", "3,32,32"], "rank 4"),  # resnet18 survives 32x32; use a bad rank
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

    assert summary_report(s).schema == "torchinspect/summary/v4"


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


def check_inclusive(rows: list, depth: int) -> None:
    """Every row above ``depth`` (all its children shown) holds its own numbers plus its
    children's; recursive rows carry MACs but no params (they are on the first call's row)."""
    def get(r, key):
        return r[key] if isinstance(r, dict) else getattr(r, key)

    kids: dict[int, list] = {i: [] for i in range(len(rows))}
    stack: list[int] = []
    for i, r in enumerate(rows):
        while stack and get(rows[stack[-1]], "depth") >= get(r, "depth"):
            stack.pop()
        if stack:
            kids[stack[-1]].append(r)
        stack.append(i)
    checked = 0
    for i, r in enumerate(rows):
        if get(r, "depth") >= depth or not kids[i]:
            continue
        assert get(r, "macs") == get(r, "self_macs") + sum(get(k, "macs") for k in kids[i]), get(r, "name")
        if not get(r, "recursive"):
            assert get(r, "params") == get(r, "self_params") + sum(
                get(k, "params") for k in kids[i] if not get(k, "recursive")), get(r, "name")
        checked += 1
    assert checked


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
    assert rows[""].params == s.totals.params == _n(model) and rows[""].self_params == 0
    assert rows[""].macs == s.totals.macs == _linear_macs(model, batch)
    check_inclusive(s.rows, depth=1)

    deep = summarize(model, torch.zeros(batch, 4), depth=2)
    names = [r.name for r in deep.rows]
    assert names == ["", "stem", "blocks", "blocks.0", "blocks.1", "blocks.2", "heads",
                     "heads.a", "heads.b"]
    blocks = deep.rows[2]
    assert blocks.container and blocks.params == _n(model.blocks) and blocks.self_params == 0
    assert (blocks.macs, blocks.self_macs) == (_linear_macs(model.blocks, batch), 0)
    assert [r.label for r in deep.rows[2:6]] == ["├─blocks", "│ ├─0", "│ ├─1", "│ └─2"]
    check_inclusive(deep.rows, depth=2)
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
        assert s.rows[0].params == s.totals.params == _n(model)
        assert s.rows[0].macs == s.totals.macs == 2 * _linear_macs(model, 1)
        check_inclusive(s.rows, depth=depth)
    parts = [r for r in s.rows if r.name == "block.parts"]
    assert len(parts) == 2 and not any(r.called for r in parts)  # once under each call
    assert parts[0].params == _n(model.block.parts) and parts[1].params is None
    assert str(summary_cell(parts[1], Column.params)) == "(recursive)" and parts[1].recursive
    blocks = [r for r in s.rows if r.name == "block"]
    assert [r.label.rpartition("─")[2] for r in blocks] == ["block (call 1/2)", "block (call 2/2)"]
    assert [r.calls for r in blocks] == [2, 2] and [r.recursive for r in blocks] == [False, True]
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
    assert rows["layers"]["input"] is None and rows["layers"]["input_text"] == "-"
    assert rows[""]["params"] == data["totals"]["params"]
    assert rows["layers"]["macs"] == data["totals"]["macs"] - rows["lm_head"]["macs"]
    assert rows[""]["macs"] == data["totals"]["macs"]
    check_inclusive(data["layers"], depth=1)
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
    assert int(rows["resnet18"]["MACs"]) == data["totals"]["macs"]  # the root row: the total
    assert int(rows["resnet18"]["Params"]) == data["totals"]["params"]
    assert sum(int(r["MACs"]) for n, r in rows.items() if n != "resnet18") == data["totals"]["macs"]


class _Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1, self.l2 = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.relu(self.l1(x)))


class _PartlyScripted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = torch.jit.script(_Inner())
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.enc(x))


class _Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens, self.layer = nn.Embedding(100, 16), nn.Linear(16, 16)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.layer(self.embed_tokens(ids))


class _T5Tied(nn.Module):
    """transformers' T5 after tie_weights: ``shared`` is never called; its weight runs in
    encoder.embed_tokens, decoder.embed_tokens and lm_head."""

    def __init__(self) -> None:
        super().__init__()
        self.shared = nn.Embedding(100, 16)
        self.encoder, self.decoder = _Stack(), _Stack()
        self.lm_head = nn.Linear(16, 100, bias=False)
        for m in (self.encoder.embed_tokens, self.decoder.embed_tokens, self.lm_head):
            m.weight = self.shared.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.encoder(ids) + self.decoder(ids))


def test_modules_inside_a_scripted_submodule_are_not_marked_not_run() -> None:
    s = summarize(_PartlyScripted(), torch.randn(1, 8))
    assert s.totals.macs == 2 * 64 + 16  # the scripted l1 and l2 are counted...
    assert all(r.ran for r in s.rows) and "enc.l1" not in {r.name for r in s.rows}
    assert not any("never ran" in n for n in s.notes)  # ...so they are not "never ran"
    enc = next(r for r in s.rows if r.name == "enc")
    assert (enc.params, enc.macs) == (144, 128)
    assert any("TorchScript" in n and "enc" in n for n in s.notes)


def test_a_tied_embedding_is_not_reported_as_never_run() -> None:
    s = summarize(_T5Tied(), torch.zeros(1, 5, dtype=torch.long))
    shared = next(r for r in s.rows if r.name == "shared")
    assert shared.ran and shared.runs_as == "encoder.embed_tokens" and shared.params == 1600
    assert "(not run)" not in shared.label and "runs as encoder.embed_tokens" in shared.label
    assert not any("never ran" in n for n in s.notes)


def test_parameters_of_modules_that_never_ran_are_named(invoke) -> None:
    """zoo:pitfall-unused-branch: the root used to absorb aux_head's 4,290 params silently."""
    from torchinspect.zoo.pitfalls import UnusedBranch

    aux = _n(UnusedBranch().aux_head)
    s = summarize("zoo:pitfall-unused-branch")
    row = next(r for r in s.rows if r.name == "aux_head")
    assert (row.params, row.ran, row.macs) == (aux, False, 0)
    assert row.label.endswith("aux_head (not run)")
    assert any("aux_head" in n and f"{aux:,}" in n for n in s.notes)
    check_inclusive(s.rows, depth=1)
    for fmt in ("table", "csv", "markdown", "html"):
        out = invoke("summary", "zoo:pitfall-unused-branch", "-f", fmt).stdout
        assert "aux_head" in out and (f"{aux:,}" in out or str(aux) in out), fmt
    flops = invoke("flops", "zoo:pitfall-unused-branch").output
    assert "aux_head (Sequential, 4,290 params)" in flops.replace(f"{aux:,}", "4,290")


def test_parameters_in_plain_lists_are_noted_as_left_out(invoke) -> None:
    from torchinspect.zoo.pitfalls import LayerList

    model = LayerList()
    lost = sum(p.numel() for layer in model.layers for p in layer.parameters())
    for command in ("summary", "flops", "params"):
        r = invoke(command, "zoo:pitfall-layer-list")
        assert r.exit_code == 0, r.output
        text = " ".join(r.output.split())
        assert f"{lost:,} parameters left out of the totals" in text, command


def test_shapes_are_exact_in_json_and_csv(invoke, tmp_path) -> None:
    import csv
    import io

    net = tmp_path / "many.py"
    net.write_text(
        "import torch\nfrom torch import nn\nEXAMPLE_INPUT = '1,4'\n"
        "class Many(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(4, 4)\n"
        "    def forward(self, x):\n"
        "        y = self.fc(x)\n"
        "        return {'first_output': y, 'second_output': y, 'third_output': y}\n")
    data = json.loads(invoke("summary", f"{net}:Many", "-f", "json").stdout)
    exact = "{first_output: [1, 4], second_output: [1, 4], third_output: [1, 4]}"
    assert data["layers"][0]["output_text"] == exact
    assert data["layers"][0]["output"] == {k: [1, 4] for k in ("first_output", "second_output",
                                                                "third_output")}
    rows = list(csv.DictReader(io.StringIO(invoke("summary", f"{net}:Many", "-f", "csv").stdout)))
    assert rows[0]["Output shape"] == exact
    table = invoke("summary", f"{net}:Many").stdout
    assert exact not in table and "{first_output: [1, 4], second_output:" in table  # shortened


# ---------------------------------------------------------------- memory lines (issue 22)


def _predicted(spec: str, train: bool):
    """`inspect memory`'s own prediction (fake CPU tensors, the memory command's path)."""
    from torchinspect.memory.faking import make_target
    from torchinspect.memory.predict import predict_case
    from torchinspect.memory.step import StepConfig
    from torchinspect.sources.case import make_case

    return predict_case(make_case(spec, None), StepConfig(train=train), make_target("cuda"),
                        inference=True)


@pytest.mark.slow
def test_memory_lines_are_the_memory_commands_numbers(invoke) -> None:
    result = invoke("summary", "zoo:llama-tiny", "--memory", "train", "--format", "json")
    assert result.exit_code == 0, result.output
    totals = json.loads(result.output)["totals"]
    want = _predicted("zoo:llama-tiny", train=True)
    assert totals["memory_method"] == "predicted" and totals["memory_device"] == "cuda"
    assert totals["peak_inference_bytes"] == want.inference.peak
    assert totals["peak_inference_at"] == want.inference.where
    assert totals["predicted_activation_bytes"] == want.inference.breakdown["activations"]
    assert "activation_bytes" not in totals and "total_bytes" not in totals  # one meaning each
    assert totals["peak_training_bytes"] == want.training.peak
    assert totals["training_optimizer"] == "adamw"
    # the peak is more than the weights, and not the sum of every leaf output
    assert totals["peak_inference_bytes"] > totals["param_bytes"] + totals["input_bytes"]


@pytest.mark.slow
def test_memory_lines_are_labelled(invoke) -> None:
    from torchinspect.gpus import target_gpu

    gpu = target_gpu().name.upper()  # the GPU here, else the default (H100): the line names it
    text = invoke("summary", "resnet18", "--depth", "0").output
    line = next(ln for ln in text.splitlines() if ln.startswith("Peak memory, inference"))
    assert f"(predicted, {gpu})" in line and "at fc" in line
    assert "training step" not in text and "Activation memory" not in text
    train = invoke("summary", "resnet18", "--depth", "0", "--memory", "train").output
    assert f"Peak memory, training step (predicted, {gpu}, AdamW)" in train
    old = invoke("summary", "resnet18", "--depth", "0", "--memory", "none", "-f", "json")
    totals = json.loads(old.output)["totals"]
    assert totals["memory_method"] == "leaf outputs" and totals["peak_inference_bytes"] is None
    assert totals["estimated_total_bytes"] == (totals["param_bytes"] + totals["buffer_bytes"]
                                               + totals["input_bytes"] + totals["leaf_output_bytes"])
    assert totals["predicted_activation_bytes"] is None
    bad = invoke("summary", "resnet18", "--memory", "most")
    assert bad.exit_code == 2 and "--memory 'most'" in bad.output


def test_memory_lines_fall_back_with_a_note() -> None:
    class Picky(nn.Module):  # its forward reads a value: no prediction without data
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x[: int(x.sum().item()) % 3 + 1])

    s = summarize(Picky(), torch.ones(2, 4), device="cpu")
    assert s.totals.memory_method == "leaf outputs" and s.totals.peak_inference_bytes is None
    assert any("memory not predicted" in n for n in s.notes)


@pytest.mark.slow
def test_summary_prediction_on_meta_matches_fake_tensors() -> None:
    """The summary predicts on plain meta tensors (fast); `inspect memory` on fake CPU
    tensors: the same log, so the same numbers, inference and training."""
    from torchinspect.memory.faking import make_target
    from torchinspect.memory.predict import predict_case
    from torchinspect.memory.step import StepConfig
    from torchinspect.sources.case import make_case

    for spec, inputs in (("resnet18", "3,64,64"), ("zoo:llama-tiny", None)):
        case = make_case(spec, inputs)
        fake, meta = (predict_case(case, StepConfig(), make_target("cuda", fast=fast))
                      for fast in (False, True))
        for mode in ("inference", "training"):
            a, b = getattr(fake, mode), getattr(meta, mode)
            assert (a.peak, a.where, a.breakdown) == (b.peak, b.where, b.breakdown), (spec, mode)


MIXED = '''\
import torch
from torch import nn
EXAMPLE_INPUT = '2,4'
class ToHalf(nn.Module):
    def forward(self, x):
        return x.half()
class Split(nn.Module):
    def forward(self, x):
        return x[:, :3], x[:, 3:]
class Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.to16 = ToHalf()
        self.split = Split()
        self.fc2 = nn.Linear(8, 3)
    def forward(self, x):
        a, b = self.split(self.to16(self.fc1(x)))
        return self.fc2(torch.cat([a, b], 1).float())
'''


def _mixed_expected() -> dict[str, tuple[int, int]]:
    """(output bytes, FLOPs) per row, by hand: batch 2, float32 = 4 bytes, float16 = 2."""
    fc1 = (2 * 8 * 4, 2 * (2 * 4 * 8))  # [2, 8] float32; 2 x (batch x in x out) MACs
    to16 = (2 * 8 * 2, 0)  # the same [2, 8] as float16
    split = ((2 * 3 + 2 * 5) * 2, 0)  # a tuple: [2, 3] and [2, 5], float16
    fc2 = (2 * 3 * 4, 2 * (2 * 8 * 3))
    return {"": (fc2[0], fc1[1] + fc2[1]), "fc1": fc1, "to16": to16, "split": split, "fc2": fc2}


def test_output_bytes_and_flops_columns_in_every_format(invoke, tmp_path) -> None:
    import csv
    import io

    from torchinspect.report.base import fmt_bytes, fmt_si

    net = tmp_path / "mixed.py"
    net.write_text(MIXED)
    spec, expected = f"{net}:Mixed", _mixed_expected()
    cols = ["--columns", "output,output_bytes,macs,flops"]
    data = json.loads(invoke("summary", spec, *cols, "-f", "json").stdout)
    assert {r["name"]: (r["output_bytes"], r["flops"]) for r in data["layers"]} == expected
    rows = csv.DictReader(io.StringIO(invoke("summary", spec, *cols, "-f", "csv").stdout))
    got = {r["Layer"] if r["Layer"] != spec else "": (int(r["Output bytes"]), int(r["FLOPs"]))
           for r in rows}
    assert got == expected  # raw numbers, not "64 B"
    for fmt in ("table", "markdown", "html"):
        result = invoke("summary", spec, *cols, "-f", fmt, terminal_width=200)
        assert result.exit_code == 0, result.output
        assert "Output bytes" in result.output and "FLOPs" in result.output, fmt
        for name in ("fc1", "fc2", "to16"):
            lines = result.output.split("<tr") if fmt == "html" else result.output.splitlines()
            line = next(ln for ln in lines if f"─{name}" in ln)
            nbytes, flops = expected[name]
            assert fmt_bytes(nbytes) in line, (fmt, line)
            assert (fmt_si(flops) if flops else "--") in line, (fmt, line)


def test_new_columns_are_optional(invoke) -> None:
    s = summarize("zoo:convnet")
    assert Column.output_bytes not in s.columns and Column.flops not in s.columns
    assert all(r.flops == 2 * r.macs for r in s.rows)
    folded = summarize("resnet50", depth=2, fold=True)
    row = next(r for r in folded.rows if r.repeat > 1)  # layer1.1…layer1.2 (×2)
    dims = [int(d) for d in row.output.strip("[]").split(",")]
    assert row.output_bytes == row.repeat * math.prod(dims) * 4  # each block's output, float32


def test_golden_summary_at_80_columns(invoke, golden, monkeypatch) -> None:
    """The heading is one line; the MAC/FLOP conventions are notes under 80 columns below."""
    monkeypatch.setenv("COLUMNS", "80")
    result = invoke("summary", "zoo:convnet", "--depth", "2", "--columns", "type,output,params,macs")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    assert lines[0].startswith("zoo:convnet  input 1,1,28,28") and lines[1] == ""
    assert lines.index("Totals") < next(i for i, ln in enumerate(lines) if "FLOPs = 2 x MACs." in ln)
    golden("summary_convnet_80.txt", "\n".join(ln.rstrip() for ln in lines) + "\n")


def test_json_shapes_are_lists_and_dict_outputs_objects(invoke) -> None:
    data = json.loads(invoke("summary", "zoo:multi-input", "-f", "json").stdout)
    root, patchify = data["layers"][0], next(r for r in data["layers"] if r["name"] == "patchify")
    assert patchify["input"] == [1, 3, 32, 32] and patchify["output"] == [1, 32, 4, 4]
    assert patchify["input_text"] == "[1, 3, 32, 32]"
    assert root["output"] == {"logits": [1, 5], "embedding": [1, 96]}
    assert root["input"] == [[1, 3, 32, 32], {"numeric": [1, 8], "category": [1]},
                             {"mask": [1, 16]}]


# ------------------------------------------- the memory line from the trace's forward (issue 32)


class _FunctionalGRU(nn.Module):
    """A GRU called through ``torch.gru`` (no ``nn.GRU``): the prediction's cuDNN kernel
    would run where the trace counts the unrolled cells."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.ParameterList([nn.Parameter(torch.randn(24, 4)), nn.Parameter(torch.randn(24, 8)),
                                   nn.Parameter(torch.randn(24)), nn.Parameter(torch.randn(24))])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.zeros(1, x.shape[0], 8, dtype=x.dtype, device=x.device)
        return torch.gru(x, h, list(self.w), True, 1, 0.0, False, False, True)[0]


class _FunctionalRMSNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.scale = nn.Parameter(torch.ones(16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.rms_norm(self.fc(x), [16], self.scale, 1e-6)
        return F.rms_norm(y, normalized_shape=(16,), eps=1e-5) + y


class _MaskedAttention(nn.Module):
    """SDPA with a bool mask, a float mask, GQA and causal."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(32, 96)
        self.out = nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = (z.view(b, t, 4, 8).transpose(1, 2) for z in self.qkv(x).chunk(3, -1))
        keep = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        y = y + F.scaled_dot_product_attention(q, k, v, attn_mask=torch.zeros(t, t, device=x.device))
        y = y + F.scaled_dot_product_attention(q, k[:, :2], v[:, :2], is_causal=True, enable_gqa=True)
        return self.out(y.transpose(1, 2).reshape(b, t, 32))


SHARED = [(_MaskedAttention, "6,32"), ("resnet18", "3,64,64"), ("zoo:llama-tiny", None), ("zoo:gpt-tiny", None),
          ("mobilenet_v3_small", "3,64,64"), ("densenet121", "3,64,64"),
          ("convnext_tiny", "3,64,64"), ("zoo:shared-act-unet", None),
          ("zoo:siamese", None), ("zoo:multi-input", None), ("swin_t", "3,64,64"),
          ("efficientnet_b0", "3,64,64")]
def _summary_parts(s: Summary) -> tuple:
    t = s.trace
    assert t is not None
    calls = [(c.name, c.inputs, c.outputs, c.output_bytes, dict(c.macs)) for c in t.calls]
    return (asdict(s.totals), calls, t.uncounted, t.op_calls, t.notes, s.notes,
            [r.to_dict() for r in s.rows])


def _two_passes(monkeypatch, model, inputs) -> Summary:
    """The summary as it was made before the forward was shared: trace, then predict."""
    import torchinspect.analysis.summary as summary_mod

    with monkeypatch.context() as m:
        m.setattr(summary_mod, "InferenceWatch", lambda case, target: None)
        return summarize(model, inputs)


@pytest.mark.parametrize(("spec", "inputs"), SHARED)
def test_memory_line_from_the_trace_forward_is_the_prediction(monkeypatch, spec, inputs) -> None:
    """One forward gives the table and the memory line, with the figures (and every other
    part of the summary) a trace and a separate prediction give."""
    import torchinspect.analysis.summary as summary_mod

    spec = spec() if isinstance(spec, type) else spec
    before = _two_passes(monkeypatch, spec, inputs)
    with monkeypatch.context() as m:  # the second pass is not run
        m.setattr(summary_mod, "predict_summary_memory",
                  lambda case, memory: pytest.fail(f"{spec}: a second forward ran"))
        shared = summarize(spec, inputs)
    assert shared.totals.memory_method == "predicted"
    assert _summary_parts(shared) == _summary_parts(before), spec


@pytest.mark.parametrize("model", [_FunctionalGRU, _FunctionalRMSNorm, "zoo:lstm-classifier",
                                   "vit_b_16"])
def test_memory_line_where_the_forward_is_not_shared(monkeypatch, model) -> None:
    """nn.LSTM (a fused cuDNN kernel in the prediction), nn.MultiheadAttention (CUDA's eval
    fast path: ViT) and a functional GRU (found in the log: the trace runs again) give the
    two-pass figures; rms_norm called as a function is counted as a trace counts it and
    predicted as CUDA's fused kernel allocates."""
    if isinstance(model, str):
        spec, inputs = model, None
    else:
        spec, inputs = model(), torch.zeros(2, 5, 4 if model is _FunctionalGRU else 16)
    before = _two_passes(monkeypatch, spec, inputs)
    shared = summarize(spec, inputs)
    assert shared.totals.memory_method == "predicted"
    assert _summary_parts(shared) == _summary_parts(before)
    if model is _FunctionalRMSNorm:
        assert {"rsqrt", "mean", "pow"} <= set(shared.trace.uncounted)


def test_shared_forward_failure_reruns_the_trace_alone(monkeypatch) -> None:
    """A failure inside the shared forward costs a second forward, not the trace: the
    summary is the two-pass one (here the memory run's kernels are made to fail)."""
    import torchinspect.memory.watch as watch_mod

    def broken(*args, **kwargs):
        raise RuntimeError("the memory run's kernel failed")

    monkeypatch.setattr(watch_mod, "_fused", broken)
    shared = summarize(_FunctionalRMSNorm(), torch.zeros(2, 16))
    assert shared.totals.memory_method == "predicted"  # from the second pass
    assert shared.trace is not None and shared.trace.device == "meta"
    monkeypatch.undo()
    before = _two_passes(monkeypatch, _FunctionalRMSNorm(), torch.zeros(2, 16))
    assert asdict(shared.totals) == asdict(before.totals)
