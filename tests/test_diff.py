"""`inspect diff`: verdicts, exit codes, prefixes, grouping, dtypes, devices, values, JSON."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from test_checkpoint_helpers import (
    HELPERS,
    TiedLM,
    cli_json,
    net,
    save_compiled,
    save_dataparallel,
    save_plain,
    save_simulated_gpu,
)
from torchinspect.checkpoints.diff import Verdict, compare_values, diff_state_dicts
from torchinspect.io.compare import checkpoint_side


def test_identical_checkpoints_load_strict(tmp_path: Path, invoke) -> None:
    sd = save_plain(tmp_path / "a.pt")
    save_plain(tmp_path / "b.pt")
    result = invoke("diff", tmp_path / "a.pt", tmp_path / "b.pt")
    assert result.exit_code == 0, result.output
    assert f"verdict: loads with strict=True ({len(sd)} tensors)" in result.output


def test_dataparallel_prefix_candidates_and_auto_prefix(tmp_path: Path, invoke) -> None:
    sd = save_plain(tmp_path / "plain.pt")
    save_dataparallel(tmp_path / "dp.pt")
    result = invoke("diff", tmp_path / "plain.pt", tmp_path / "dp.pt")
    assert result.exit_code == 1
    assert "incompatible: no key matches" in result.output
    assert "strip prefix 'module.'" in result.output and "pass --auto-prefix" in result.output
    assert "weights under key 'state_dict'" in result.output
    assert "optimizer=dict" in result.output  # the container's other entries are named
    data = cli_json(invoke("diff", tmp_path / "plain.pt", tmp_path / "dp.pt", "--format", "json"))
    best = data["prefix_remaps"][0]
    assert (best["strip"], best["add"], best["matched"]) == ("module.", "", len(sd))
    result = invoke("diff", tmp_path / "plain.pt", tmp_path / "dp.pt", "--auto-prefix")
    assert result.exit_code == 0, result.output
    assert f"loads with strict=True ({len(sd)} tensors)" in result.output
    assert "--auto-prefix applied: strip prefix 'module.'" in result.output


def test_compiled_prefix_detected(tmp_path: Path) -> None:
    save_plain(tmp_path / "plain.pt")
    save_compiled(tmp_path / "c.pt")
    res = diff_state_dicts(checkpoint_side(tmp_path / "plain.pt"), checkpoint_side(tmp_path / "c.pt"),
                           auto_prefix=True)
    assert res.applied_remap is not None and res.applied_remap.strip == "_orig_mod."
    assert res.verdict is Verdict.strict


def test_changed_head_is_a_shape_mismatch(tmp_path: Path, invoke) -> None:
    a, b = net(num_classes=10), net(num_classes=5)
    save_plain(tmp_path / "a.pt", a)
    save_plain(tmp_path / "b.pt", b)
    result = invoke("diff", tmp_path / "a.pt", tmp_path / "b.pt")
    assert result.exit_code == 1
    wa, wb = a.head.weight.shape, b.head.weight.shape
    assert f"({wa[0]}, {wa[1]})" in result.output and f"({wb[0]}, {wb[1]})" in result.output
    assert "incompatible: 2 shape mismatch(es)" in result.output
    data = cli_json(invoke("diff", tmp_path / "a.pt", tmp_path / "b.pt", "-f", "json"))
    assert data["schema"] == "torchinspect/diff/v1"
    assert {m["key"] for m in data["shape_mismatches"]} == {"head.weight", "head.bias"}
    assert data["verdict"] == "incompatible"
    assert len(data["matched"]) == len(a.state_dict()) - 2


def test_partial_load_and_strict_flag(tmp_path: Path, invoke) -> None:
    full = net().state_dict()
    part = {k: v for k, v in full.items() if not k.startswith("layers.5.")}
    torch.save(full, tmp_path / "full.pt")
    torch.save(part, tmp_path / "part.pt")
    result = invoke("diff", tmp_path / "full.pt", tmp_path / "part.pt")
    # a partial load is not success (issue 12 item 14): exit 1 unless --allow-partial
    assert result.exit_code == 1, result.output
    assert (f"partial load: only {len(part)} of {len(full)} target tensors get a value"
            in result.output)
    assert invoke("diff", tmp_path / "full.pt", tmp_path / "part.pt", "--allow-partial").exit_code == 0
    assert invoke("diff", tmp_path / "full.pt", tmp_path / "part.pt", "--strict",
                  "--allow-partial").exit_code == 1
    # B with extra keys: every target tensor gets a value -> exit 0, the extras are a note
    result = invoke("diff", tmp_path / "part.pt", tmp_path / "full.pt")
    assert result.exit_code == 0, result.output
    assert f"every one of the {len(part)} target tensors gets a value" in result.output
    assert invoke("diff", tmp_path / "part.pt", tmp_path / "full.pt", "--strict").exit_code == 1
    data = cli_json(invoke("diff", tmp_path / "full.pt", tmp_path / "part.pt", "-f", "json"))
    assert set(data["missing"]) == set(full) - set(part) and data["unexpected"] == []


def test_repeated_layers_are_grouped(tmp_path: Path, invoke) -> None:
    a, b = net(n_layers=80, d=8), net(n_layers=80, d=4)
    save_plain(tmp_path / "a.pt", a)
    save_plain(tmp_path / "b.pt", b)
    result = invoke("diff", tmp_path / "a.pt", tmp_path / "b.pt")
    assert result.exit_code == 1
    lines = [ln for ln in result.output.splitlines() if "attn.q.weight" in ln]
    assert len(lines) == 1 and "layers.{0..79}.attn.q.weight" in lines[0]
    data = cli_json(invoke("diff", tmp_path / "a.pt", tmp_path / "b.pt", "-f", "json"))
    groups = {g["pattern"]: g["count"] for g in data["groups"]["shape_mismatches"]}
    assert groups["layers.{0..79}.attn.q.weight"] == 80


def test_dtype_mismatches_and_values(tmp_path: Path, invoke) -> None:
    sd = net().state_dict()
    half = {k: v.half() if v.is_floating_point() else v for k, v in sd.items()}
    torch.save(sd, tmp_path / "a.pt")
    torch.save(half, tmp_path / "b.pt")
    data = cli_json(invoke("diff", tmp_path / "a.pt", tmp_path / "b.pt", "--values", "-f", "json"))
    floats = {k for k, v in sd.items() if v.is_floating_point()}
    assert {m["key"] for m in data["dtype_mismatches"]} == floats
    assert data["verdict"] == "strict"  # load_state_dict casts dtypes
    values = {v["key"]: v for v in data["values"]}
    for k in floats:
        expected = float((sd[k] - half[k].float()).abs().max())
        assert abs(values[k]["max_abs_diff"] - expected) <= 1e-12
    assert values["bn.num_batches_tracked"]["equal"] is True
    result = invoke("diff", tmp_path / "a.pt", tmp_path / "b.pt", "--values")
    assert "Largest differences" in result.output and "float16" in result.output


def test_num_batches_tracked_is_folded(tmp_path: Path, invoke) -> None:
    sd = net().state_dict()
    torch.save(sd, tmp_path / "a.pt")
    torch.save({k: v for k, v in sd.items() if "num_batches_tracked" not in k}, tmp_path / "b.pt")
    result = invoke("diff", tmp_path / "a.pt", tmp_path / "b.pt")
    assert result.exit_code == 0
    assert "1 num_batches_tracked entries present on one side only were folded" in result.output
    assert "loads with strict=True" in result.output


def test_saved_device_is_reported(tmp_path: Path, invoke) -> None:
    sd = save_plain(tmp_path / "a.pt")
    save_simulated_gpu(tmp_path / "gpu.pt", {"model": sd, "epoch": 1})
    result = invoke("diff", tmp_path / "a.pt", tmp_path / "gpu.pt")
    assert result.exit_code == 0
    assert "saved on cuda:0" in result.output and "weights under key 'model'" in result.output
    data = cli_json(invoke("diff", tmp_path / "a.pt", tmp_path / "gpu.pt", "-f", "json"))
    assert data["b"]["saved_devices"] == ["cuda:0"] and data["b"]["container_key"] == "model"


def test_model_side_and_arch_form(tmp_path: Path, invoke) -> None:
    save_dataparallel(tmp_path / "dp.pt")
    n = len(net().state_dict())
    spec = f"{HELPERS}:Net"
    result = invoke("diff", spec, tmp_path / "dp.pt", "--auto-prefix")
    assert result.exit_code == 0, result.output
    assert f"loads with strict=True ({n} tensors)" in result.output
    result = invoke("diff", tmp_path / "dp.pt", "--arch", spec, "--auto-prefix", "--arg", "num_classes=3")
    assert result.exit_code == 1 and "shape mismatch" in result.output
    # CKPT MODEL in either order: the model is the target
    swapped = cli_json(invoke("diff", tmp_path / "dp.pt", spec, "--auto-prefix", "--format", "json"))
    straight = cli_json(invoke("diff", spec, tmp_path / "dp.pt", "--auto-prefix", "--format", "json"))
    assert swapped == straight


def test_tied_model_against_safetensors(tmp_path: Path, invoke) -> None:
    from safetensors.torch import save_model

    m = TiedLM()
    save_model(m, str(tmp_path / "t.safetensors"))  # HF style: drops the tied duplicate
    result = invoke("diff", f"{HELPERS}:TiedLM", tmp_path / "t.safetensors")
    assert result.exit_code == 0, result.output
    n = len(m.state_dict())
    # the dropped duplicate is tied to a loaded key in the model: it gets its value, but
    # strict=True would still report it missing (PyTorch's rule)
    assert (f"loads with strict=False: every one of the {n} target tensors gets a value; "
            "1 tied key(s) absent from B") in result.output
    assert invoke("diff", f"{HELPERS}:TiedLM", tmp_path / "t.safetensors", "--strict").exit_code == 1
    # a real load_state_dict agrees: strict=False leaves nothing unset, strict=True raises
    from safetensors.torch import load_file

    fresh = TiedLM()
    res = fresh.load_state_dict(load_file(tmp_path / "t.safetensors"), strict=False)
    tied_key = res.missing_keys[0]
    assert fresh.get_parameter(tied_key) is not None and res.unexpected_keys == []


def test_values_library_identical(tmp_path: Path) -> None:
    save_plain(tmp_path / "a.pt")
    save_plain(tmp_path / "b.pt")
    res = diff_state_dicts(checkpoint_side(tmp_path / "a.pt"), checkpoint_side(tmp_path / "b.pt"))
    vals = compare_values(res)
    assert len(vals) == len(res.matched) and all(v.equal and v.max_abs_diff == 0 for v in vals)


def test_usage_errors(tmp_path: Path, invoke) -> None:
    save_plain(tmp_path / "a.pt")
    result = invoke("diff", tmp_path / "a.pt")
    assert result.exit_code == 2 and "needs two sides" in result.output
    result = invoke("diff", tmp_path / "a.pt", tmp_path / "missing.pt")
    assert result.exit_code == 2 and "no such file" in result.output
    assert "Traceback" not in result.output


# ------------------------------------------------------------------ issue 21: prefixes, verdicts


def test_the_best_remap_comes_before_the_key_listings(tmp_path: Path, invoke) -> None:
    save_plain(tmp_path / "plain.pt")
    save_dataparallel(tmp_path / "dp.pt")
    out = invoke("diff", tmp_path / "plain.pt", tmp_path / "dp.pt").output
    hint = out.index("best remap: strip prefix 'module.' (DataParallel/DDP) would match")
    assert hint < out.index("Keys") < out.index("Missing (in A, not in B)")
    assert out.index("Prefix remaps of B's keys") < out.index("Keys")
    out = invoke("diff", tmp_path / "plain.pt", tmp_path / "dp.pt", "--auto-prefix").output
    assert out.index("--auto-prefix applied: strip prefix 'module.'") < out.index("Keys")


def _printed_code(output: str) -> str:
    """The lines under "Load it with" in a table report (up to the next blank line)."""
    lines = output.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("Load it with")) + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return "\n".join(lines[start:end])


def test_verdict_names_its_conditions_and_the_printed_line_loads(tmp_path: Path, invoke) -> None:
    """A cuda:0-saved, DataParallel-prefixed resnet18 under ["model"]: the verdict holds only
    with map_location, the container key and the prefix stripped; the printed Python does it."""
    import torchvision

    saved = {f"module.{k}": v for k, v in torchvision.models.resnet18().state_dict().items()}
    path = tmp_path / "gpu_checkpoint.pth.tar"
    save_simulated_gpu(path, {"model": saved, "epoch": 3})
    result = invoke("diff", path, "--arch", "resnet18", "--auto-prefix")
    assert result.exit_code == 0, result.output
    verdict = next(ln for ln in result.output.splitlines() if ln.startswith("verdict:"))
    for condition in ('taking ["model"] from the file', 'with map_location="cpu" (saved on cuda:0)',
                      "after stripping 'module.'"):
        assert condition in verdict, verdict
    code = _printed_code(result.output)
    assert 'map_location="cpu"' in code and '["model"]' in code
    model = torchvision.models.resnet18()
    exec(code, {"model": model})  # noqa: S102 - the line the report tells the user to run
    for k, v in model.state_dict().items():
        assert torch.equal(v, saved[f"module.{k}"]), k
    # the plain line fails on both counts the verdict names
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(path, weights_only=True)
    with pytest.raises(RuntimeError, match="Missing key"):
        torchvision.models.resnet18().load_state_dict(torch.load(path, map_location="cpu")["model"])
    data = cli_json(invoke("diff", path, "--arch", "resnet18", "--auto-prefix", "-f", "json"))
    assert data["load_code"] == code and len(data["conditions"]) == 3


class _Wrapped(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = net()


def _infix(k: str) -> str:  # per-block torch.compile: layers._orig_mod.0.attn.q.weight
    return k.replace("layers.", "layers._orig_mod.", 1)


@pytest.mark.parametrize("case", ["compiled", "safetensors-model.", "add-prefix", "strip-and-add",
                                  "infix", "extra-keys", "flat-with-scalars"])
def test_the_load_code_loads_every_remap(tmp_path: Path, case: str) -> None:
    """Each remap's printed expression computes what the diff applied: the code loads."""
    sd = net(3).state_dict()
    target = _Wrapped() if case in ("add-prefix", "strip-and-add") else net()
    weights: dict = {
        "compiled": {f"_orig_mod.{k}": v for k, v in sd.items()},
        "safetensors-model.": {f"model.{k}": v for k, v in sd.items()},
        "add-prefix": dict(sd),
        "strip-and-add": {f"module.{k}": v for k, v in sd.items()},
        "infix": {_infix(k): v for k, v in sd.items()},
        "extra-keys": {**sd, "aux.weight": torch.ones(2)},
        "flat-with-scalars": {**sd, "epoch": 7, "arch": "Net"},
    }[case]
    path = tmp_path / ("w.safetensors" if case.startswith("safetensors") else "w.pt")
    if path.suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in weights.items()}, path)
    else:
        torch.save(weights, path)
    res = diff_state_dicts(target, checkpoint_side(path), auto_prefix=True)
    assert res.verdict.loads, res.verdict_text()
    code, why_not = res.load_code()
    assert code, why_not
    exec("\n".join(code), {"model": target})  # noqa: S102
    inner = target.backbone if isinstance(target, _Wrapped) else target
    for k, v in inner.state_dict().items():
        assert torch.equal(v, sd[k]), (case, k)
    assert ("strict=False" in code[-1]) == (case == "extra-keys")


