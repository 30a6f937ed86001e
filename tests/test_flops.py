"""`inspect flops` and count_flops(): per op, per module, not counted, other tools."""

from __future__ import annotations

import json

import pytest
import torch
import torchvision
from torch import nn

from torchinspect import count_flops


def test_cli_flops_resnet18_json(invoke) -> None:
    result = invoke("flops", "resnet18", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["schema"] == "torchinspect/flops/v3"
    ops = torchvision.models.ResNet18_Weights.IMAGENET1K_V1.meta["_ops"] * 1e9
    totals = data["totals"]
    assert abs(totals["macs"] - ops) <= 1e-3 * ops
    assert totals["flops"] == 2 * totals["macs"] and totals["params"] == 11_689_512
    assert "macs" not in data  # v2: totals have the same place as in summary
    summary = json.loads(invoke("summary", "resnet18", "--format", "json").output)
    assert {k: summary["totals"][k] for k in totals} == totals
    by_op = {r["op"]: r for r in data["by_op"]}
    assert by_op["convolution"]["calls"] == 20 and by_op["addmm"]["macs"] == 512 * 1000
    assert {"op": "relu_", "calls": 17} in data["not_counted"]


def test_golden_flops_table(invoke, golden) -> None:
    result = invoke("flops", "resnet18", "--depth", "1")
    assert result.exit_code == 0, result.output
    golden("flops_resnet18_depth1.txt", result.output)


def _other_counters(model_fn, x):
    """thop, torchinfo and fvcore run here directly on fresh models, for the comparison."""
    import warnings

    import torchinfo
    from fvcore.nn import FlopCountAnalysis

    with warnings.catch_warnings():  # thop imports distutils
        warnings.simplefilter("ignore")
        import thop

    with torch.no_grad():
        thop_macs, _ = thop.profile(model_fn().eval(), inputs=(x,), verbose=False)
        ti = torchinfo.summary(model_fn().eval(), input_data=x, verbose=0).total_mult_adds
        with warnings.catch_warnings():  # torch.jit deprecation
            warnings.simplefilter("ignore")
            fv = FlopCountAnalysis(model_fn().eval(), (x,))
            fv.unsupported_ops_warnings(False)
            fv.uncalled_modules_warnings(False)
            fv_total, fv_ops = fv.total(), dict(fv.by_operator())
    return {"thop": int(thop_macs), "torchinfo": ti, "fvcore": fv_total}, fv_ops


def test_cross_check_shows_three_counters(invoke) -> None:
    result = invoke("flops", "resnet18", "--cross-check", "thop,torchinfo,fvcore",
                    "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    tools = {c["tool"]: c for c in data["compare"]}
    assert list(tools) == ["thop", "torchinfo", "fvcore"]
    expected, fv_ops = _other_counters(torchvision.models.resnet18, torch.zeros(1, 3, 224, 224))
    assert {t: c["macs"] for t, c in tools.items()} == expected
    assert all(c["params"] == 11_689_512 for c in tools.values())
    # fvcore counts one "flop" per multiply-add for conv/linear: exactly our MACs, plus
    # per-element counts for batch norm and pooling that we do not count as MACs
    ours = data["totals"]["macs"]
    assert fv_ops["conv"] + fv_ops["linear"] == ours
    assert tools["fvcore"]["macs"] - ours == fv_ops["batch_norm"] + fv_ops["adaptive_avg_pool2d"]
    assert f"conv/linear/matmul {ours:,}" in tools["fvcore"]["note"]
    assert "1 per multiply-add" in tools["fvcore"]["note"]
    table = invoke("flops", "resnet18", "--cross-check", "fvcore", "--depth", "0")
    assert table.exit_code == 0, table.output
    row = next(line for line in table.output.splitlines() if line.startswith("fvcore"))
    assert f"{expected['fvcore']:,}" in row and "MACs (1 per multiply-add)" in row


def test_cross_check_counter_not_installed(invoke, monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "fvcore", None)  # import fvcore raises ImportError
    monkeypatch.setitem(sys.modules, "fvcore.nn", None)
    result = invoke("flops", "zoo:convnet", "--cross-check", "all", "--format", "json")
    assert result.exit_code == 0, result.output
    tools = {c["tool"]: c for c in json.loads(result.output)["compare"]}
    assert tools["fvcore"]["macs"] is None
    assert tools["fvcore"]["note"] == "not installed (pip install fvcore)"
    assert tools["thop"]["macs"] and tools["torchinfo"]["macs"]  # the others still ran


def test_cross_check_bad_tool_is_a_usage_error(invoke) -> None:
    result = invoke("flops", "zoo:convnet", "--cross-check", "thop,deepspeed")
    assert result.exit_code == 2
    assert "--cross-check" in result.stderr and "deepspeed" in result.stderr
    assert "thop, torchinfo, fvcore" in result.stderr


def test_compare_is_a_deprecated_alias(invoke) -> None:
    old = invoke("flops", "zoo:convnet", "--compare", "--format", "json")
    assert old.exit_code == 0, old.output
    assert "--compare is deprecated" in old.stderr and "--cross-check" in old.stderr
    tools = [c["tool"] for c in json.loads(old.stdout)["compare"]]
    assert tools == ["thop", "torchinfo"]  # what --compare always ran
    with pytest.warns(DeprecationWarning, match="cross_check"):
        r = count_flops("zoo:convnet", compare=True)
    assert [c.tool for c in r.compare] == ["thop", "torchinfo"]
    assert [c.tool for c in count_flops("zoo:convnet", cross_check="torchinfo").compare] == [
        "torchinfo"]
    assert count_flops("zoo:convnet").compare == []


def test_several_models_one_table(invoke) -> None:
    result = invoke("flops", "resnet18", "resnet50")
    assert result.exit_code == 0, result.output
    assert "resnet18" in result.output and "resnet50" in result.output
    assert "4.09G" in result.output  # torchvision: 4.089 GFLOPS (MACs)


def test_functional_model_per_module_attribution() -> None:
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.zeros(6, 6))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.einsum("bi,ij->bj", x, self.w)

    model = nn.Sequential(Block(), nn.Linear(6, 3))
    r = count_flops(model, torch.zeros(2, 6), depth=1)
    rows = {row.name: row for row in r.rows}
    assert rows["0"].macs == 2 * 6 * 6 and rows["1"].macs == 2 * 6 * 3
    assert r.macs == rows["0"].macs + rows["1"].macs


def test_uncalled_container_rows_match_summary() -> None:
    from torchinspect import summarize

    r = count_flops("zoo:llama-tiny", depth=1)
    rows = {row.name: row for row in r.rows}
    assert rows["layers"].type == "ModuleList" and rows["layers"].called is False
    assert set(rows["layers"].by_op) == {"mm", "scaled_dot_product_attention"}
    assert sum(rows["layers"].by_op.values()) == rows["layers"].macs
    assert rows[""].macs == r.macs  # the root includes everything
    s = summarize("zoo:llama-tiny", depth=1)
    # one convention: the same inclusive and self numbers in summary and flops
    assert {row.name: (row.macs, row.self_macs) for row in s.rows if row.macs} == {
        row.name: (row.macs, row.self_macs) for row in r.rows}
    deep = count_flops("zoo:llama-tiny", depth=2)
    names = [row.name for row in deep.rows]
    assert names.index("layers") + 1 == names.index("layers.0")  # the container keeps its rows


def test_parent_rows_include_children_and_self_column() -> None:
    """A container's MACs include its children (fvcore/DeepSpeed convention); Self is its own."""

    class Stage(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 4))
            self.w = nn.Parameter(torch.zeros(4, 2))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.blocks(x) @ self.w  # 3 * 4 * 2 own MACs

    model = nn.Sequential(Stage())
    r = count_flops(model, torch.zeros(3, 8), depth=3)
    rows = {row.name: row for row in r.rows}
    linears = 3 * 8 * 8 + 3 * 8 * 4
    assert rows["0.blocks"].macs == linears and rows["0.blocks"].self_macs == 0
    assert rows["0"].macs == linears + 3 * 4 * 2 and rows["0"].self_macs == 3 * 4 * 2
    assert rows[""].macs == r.macs == linears + 24
    assert sum(row.self_macs for row in r.rows) == r.macs  # full depth: selves add up
    assert rows["0"].pct == 100.0
    shallow = {row.name: row for row in count_flops(model, torch.zeros(3, 8), depth=1).rows}
    assert shallow["0"].self_macs == 3 * 4 * 2  # self never includes folded children


