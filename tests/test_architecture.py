"""The shared layers: device policy, model case, option decorator, registry, renderers."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from torchinspect import device as devices
from torchinspect.errors import InspectError
from torchinspect.sources.case import ModelOptions, make_case


@pytest.mark.parametrize("text,want", [("auto", "auto"), ("CPU", "cpu"), (" cuda ", "cuda"),
                                       ("cuda:3", "cuda:3"), ("meta", "meta")])
def test_parse_device_canonical(text: str, want: str) -> None:
    assert devices.parse_device(text) == want


@pytest.mark.parametrize("text", ["gpu", "cuda:", "cuda:x", "mps:0", ""])
def test_parse_device_refuses_with_hint(text: str) -> None:
    with pytest.raises(InspectError) as err:
        devices.parse_device(text)
    assert "--device" in err.value.message and "cuda:N" in (err.value.hint or "")


def test_device_words_map_to_build_and_real_devices() -> None:
    assert [devices.build_device(d) for d in ("auto", "meta", "cpu", "cuda:1")] == [
        "meta", "meta", "cpu", "cuda:1"]
    assert [devices.real_device(d) for d in ("auto", "meta", "cpu", "cuda")] == [
        "cpu", "cpu", "cpu", "cuda"]
    assert devices.same_device("cuda", "cuda:0") and not devices.same_device("cuda:1", "cuda")


def test_weight_bytes_counts_tied_tensors_once() -> None:
    emb = nn.Embedding(10, 4)
    head = nn.Linear(4, 10, bias=False)
    head.weight = emb.weight
    model = nn.ModuleDict({"emb": emb, "head": head})
    assert devices.weight_bytes(model) == 10 * 4 * 4


def test_ensure_fits_names_both_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices, "available_bytes", lambda device: 1_000_000)
    with pytest.raises(InspectError) as err:
        devices.ensure_fits("big", 5_000_000, "cpu")
    assert "5.00 MB" in err.value.message and "1.00 MB" in err.value.message


def test_make_case_builds_on_meta_and_rebuilds_real() -> None:
    case = make_case("resnet18", options=ModelOptions(inputs=["3,64,64"]))
    assert case.on_meta and case.requested == "auto"
    assert case.describe_inputs().startswith("1,3,64,64")
    real = case.real_model("cpu")
    assert not devices.has_meta_tensors(real)
    args, kwargs = case.inputs_on("cpu")
    assert args[0].shape == (1, 3, 64, 64) and not kwargs


def test_make_case_keeps_a_user_module_untouched() -> None:
    model = nn.Linear(3, 2)
    case = make_case(model, torch.zeros(1, 3))
    assert case.model is model and case.real_model("cpu") is model and case.rebuild is None
    with pytest.raises(InspectError):  # never moved to another device (that would mutate it)
        case.real_model("cuda")
    assert model.weight.device.type == "cpu"


def test_make_case_without_example_asks_for_input() -> None:
    with pytest.raises(InspectError) as err:
        make_case(nn.Linear(3, 2))
    assert "--input" in (err.value.hint or "")
    assert make_case(nn.Linear(3, 2), need_inputs=False).example is None


def test_every_model_command_declares_the_same_shared_options() -> None:
    from typer.main import get_command

    from torchinspect.cli.app import app

    group = get_command(app)
    shared = {"--arg", "--arch", "--weights", "--key", "--strict", "--trust-pickle", "--device",
              "--published", "--weights-config", "--format", "--output"}
    for name in ("summary", "params", "flops"):
        opts = {o for p in group.commands[name].params for o in p.opts}
        assert shared <= opts, (name, shared - opts)
    inputs = {"--input", "--batch", "--no-batch"}
    summary_opts = {o for p in group.commands["summary"].params for o in p.opts}
    params_opts = {o for p in group.commands["params"].params for o in p.opts}
    assert inputs <= summary_opts and not inputs & params_opts


def test_bad_shared_option_is_a_usage_error(invoke) -> None:
    r = invoke("flops", "resnet18", "--device", "gpu")
    assert r.exit_code == 2
    assert "error: --device 'gpu' is not a device" in r.output and "Traceback" not in r.output


def test_a_registration_that_fails_to_import_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchinspect.cli import app as app_module

    monkeypatch.setattr(app_module, "COMMANDS", [("nope", "does_not_exist", "nope")])
    with pytest.raises(ModuleNotFoundError):
        app_module._register()


def test_renderer_registry_has_every_format() -> None:
    from torchinspect.report.render import RENDERERS, OutputFormat

    assert {f.value for f in OutputFormat} <= set(RENDERERS)


def test_results_have_one_to_dict_and_reports_carry_the_schema() -> None:
    from torchinspect import count_flops, count_params, summarize
    from torchinspect.report.flops import flops_report
    from torchinspect.report.params import params_report
    from torchinspect.report.summary import summary_report

    s = summarize("zoo:convnet")
    f = count_flops("zoo:convnet")
    p = count_params("zoo:convnet")
    for result, build, schema in ((s, summary_report, "summary/v4"), (f, flops_report, "flops/v3"),
                                  (p, params_report, "params/v2")):
        report = build(result)
        doc = json.loads(report.to_json())
        assert doc["schema"] == f"torchinspect/{schema}"
        assert {k: v for k, v in doc.items() if k != "schema"} == json.loads(
            json.dumps(result.to_dict(), default=str))
    assert s.totals.macs == f.macs and s.totals.params == p.total == f.params


def test_help_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = ("import sys; from torchinspect.cli.app import app; "
            "print(any(m == 'torch' or m.startswith('torch.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.cuda
def test_case_real_model_on_cuda_is_a_rebuild_and_traces_there() -> None:
    from torchinspect.trace import trace_case

    case = make_case("zoo:convnet", options=ModelOptions(device="cuda"))
    real = case.real_model("cuda")
    assert next(real.parameters()).is_cuda and not devices.has_meta_tensors(real)
    trace = trace_case(case)
    meta = trace_case(make_case("zoo:convnet"))
    assert trace.device.startswith("cuda") and trace.total_macs == meta.total_macs
    args, _ = case.inputs_on("cuda")
    assert args[0].is_cuda


def test_an_output_naming_an_input_is_refused_before_any_work(invoke, tmp_path, monkeypatch) -> None:
    """The shared layer checks --output against every file argument before the command runs."""
    from torchinspect.analysis import summary as summary_mod

    def boom(*a, **k):
        raise AssertionError("the command ran although its output names an input")

    monkeypatch.setattr(summary_mod, "summarize", boom)
    spec = tmp_path / "net.py"
    spec.write_text("import torch\nclass Net(torch.nn.Linear):\n    def __init__(self):\n"
                    "        super().__init__(3, 2)\n")
    before = spec.read_text()
    r = invoke("summary", f"{spec}:Net", "--input", "3", "-o", spec)
    assert r.exit_code == 2 and "refusing to overwrite the input file" in r.output
    r = invoke("summary", f"{spec}:Net", "-o", tmp_path / "missing" / "out.txt")
    assert r.exit_code == 2 and "does not exist" in r.output
    assert spec.read_text() == before


def test_report_bench_batch_is_checked_without_bench(invoke, tmp_path) -> None:
    r = invoke("report", "zoo:convnet", "--bench-batch", "x", "-o", tmp_path / "r.html")
    assert r.exit_code == 2 and "--bench-batch" in r.output and not (tmp_path / "r.html").exists()