def test_no_load_line_where_it_would_not_load(tmp_path: Path) -> None:
    save_plain(tmp_path / "a.pt", net(num_classes=10))
    save_plain(tmp_path / "b.pt", net(num_classes=5))
    res = diff_state_dicts(checkpoint_side(tmp_path / "a.pt"), checkpoint_side(tmp_path / "b.pt"))
    assert res.load_code() == ([], "it does not load") and res.conditions() == []


def test_absent_num_batches_tracked_verdict_holds_as_printed(tmp_path: Path) -> None:
    """A saved state_dict() with its num_batches_tracked deleted in place keeps torch's version
    _metadata, so BatchNorm does not fill them and strict=True raises on the plain line; the
    verdict says it needs a plain dict, and the printed code makes one."""
    sd = net(4).state_dict()
    for k in [k for k in sd if k.endswith("num_batches_tracked")]:
        del sd[k]
    torch.save(sd, tmp_path / "w.pt")
    with pytest.raises(RuntimeError, match="num_batches_tracked"):
        net().load_state_dict(torch.load(tmp_path / "w.pt", weights_only=True))
    res = diff_state_dicts(net(), checkpoint_side(tmp_path / "w.pt"))
    assert res.verdict is Verdict.strict
    assert "as a plain dict (BatchNorm then fills the 1 absent num_batches_tracked)" in res.verdict_text()
    code, _ = res.load_code()
    model = net()
    exec("\n".join(code), {"model": model})  # noqa: S102
    assert all(torch.equal(v, sd[k]) for k, v in model.state_dict().items() if k in sd)


