"""What each format promises: strict JSON under its schema, CSV with raw numbers, tables that
never break a number, Markdown whose lines stay lines."""

from __future__ import annotations

import csv
import io
import json

import pytest
import torch
from torch import nn

NAN_NET = ("import torch\nfrom torch import nn\n"
           "class Net(nn.Module):\n"
           "    example_input = '4'\n"
           "    def __init__(self):\n"
           "        super().__init__()\n"
           "        self.fc = nn.Linear(4, 2)\n"
           "    def forward(self, x):\n"
           "        return self.fc(x) * float('nan')\n")


def _strict(text: str) -> dict:
    def refuse(token: str) -> None:
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def test_json_has_no_nan_or_infinity(invoke, tmp_path):
    a = {"w": torch.tensor([1.0, float("nan")]), "v": torch.tensor([1.0, 2.0])}
    b = {"w": torch.tensor([1.0, 2.0]), "v": torch.tensor([float("inf"), 2.0])}
    torch.save(a, tmp_path / "a.pt")
    torch.save(b, tmp_path / "b.pt")
    r = invoke("diff", tmp_path / "a.pt", tmp_path / "b.pt", "--values", "-f", "json")
    doc = _strict(r.stdout)  # NaN/Infinity tokens would raise
    assert doc["schema"].startswith("torchinspect/diff/")
    assert None in [v.get("max_abs_diff") for v in doc["values"]]


def test_export_verification_counts_matching_nan_as_equal(invoke, tmp_path):
    import onnxruntime  # noqa: F401 - a required dependency: a broken install fails, never skips
    (tmp_path / "nan.py").write_text(NAN_NET)
    r = invoke("export", f"{tmp_path / 'nan.py'}:Net", "-o", tmp_path / "n.onnx", "-f", "json")
    assert r.exit_code == 0, r.output  # both runtimes give NaN in the same places
    doc = _strict(r.stdout.split("\n", 1)[1] if r.stdout.startswith("wrote") else r.stdout)
    assert all(v["ok"] for v in doc["verify"])


def test_several_models_have_a_schema_of_their_own(invoke):
    r = invoke("flops", "resnet18", "zoo:convnet", "-f", "json")
    doc = _strict(r.stdout)
    assert doc["schema"] == "torchinspect/flops-comparison/v1"
    first = doc["models"][0]
    assert first["totals"] == {"params": 11689512, "macs": 1814073344, "flops": 3628146688}


def test_csv_of_totals_is_raw_numbers(invoke):
    r = invoke("summary", "resnet18", "--totals", "-f", "csv")
    rows = dict(csv.reader(io.StringIO(r.stdout)))
    assert rows["Total params"] == "11689512" and rows["MACs"] == "1814073344"
    assert rows["Param memory (float32)"] == str(11689512 * 4)


def test_csv_layer_column_is_the_full_name(invoke):
    r = invoke("summary", "resnet18", "--depth", "3", "-f", "csv")
    names = [row[0] for row in csv.reader(io.StringIO(r.stdout))][1:]
    assert "layer1.0.conv1" in names and not any("─" in n for n in names)


def test_numbers_never_wrap_in_a_narrow_table(invoke, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    r = invoke("summary", "resnet18", "--depth", "1")
    assert "118,013,952" not in r.output  # shown as 118.01M ...
    assert "118.01M" in r.output and "9,408" in r.output  # ... on one line, not "118.01" / "M"


def test_markdown_text_lines_stay_lines(invoke):
    from torchinspect.report import render
    from torchinspect.report.base import Report, Text

    buf = io.StringIO()
    render(Report("x", {}, [Text(["fc.weight", "fc.bias"], title="Missing")]), "markdown", buf)
    assert "fc.weight  \nfc.bias  \n" in buf.getvalue()  # hard line breaks


def test_check_shows_close_counts_in_full_and_integers_in_json(invoke):
    r = invoke("check", "resnet18", "--max-params", "11689513")
    assert "11,689,512" in r.output and "11,689,513" in r.output and r.exit_code == 0
    r = invoke("check", "resnet18", "--max-params", "11689513", "-f", "json")
    result = _strict(r.stdout)["models"][0]["results"][0]
    assert result["value"] == 11689512 and isinstance(result["value"], int)
    from torchinspect.check import Metric, fmt_value

    assert fmt_value(Metric.latency_ms, 1000.0) == "1,000 ms"
    assert fmt_value(Metric.latency_ms, 12.5) == "12.5 ms"


def test_export_csv_diffs_are_raw(tmp_path):
    import onnxruntime  # noqa: F401 - a required dependency: a broken install fails, never skips

    from torchinspect.export.onnx import export_onnx
    from torchinspect.report import render
    from torchinspect.report.export import export_report

    result = export_onnx(nn.Linear(8, 4), tmp_path / "l.onnx", torch.randn(1, 8))
    buf = io.StringIO()
    render(export_report(result), "csv", buf)
    rows = list(csv.DictReader(io.StringIO(buf.getvalue())))
    expected = [o.max_abs for run in result.verify for o in run.outputs]
    assert [float(row["Max abs diff"]) for row in rows] == expected  # not rounded to 3 digits


@pytest.mark.parametrize("fmt", ["json", "csv", "markdown", "table"])
def test_comparison_renders_in_every_format(fmt):
    import torchinspect as ti
    from torchinspect.report import render
    from torchinspect.report.compare import comparison_report

    results = [ti.count_params(nn.Linear(4, 2)), ti.count_params(nn.Linear(4, 3))]
    buf = io.StringIO()
    render(comparison_report("params", results), fmt, buf)
    out = buf.getvalue()
    if fmt == "json":
        doc = _strict(out)
        assert doc["schema"] == "torchinspect/params-comparison/v1"
        assert [m["params"] for m in doc["models"]] == [10, 15]
    elif fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(out)))
        assert [r["Params"] for r in rows] == ["10", "15"]
    else:  # one line per model, both counts shown
        lines = [line for line in out.splitlines() if "Linear" in line]
        assert len(lines) == 2 and " 10 " in lines[0] + " " and " 15 " in lines[1] + " "
