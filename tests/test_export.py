"""inspect export: ONNX files that pass the checker and match PyTorch in onnxruntime."""

from __future__ import annotations

import json
import textwrap

import onnx
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from torchinspect.errors import InspectError
from torchinspect.export.onnx import export_onnx


class Functional(nn.Module):
    """Attention written with functional ops only: einsum, bmm and SDPA."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, 2, 8).unbind(2)
        scores = torch.einsum("bshd,bthd->bhst", q, k)
        attn = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return torch.bmm(scores.flatten(0, 1).softmax(-1), attn.flatten(0, 1))


def _onnx_ops(path) -> set[str]:
    return {n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node}


@pytest.mark.slow
def test_zoo_gpt_exports_and_verifies_at_batch_1_and_3(tmp_path) -> None:
    out = tmp_path / "gpt.onnx"
    r = export_onnx("zoo:gpt-tiny", out, report=True)
    assert r.verified is True and [v.batch for v in r.verify] == [1, 3]
    assert r.inputs[0].shape[0] == "batch" and r.outputs[0].shape[0] == "batch"
    assert all(o.max_abs <= r.atol + r.rtol * 10 for v in r.verify for o in v.outputs)
    # tied weights: the LM head and the token embedding are one initializer, stored once
    from torchinspect.zoo.gpt import GPT

    model = GPT()
    unique = {id(p): p for p in model.parameters()}
    assert r.initializer_bytes <= sum(p.numel() * p.element_size() for p in unique.values())
    assert r.ops == {k: v for k, v in r.ops.items() if v > 0} and r.nodes == sum(r.ops.values())
    onnx.checker.check_model(str(out), full_check=True)
    assert (tmp_path / "gpt.export-report.md").exists()


def test_functional_einsum_bmm_sdpa_model_exports(tmp_path) -> None:
    r = export_onnx(Functional(), tmp_path / "f.onnx", (torch.randn(2, 5, 16),))
    assert r.verified is True and [v.batch for v in r.verify] == [1, 3]
    assert {"MatMul"} <= _onnx_ops(tmp_path / "f.onnx")


@pytest.mark.slow
def test_extra_dynamic_dim_and_external_data(tmp_path) -> None:
    out = tmp_path / "f.onnx"
    r = export_onnx(Functional(), out, (torch.randn(2, 5, 16),), dynamic=["x:1"], external_data=True)
    assert r.inputs[0].shape[:2] == ["batch", "x_1"]
    assert [v.inputs for v in r.verify] == ["(1, 5, 16)", "(3, 4, 16)"]  # the seq dim moves too
    assert r.verified is True
    data = tmp_path / "f.onnx.data"
    assert r.data_path == str(data) and data.stat().st_size == r.data_bytes
    weight = Functional().qkv.weight  # tiny tensors (the bias) may stay inline
    assert r.data_bytes >= weight.numel() * weight.element_size()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.onnx", "f.onnx.data"]  # no report unasked


def test_static_export_and_a_failed_comparison(tmp_path) -> None:
    # zero tolerance, which float kernels rarely meet: the comparison must not pass blindly
    r = export_onnx(Functional(), tmp_path / "s.onnx", (torch.randn(2, 5, 16),), static=True,
                    atol=0.0, rtol=0.0)
    assert r.inputs[0].shape == [2, 5, 16] and [v.batch for v in r.verify] == [2]
    diffs = [o.max_abs for v in r.verify for o in v.outputs]
    assert r.verified is (max(diffs) == 0.0)
    assert all(o.ok is (o.max_abs == 0.0) for v in r.verify for o in v.outputs)


def test_refuses_to_overwrite_and_bad_names(tmp_path) -> None:
    out = tmp_path / "m.onnx"
    out.write_bytes(b"keep")
    with pytest.raises(InspectError, match="already exists") as e:
        export_onnx(Functional(), out, (torch.randn(1, 5, 16),))
    assert "--force" in (e.value.hint or "") and out.read_bytes() == b"keep"
    with pytest.raises(InspectError, match="NAME:DIM"):
        export_onnx(Functional(), tmp_path / "n.onnx", (torch.randn(1, 5, 16),), dynamic=["x"])
    with pytest.raises(InspectError, match="no tensor input"):
        export_onnx(Functional(), tmp_path / "n.onnx", (torch.randn(1, 5, 16),), dynamic=["y:1"])


def test_model_left_as_it_was(tmp_path) -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    export_onnx(model, tmp_path / "bn.onnx", (torch.randn(2, 4),))
    assert all(m.training for m in model.modules())
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


UNEXPORTABLE = textwrap.dedent('''
    import torch
    from torch import nn

    class Gate(nn.Module):
        def forward(self, y):
            if y.sum() > 0:
                return y * 2
            return y - 1

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.gate = Gate()

        def forward(self, x):
            return self.gate(self.fc(x))
''')


def test_cli_unexportable_model_names_the_construct(invoke, tmp_path) -> None:
    spec = tmp_path / "net.py"
    spec.write_text(UNEXPORTABLE)
    out = tmp_path / "net.onnx"
    r = invoke("export", f"{spec}:Net", "--input", "4", "-o", out, "--exporter-report")
    assert r.exit_code == 2
    err = r.stderr
    assert err.count("\n") == 2 and "Traceback" not in r.output
    assert "data-dependent Python control flow in gate (Gate)" in err
    assert "net.py:7: if y.sum() > 0:" in err
    report = tmp_path / "net.export-report.md"
    assert f"hint: the exporter's report: {report}" in err and report.exists()
    assert not out.exists()


def test_cli_unsupported_op_is_named(invoke, tmp_path) -> None:
    spec = tmp_path / "eig.py"
    spec.write_text("import torch\nclass Eig(torch.nn.Module):\n"
                    "    def forward(self, x):\n        return torch.linalg.eig(x)[0].real\n")
    r = invoke("export", f"{spec}:Eig", "--input", "4,4", "-o", tmp_path / "e.onnx")
    assert r.exit_code == 2
    assert "unsupported op aten.linalg_eig" in r.stderr and "opset" in r.stderr


@pytest.mark.slow
def test_cli_export_gpt_json_and_refuses_overwrite(invoke, tmp_path) -> None:
    out = tmp_path / "gpt.onnx"
    r = invoke("export", "zoo:gpt-tiny", "-o", out, "--format", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["schema"] == "torchinspect/export/v1" and data["verified"] is True
    assert data["bytes"] == out.stat().st_size
    assert [v["batch"] for v in data["verify"]] == [1, 3]
    again = invoke("export", "zoo:gpt-tiny", "-o", out)
    assert again.exit_code == 2 and "already exists" in again.stderr
    assert invoke("export", "zoo:gpt-tiny").exit_code == 2


@pytest.mark.slow
def test_cli_resnet18_exports_and_verifies(invoke, tmp_path) -> None:
    import torchvision

    out = tmp_path / "r18.onnx"
    r = invoke("export", "resnet18", "--input", "3,64,64", "-o", out)
    assert r.exit_code == 0, r.output
    assert "passed at batch 1, 3" in r.output and "Netron" in r.output
    m = onnx.load(str(out))
    convs = sum(isinstance(x, nn.Conv2d) for x in torchvision.models.resnet18().modules())
    assert sum(n.op_type == "Conv" for n in m.graph.node) == convs


def test_cli_legacy_exporter_and_exit_1_on_mismatch(invoke, tmp_path) -> None:
    out = tmp_path / "c.onnx"
    r = invoke("export", "zoo:convnet", "--legacy", "-o", out, "--format", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["exporter"] == "legacy" and data["verified"] is True
    assert data["inputs"][0]["dynamic"] == ["batch"]
    # zero tolerance: exit 1 exactly when some element differs at all
    r = invoke("export", "zoo:convnet", "--legacy", "-o", out, "--force", "--atol", "0",
               "--rtol", "0", "--format", "json")
    data = json.loads(r.stdout)
    differs = any(o["max_abs"] > 0 for v in data["verify"] for o in v["outputs"])
    assert r.exit_code == (1 if differs else 0)
    assert data["verified"] is (not differs)


@pytest.mark.cuda
def test_cuda_export_verifies_against_the_gpu_model(tmp_path) -> None:
    """--device cuda: exported from the GPU model; batch-3 inputs are made on the GPU too."""
    r = export_onnx("zoo:gpt-tiny", tmp_path / "gpt.onnx", device="cuda")
    assert r.verified is True and [v.batch for v in r.verify] == [1, 3]


# ------------------------------------------------------------------ every output file, one rule


def test_a_stale_data_file_is_replaced_only_with_force(tmp_path) -> None:
    out, data = tmp_path / "m.onnx", tmp_path / "m.onnx.data"
    data.write_bytes(b"old weights")
    with pytest.raises(InspectError, match="m.onnx.data already exists") as e:
        export_onnx(nn.Linear(4, 2), out, (torch.randn(1, 4),), verify=False)
    assert "--force" in (e.value.hint or "")
    assert data.read_bytes() == b"old weights" and not out.exists()
    r = export_onnx(nn.Linear(4, 2), out, (torch.randn(1, 4),), verify=False, force=True)
    assert r.data_path is None and not data.exists()  # the stale one no longer poses as its data
    # external data: an existing .onnx.data is replaced with --force, refused without
    out.unlink()
    data.write_bytes(b"old weights")
    with pytest.raises(InspectError, match="already exists"):
        export_onnx(nn.Linear(4, 2), out, (torch.randn(1, 4),), verify=False, external_data=True)
    r = export_onnx(nn.Linear(4, 2), out, (torch.randn(1, 4),), verify=False, external_data=True,
                    force=True)
    assert r.data_path == str(data) and data.read_bytes() != b"old weights"


def test_the_exporter_report_is_written_only_when_asked_and_never_over_a_file(tmp_path, invoke) -> None:
    out, report = tmp_path / "m.onnx", tmp_path / "m.export-report.md"
    report.write_text("mine")
    r = export_onnx(nn.Linear(4, 2), out, (torch.randn(1, 4),), verify=False)
    assert r.report_path is None and report.read_text() == "mine"  # not asked: untouched
    res = invoke("export", "zoo:mnist-net", "-o", tmp_path / "n.onnx", "--no-verify")
    assert res.exit_code == 0 and not (tmp_path / "n.export-report.md").exists()
    out.unlink()
    with pytest.raises(InspectError, match="m.export-report.md already exists"):
        export_onnx(nn.Linear(4, 2), out, (torch.randn(1, 4),), verify=False, report=True)
    assert report.read_text() == "mine" and not out.exists()  # refused before any work
    r = export_onnx(nn.Linear(4, 2), tmp_path / "m.onnx", (torch.randn(1, 4),), verify=False,
                    report=True, force=True)
    assert r.report_path == str(report) and report.read_text() != "mine"
    res = invoke("export", "zoo:mnist-net", "-o", tmp_path / "k.onnx", "--no-verify",
                 "--exporter-report", "--format", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["report_path"] == str(tmp_path / "k.export-report.md")
    assert (tmp_path / "k.export-report.md").read_text().startswith("#")


def test_out_of_memory_in_verification_says_so() -> None:
    from torchinspect.export.onnx.verify import _verify_run

    class Hungry(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.shape[0] == 3:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
            if x.shape[0] == 5:
                raise RuntimeError("shape '[2, -1]' is invalid for input of size 15")
            return x * 2

    x = torch.randn(1, 4)
    oom = _verify_run(Hungry(), None, (x,), {}, 3, 1, {"x": [0]}, [], 1e-4, 1e-3)
    assert oom.error.startswith("PyTorch ran out of memory running the model at these sizes")
    assert "not free" not in oom.error and "--no-verify" in oom.error
    other = _verify_run(Hungry(), None, (x,), {}, 5, 1, {"x": [0]}, [], 1e-4, 1e-3)
    assert "a dimension made dynamic is not free" in other.error


# ------------------------------------------------------------------ input and output names


class TwoOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, tokens: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.fc(tokens) * scale
        return y, y.sum(-1)


@pytest.mark.parametrize("legacy", [False, True])
def test_inputs_and_outputs_are_named_after_the_forward(tmp_path, legacy: bool) -> None:
    r = export_onnx(nn.Linear(4, 2), tmp_path / "l.onnx", (torch.randn(1, 4),), legacy=legacy)
    assert [i.name for i in r.inputs] == ["input"] and [o.name for o in r.outputs] == ["output"]
    assert r.verified is True
    r = export_onnx(TwoOut(), tmp_path / "t.onnx", (torch.randn(2, 4), torch.randn(2, 1)),
                    legacy=legacy)
    assert [i.name for i in r.inputs] == ["tokens", "scale"]
    assert [o.name for o in r.outputs] == ["output_0", "output_1"] and r.verified is True
    assert [o.name for o in r.verify[0].outputs] == ["output_0", "output_1"]


@pytest.mark.slow
def test_cli_input_and_output_names(tmp_path, invoke) -> None:
    spec = tmp_path / "two.py"
    spec.write_text(textwrap.dedent('''
        import torch
        from torch import nn

        class TwoOut(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 3)

            def forward(self, tokens, scale):
                y = self.fc(tokens) * scale
                return y, y.sum(-1)
    '''))
    base = ("export", f"{spec}:TwoOut", "--input", "4", "--input", "1", "--format", "json")
    r = invoke(*base, "-o", tmp_path / "a.onnx", "--input-names", "ids,gain",
               "--output-names", "logits,total")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert [i["name"] for i in data["inputs"]] == ["ids", "gain"]
    assert [o["name"] for o in data["outputs"]] == ["logits", "total"] and data["verified"]
    m = onnx.load(str(tmp_path / "a.onnx"))
    assert [o.name for o in m.graph.output] == ["logits", "total"]
    r = invoke(*base, "-o", tmp_path / "b.onnx", "--output-names", "only")
    assert r.exit_code == 2 and "1 name(s) for the model's 2 outputs" in r.stderr
    assert not (tmp_path / "b.onnx").exists()
    r = invoke(*base, "-o", tmp_path / "c.onnx", "--input-names", "a,a")
    assert r.exit_code == 2 and "a named twice" in r.stderr


def test_the_verdict_is_torch_allclose_and_the_table_says_how_much_tolerance_is_used() -> None:
    """A max relative difference above rtol is ok where atol covers a value near zero: the
    report shows the share of each element's own tolerance, which decides."""
    import numpy as np

    from torchinspect.export.onnx.verify import compare_arrays

    ref = np.array([0.0, 1.0, -2.0])
    near_zero = compare_arrays("y", ref + np.array([5e-5, 0.0, 0.0]), ref, 1e-4, 1e-3)
    assert near_zero.max_rel == pytest.approx(0.5) and near_zero.max_rel > 1e-3
    assert near_zero.ok and near_zero.tolerance_used == pytest.approx(0.5)
    over = compare_arrays("y", ref + np.array([0.0, 2e-3, 0.0]), ref, 1e-4, 1e-3)
    assert not over.ok and over.tolerance_used == pytest.approx(2e-3 / 1.1e-3)
    exact = compare_arrays("y", ref, ref, 0.0, 0.0)
    assert exact.ok and exact.tolerance_used == 0.0
    assert torch.allclose(torch.tensor(ref + [5e-5, 0, 0]), torch.tensor(ref), 1e-3, 1e-4)