def test_the_printed_line_loads_a_real_gpu_saved_container(invoke) -> None:
    """tests/data/gpu_saved_container.pt was saved on a GPU ({"model": "module."-prefixed
    state_dict on cuda:0, "optimizer", "epoch"}): the printed lines load it into Tiny here."""
    from test_checkpoint_helpers import DATA_DIR

    path = DATA_DIR / "gpu_saved_container.pt"
    arch = f"{DATA_DIR / 'make_gpu_checkpoint.py'}:Tiny"
    result = invoke("diff", path, "--arch", arch, "--auto-prefix")
    assert result.exit_code == 0, result.output
    assert 'with map_location="cpu" (saved on cuda:0)' in result.output
    spec = importlib.util.spec_from_file_location("make_gpu_checkpoint", DATA_DIR / "make_gpu_checkpoint.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model = mod.Tiny()
    exec(_printed_code(result.output), {"model": model})  # noqa: S102
    reference = torch.load(DATA_DIR / "gpu_saved_reference.pt", weights_only=True)
    for k, v in model.state_dict().items():
        assert torch.equal(v, reference[k]), k


def test_a_dcp_folder_gets_its_in_place_load_lines(tmp_path: Path) -> None:
    import warnings

    from torchinspect.checkpoints import convert_checkpoint

    sd = save_plain(tmp_path / "w.pt", net(5))
    convert_checkpoint(tmp_path / "w.pt", tmp_path / "w.dcp")
    res = diff_state_dicts(net(), checkpoint_side(tmp_path / "w.dcp"))
    code, why_not = res.load_code()
    assert res.verdict is Verdict.strict and code, why_not
    model = net()
    with warnings.catch_warnings():  # "torch.distributed is disabled ... single process"
        warnings.simplefilter("ignore", UserWarning)
        exec("\n".join(code), {"model": model})  # noqa: S102
    assert all(torch.equal(v, sd[k]) for k, v in model.state_dict().items())
    partial = diff_state_dicts(net(n_layers=7), checkpoint_side(tmp_path / "w.dcp"))
    assert partial.load_code()[0] == [] and "DCP" in partial.load_code()[1]


def test_load_lines_are_never_cut_by_the_terminal_width(tmp_path: Path, invoke, monkeypatch) -> None:
    """A copied line must stay one line: code is not wrapped at 60 columns; Markdown puts it
    in a code block, HTML in <pre>."""
    monkeypatch.setenv("COLUMNS", "60")
    deep = tmp_path / ("a-rather-long-folder-name-" * 3)
    deep.mkdir()
    sd = save_plain(deep / "checkpoint.pt")
    torch.save({"model": {f"module.{k}": v for k, v in sd.items()}}, deep / "checkpoint.pt")
    result = invoke("diff", deep / "checkpoint.pt", "--arch", f"{HELPERS}:Net", "--auto-prefix")
    assert result.exit_code == 0, result.output
    code = _printed_code(result.output)
    assert max(len(ln) for ln in code.splitlines()) > 60
    model = net(1)
    exec(code, {"model": model})  # noqa: S102
    assert all(torch.equal(v, sd[k]) for k, v in model.state_dict().items())
    md = invoke("diff", deep / "checkpoint.pt", "--arch", f"{HELPERS}:Net", "--auto-prefix",
                "-f", "markdown").output
    assert f"```python\n{code}\n```" in md
    html = invoke("diff", deep / "checkpoint.pt", "--arch", f"{HELPERS}:Net", "--auto-prefix",
                  "-f", "html").output
    assert "<pre><code>import torch\nsd = torch.load(" in html


def _head_checkpoint(classes: int, prefix: str = "") -> dict[str, torch.Tensor]:
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, classes))
    return {prefix + k: v for k, v in model.state_dict().items()}