def test_attention_row_is_the_same_number_in_summary_and_flops(invoke) -> None:
    """The issue's example: `attn` was 134.22M (own ops) in summary and 150.99M (with its
    projections) in flops. Both now show the inclusive count, and the same Self."""
    import json

    from torchinspect import summarize

    s = summarize("zoo:gpt-tiny", depth=3)
    f = count_flops("zoo:gpt-tiny", depth=3)
    srows = {(r.name, r.call_number): r for r in s.rows}
    attn = [r for r in f.rows if r.name.endswith(".attn")]
    assert attn
    for row in attn:
        srow = srows[(row.name, row.call_number)]
        assert (srow.macs, srow.self_macs) == (row.macs, row.self_macs)
        assert row.macs > row.self_macs > 0  # its projections are inside it
    data = json.loads(invoke("flops", "zoo:gpt-tiny", "-f", "json").stdout)
    root = data["modules"][0]
    assert root["name"] == "" and root["macs"] == data["totals"]["macs"] > 0


def _stripped(text: str) -> str:
    """Lines without trailing spaces (the table renderer's padding is not what is tested)."""
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def test_golden_flops_at_80_columns(invoke, golden, monkeypatch) -> None:
    """The conventions are short notes below the tables, not a heading wrapped over them."""
    monkeypatch.setenv("COLUMNS", "80")
    result = invoke("flops", "resnet18", "--depth", "1")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    assert lines[1].startswith("Total: ")  # the heading: model, input, total; nothing wrapped
    assert lines[3].startswith("MACs by module")  # the first table right under the heading
    notes = next(i for i, line in enumerate(lines) if line.startswith("MACs = multiply"))
    assert lines[notes - 2].rstrip() == "Ops with no MAC formula: their work is not in the MACs."
    golden("flops_resnet18_depth1_80.txt", _stripped(result.output))


def test_notes_wrap_at_word_boundaries_in_a_narrow_terminal(invoke, monkeypatch) -> None:
    from torchinspect.analysis.conventions import convention_notes

    monkeypatch.setenv("COLUMNS", "40")
    for args in (["flops", "zoo:convnet"], ["flops", "zoo:convnet", "zoo:mnist-net"]):
        result = invoke(*args)
        assert result.exit_code == 0, result.output
        words = result.output.split()
        for note in convention_notes():  # every word whole, in order: wrapped between words
            assert " ".join(note.split()) in " ".join(words), (args, note)
        heading = result.output.split("\n\n")[0]
        assert "multiply-accumulates" not in heading  # not a heading over the table


@pytest.mark.parametrize("command", ["flops", "summary"])
def test_a_failing_model_of_several_is_named_and_the_others_kept(invoke, command) -> None:
    r = invoke(command, "zoo:convnet", "zoo:multi-input", "--input", "1,28,28", "--depth", "1")
    assert r.exit_code == 2
    assert "zoo:convnet" in r.stdout and "MACs" in r.stdout  # the model that ran is shown
    assert "error: zoo:multi-input: the model's forward failed" in r.stderr