def _target() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 10))


def test_a_head_size_mismatch_suggests_num_classes(tmp_path: Path) -> None:
    r = diff_state_dicts(_target(), _head_checkpoint(5))
    assert r.verdict is Verdict.incompatible and r.head_classes() == 5
    text = r.verdict_text()
    assert "head 2 (10 outputs in A, 5 in B)" in text and "--arg num_classes=5" in text
    # two checkpoints: nothing to rebuild, no --arg
    torch.save(_head_checkpoint(10), tmp_path / "a.pt")
    torch.save(_head_checkpoint(5), tmp_path / "b.pt")
    files = diff_state_dicts(tmp_path / "a.pt", tmp_path / "b.pt")
    assert files.head_classes() is None and "--arg" not in files.verdict_text()


def test_no_key_matches_still_shows_the_mismatch_the_remap_would_leave() -> None:
    r = diff_state_dicts(_target(), _head_checkpoint(5, "model."))
    assert not r.matched and r.applied_remap is None
    text = r.verdict_text()
    assert text.startswith("incompatible: no key matches as saved; after stripping 'model.'")
    assert "2 of them have other shapes (2.weight (10, 8) in A, (5, 8) in B" in text
    assert "--arg num_classes=5" in text
    applied = diff_state_dicts(_target(), _head_checkpoint(5, "model."), auto_prefix=True)
    assert [m.key for m in applied.shape_mismatches] == [m.key for m in r.remap_mismatches]
