"""Checkpoints laid out the way real tools write them (issue 12): each test builds the file."""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from test_checkpoint_helpers import (
    HELPERS,
    ClipLike,
    ExtraStateNet,
    QNet,
    Stage,
    TiedLM,
    _Reduce,
    cli_json,
    net,
    save_plain,
)
from torchinspect.checkpoints import convert_checkpoint
from torchinspect.errors import UnsafeCheckpointError
from torchinspect.io.checkpoint import read_checkpoint_meta
from torchinspect.io.torch_load import UNRESOLVED, scan_pickle_globals


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


# ------------------------------------------------------------------ 1. the globals named


def test_scan_names_exactly_what_the_pickle_imports() -> None:
    import datetime
    import posix

    # "posix" is memoized first, so STACK_GLOBAL's module comes from a BINGET
    data = pickle.dumps(["posix", "platform", _Reduce(posix.system, ("true",))], protocol=4)
    assert scan_pickle_globals(data) == ["posix.system"]
    two = pickle.dumps([datetime.datetime(2024, 1, 1), datetime.time(1)], protocol=4)
    assert scan_pickle_globals(two) == ["datetime.datetime", "datetime.time"]
    # a module name built at load time is reported as unresolvable, never guessed
    forged = (b"\x80\x04" + b"\x8c\x08builtins\x94\x8c\x03str\x94\x93\x8c\x01x\x85R"
              + b"\x8c\x06system\x94\x93.")
    assert scan_pickle_globals(forged) == ["builtins.str", UNRESOLVED]


def test_refusal_names_the_real_global_in_a_protocol4_zip(tmp_path: Path, invoke) -> None:
    import posix

    marker = tmp_path / "RAN"
    evil = tmp_path / "evil.pt"
    torch.save({"state_dict": {"w": torch.zeros(2)}, "note": "posix",
                "x": _Reduce(posix.system, (f"touch {marker}",))}, evil, pickle_protocol=4)
    save_plain(tmp_path / "good.pt")
    result = invoke("diff", tmp_path / "good.pt", evil)
    assert result.exit_code == 2 and "posix.system" in result.output, result.output
    assert "platform" not in result.output and not marker.exists()


# ------------------------------------------------------------------ 2. extra state


def test_extra_state_is_counted_diffed_and_kept(tmp_path: Path, invoke) -> None:
    m = ExtraStateNet()
    sd = m.state_dict()
    assert {"a._extra_state", "b._extra_state"} <= set(sd)
    torch.save(sd, tmp_path / "full.pt")
    torch.save({k: v for k, v in sd.items() if k != "a._extra_state"}, tmp_path / "lost.pt")
    spec = f"{HELPERS}:ExtraStateNet"
    assert invoke("diff", spec, tmp_path / "full.pt").exit_code == 0
    result = invoke("diff", spec, tmp_path / "lost.pt")
    assert result.exit_code == 1 and "a._extra_state" in result.output, result.output
    with pytest.raises(RuntimeError, match="_extra_state"):  # PyTorch agrees
        ExtraStateNet().load_state_dict(torch.load(tmp_path / "lost.pt"), strict=True)
    # convert keeps it: the .pt output loads with strict=True and restores the state
    res = convert_checkpoint(tmp_path / "full.pt", tmp_path / "o.pt")
    assert res.extra_state == ["a._extra_state", "b._extra_state"] and res.verified == "bit-exact"
    fresh = ExtraStateNet()
    fresh.a.fp8_meta = {}
    fresh.load_state_dict(torch.load(tmp_path / "o.pt", weights_only=True), strict=True)
    assert fresh.a.fp8_meta == m.a.fp8_meta
    # safetensors: the tensor-valued state is a tensor, the plain one JSON metadata (said so)
    res = convert_checkpoint(tmp_path / "full.pt", tmp_path / "o.safetensors")
    from safetensors import safe_open

    with safe_open(str(tmp_path / "o.safetensors"), framework="pt") as f:
        assert "b._extra_state" in f.keys()
        assert json.loads(f.metadata()["torchinspect.extra_state.a._extra_state"]) == m.a.fp8_meta
    assert any("extra state" in n for n in res.notes)


# ------------------------------------------------------------------ 3. quantized


def test_quantized_state_dicts(tmp_path: Path, invoke) -> None:
    torch.manual_seed(0)
    q10 = QNet(10)
    torch.save(q10.state_dict(), tmp_path / "q10.pt")
    result = invoke("diff", f"{HELPERS}:QNet", tmp_path / "q10.pt", "--arg", "num_classes=100")
    assert result.exit_code == 1, result.output
    assert "fc._packed_params._packed_params" in result.output and "(100, 16)" in result.output
    assert invoke("diff", f"{HELPERS}:QNet", tmp_path / "q10.pt").exit_code == 0
    # convert to .pt keeps the quantized tensors exactly; safetensors refuses clearly
    res = convert_checkpoint(tmp_path / "q10.pt", tmp_path / "o.pt")
    assert res.verified == "bit-exact"
    back = torch.load(tmp_path / "o.pt", weights_only=True)
    w0, w1 = q10.state_dict()["fc._packed_params._packed_params"][0], back["fc._packed_params._packed_params"][0]
    assert torch.equal(w0.int_repr(), w1.int_repr()) and w0.q_scale() == w1.q_scale()
    result = invoke("convert", tmp_path / "q10.pt", tmp_path / "o.safetensors")
    assert result.exit_code == 2 and "quantized" in result.output
    # --values on differing quantized tensors: dequantized numbers, no crash
    torch.manual_seed(1)
    q10b = QNet(10)  # a quantized Linear starts from uninitialised memory: give it weights
    q10b.fc.set_weight_bias(torch.quantize_per_tensor(torch.randn(10, 16) + 1, 0.05, 0,
                                                      torch.qint8), torch.zeros(10))
    torch.save(q10b.state_dict(), tmp_path / "q10b.pt")
    data = cli_json(invoke("diff", tmp_path / "q10.pt", tmp_path / "q10b.pt", "--values", "-f", "json"))
    packed = next(v for v in data["values"] if v["key"] == "fc._packed_params._packed_params")
    assert packed["max_abs_diff"] > 0 and not packed["equal"]


# ------------------------------------------------------------------ 4. FP8 and wide unsigned


@pytest.mark.parametrize("first", [".pt", ".safetensors"])
def test_fp8_and_wide_unsigned_convert_both_ways_bit_exact(tmp_path: Path, first: str) -> None:
    torch.manual_seed(0)
    x = torch.randn(64, 32) * 10
    sd = {"w_e4m3": x.to(torch.float8_e4m3fn), "w_e5m2": x.to(torch.float8_e5m2),
          "scale": torch.tensor(0.5), "u16": torch.arange(70000, dtype=torch.int64).to(torch.uint16)[:100],
          "u32": (torch.arange(100) * 40_000_000).to(torch.uint32),
          "u64": (torch.arange(100) * (2 ** 40)).to(torch.uint64)}
    torch.save(sd, tmp_path / "in.pt")
    other = ".safetensors" if first == ".pt" else ".pt"
    mid, out = tmp_path / f"mid{first}", tmp_path / f"out{other}"
    src = tmp_path / "in.pt"
    if first == ".pt":
        src = tmp_path / "in.safetensors"
        from safetensors.torch import save_file

        save_file(sd, src)
    assert convert_checkpoint(src, mid).verified == "bit-exact"
    assert convert_checkpoint(mid, out).verified == "bit-exact"
    if other == ".pt":
        back = torch.load(out, weights_only=True)
    else:
        from safetensors.torch import load_file

        back = load_file(out)
    for k, v in sd.items():
        assert back[k].dtype == v.dtype and torch.equal(_bits(back[k]), _bits(v)), k


# ------------------------------------------------------------------ 5. fp16 overflow


def test_fp16_overflow_is_counted_and_refused(tmp_path: Path, invoke) -> None:
    sd = {"w": torch.tensor([7e4, 1.0, -7e4]), "bn.running_var": torch.tensor([1e5, 2.0]),
          "tiny": torch.tensor([1e-9, 0.0]), "ok": torch.ones(3)}
    torch.save(sd, tmp_path / "a.pt")
    out = tmp_path / "o.pt"
    result = invoke("convert", tmp_path / "a.pt", out, "--dtype", "fp16")
    assert result.exit_code == 1, result.output
    assert "3 value(s) overflow to inf and 1 underflow to 0 in 3 tensor(s)" in result.output
    assert "--dtype bf16" in result.output and not out.exists()
    data = cli_json(invoke("convert", tmp_path / "a.pt", out, "--dtype", "fp16", "--allow-overflow",
                        "-f", "json"))
    assert data["overflow"]["w"] == {"to_inf": 2, "to_zero": 0}
    assert data["overflow"]["tiny"] == {"to_inf": 0, "to_zero": 1}
    assert torch.isinf(torch.load(out)["bn.running_var"][0])
    res = convert_checkpoint(tmp_path / "a.pt", tmp_path / "b.pt", dtype="bf16")
    assert res.overflow == {} and res.verified == "exact after cast"
    # underflow alone (tiny weights) is counted and reported, not refused
    torch.save({"tiny": torch.tensor([1e-9, 1.0])}, tmp_path / "t.pt")
    res = convert_checkpoint(tmp_path / "t.pt", tmp_path / "t16.pt", dtype="fp16")
    assert res.overflow == {"tiny": (0, 1)} and "1 underflow to 0" in res.notes[-1]


# ------------------------------------------------------------------ 6. 0-dim from (1,)


def test_zero_dim_parameter_from_a_one_element_tensor(tmp_path: Path, invoke) -> None:
    sd = ClipLike().state_dict()
    sd["logit_scale"] = sd["logit_scale"].reshape(1)  # how old CLIP checkpoints store it
    torch.save(sd, tmp_path / "clip.pt")
    ClipLike().load_state_dict(sd, strict=True)  # PyTorch accepts it
    result = invoke("diff", f"{HELPERS}:ClipLike", tmp_path / "clip.pt")
    assert result.exit_code == 0 and "loads with strict=True" in result.output, result.output
    sd["logit_scale"] = torch.ones(2)  # but not a (2,) tensor
    torch.save(sd, tmp_path / "bad.pt")
    with pytest.raises(RuntimeError, match="size mismatch"):
        ClipLike().load_state_dict(sd)
    assert invoke("diff", f"{HELPERS}:ClipLike", tmp_path / "bad.pt").exit_code == 1


# ------------------------------------------------------------------ 7. conflicts before writing


def test_output_on_an_input_is_refused_before_writing(tmp_path: Path, invoke) -> None:
    src = tmp_path / "a.pt"
    save_plain(src)
    before = src.read_bytes()
    out = tmp_path / "o.pt"
    result = invoke("convert", src, "-o", src)  # -o is OUT (the converted checkpoint)
    assert result.exit_code == 2 and "input file" in result.output, result.output
    assert src.read_bytes() == before
    result = invoke("convert", src, out, "-o", out)
    assert result.exit_code == 2 and "OUT given twice" in result.output and not out.exists()


# ------------------------------------------------------------------ 8 + 12. empty tensors, ZeRO-3


def test_zero_size_tensors_are_not_tied(tmp_path: Path) -> None:
    sd = {"a": torch.empty(0), "b": torch.empty(0), "c": torch.ones(2)}
    torch.save(sd, tmp_path / "l.pt", _use_new_zipfile_serialization=False)
    meta = read_checkpoint_meta(tmp_path / "l.pt")
    assert meta.tied == []
    res = convert_checkpoint(tmp_path / "l.pt", tmp_path / "o.pt")
    assert res.tied == [] and res.empty == ["a", "b"]
    assert any("0 elements" in n for n in res.notes)


def _deepspeed_zero3(folder: Path, model: torch.nn.Module) -> Path:
    """What deepspeed's engine.save_checkpoint writes under ZeRO-3."""
    step = folder / "global_step10"
    step.mkdir(parents=True)
    sd = model.state_dict()
    torch.save({"module": {k: torch.empty(0, dtype=v.dtype) for k, v in sd.items()},
                "buffer_names": [], "param_shapes": [{k: v.shape for k, v in sd.items()}],
                "ds_config": {"zero_optimization": {"stage": 3}}, "ds_version": "0.14.0",
                "global_steps": 10}, step / "mp_rank_00_model_states.pt")
    torch.save({"optimizer_state_dict": {"fp32_flat_groups": [torch.zeros(10)]}},
               step / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    (folder / "latest").write_text("global_step10")
    return step / "mp_rank_00_model_states.pt"


def test_deepspeed_zero3_is_explained(tmp_path: Path, invoke) -> None:
    f = _deepspeed_zero3(tmp_path / "ckpt", net())
    for arg in (f, tmp_path / "ckpt"):
        result = invoke("diff", arg, "--arch", f"{HELPERS}:Net")
        assert result.exit_code == 2, result.output
        assert "DeepSpeed" in result.output and "zero_to_fp32" in result.output
        assert "shape mismatch" not in result.output


# ------------------------------------------------------------------ 9. pickles that cannot load


def test_whole_model_pickle_of_a_missing_module(tmp_path: Path, invoke) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "mymodels.py").write_text("import torch\nclass MyNet(torch.nn.Module):\n"
                                      "    def __init__(self):\n        super().__init__()\n"
                                      "        self.fc = torch.nn.Linear(2, 2)\n"
                                      "    def forward(self, x):\n        return self.fc(x)\n")
    subprocess.run([sys.executable, "-c", "import torch, mymodels; "
                    f"torch.save(mymodels.MyNet(), {str(tmp_path / 'm.pt')!r})"],
                   cwd=code, check=True, capture_output=True)
    result = invoke("diff", tmp_path / "m.pt", "--arch", f"{HELPERS}:Net", "--trust-pickle")
    assert result.exit_code == 2, result.output
    assert "'mymodels'" in result.output and "--python-path DIR" in result.output
    # the fix the hint names: the folder on sys.path for the load only
    before = list(sys.path)
    result = invoke("summary", tmp_path / "m.pt", "--trust-pickle", "--python-path", code,
                    "--input", "2", "--totals", "-f", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["totals"]["params"] == 2 * 2 + 2
    assert sys.path == before and "mymodels" in sys.modules
    del sys.modules["mymodels"]
    result = invoke("summary", tmp_path / "m.pt", "--trust-pickle", "--python-path", tmp_path / "nope")
    assert result.exit_code == 2 and "no such folder" in result.output, result.output


def test_plain_pickle_is_recognized_up_front(tmp_path: Path, invoke) -> None:
    import numpy as np

    (tmp_path / "model_final.pkl").write_bytes(pickle.dumps(
        {"model": {"backbone.conv1.weight": np.zeros((2, 2))}, "__author__": "Detectron2"}))
    for extra in ([], ["--trust-pickle"]):
        result = invoke("diff", tmp_path / "model_final.pkl", "--arch", f"{HELPERS}:Net", *extra)
        assert result.exit_code == 2 and "plain Python pickle" in result.output, result.output
        assert "numpy" in result.output  # the globals it would import are named


def test_keep_extra_with_an_unsafe_extra_names_the_global(tmp_path: Path, invoke) -> None:
    import os

    marker = tmp_path / "RAN"
    torch.save({"state_dict": net().state_dict(), "x": _Reduce(os.system, (f"touch {marker}",))},
               tmp_path / "a.pt")
    result = invoke("convert", tmp_path / "a.pt", tmp_path / "o.pt", "--keep-extra")
    assert result.exit_code == 2 and "system" in result.output, result.output
    assert not marker.exists()


# ------------------------------------------------------------------ 10. Hugging Face shards


def _hf_sharded(folder: Path, sd: dict[str, torch.Tensor], n: int, kind: str = "safetensors") -> Path:
    """save_pretrained's layout: model-0000i-of-0000N.* + model.*.index.json."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    keys = list(sd)
    per = -(-len(keys) // n)
    weight_map = {}
    stem, ext = ("model", "safetensors") if kind == "safetensors" else ("pytorch_model", "bin")
    for i in range(n):
        name = f"{stem}-{i + 1:05d}-of-{n:05d}.{ext}"
        part = {k: sd[k].contiguous() for k in keys[i * per:(i + 1) * per]}
        if kind == "safetensors":
            save_file(part, folder / name, metadata={"format": "pt"})
        else:
            torch.save(part, folder / name)
        weight_map.update(dict.fromkeys(part, name))
    index = folder / f"{stem}.{ext}.index.json"
    total = sum(v.numel() * v.element_size() for v in sd.values())
    index.write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    return index


@pytest.mark.parametrize("kind", ["safetensors", "bin"])
def test_hf_sharded_checkpoint_is_one_checkpoint(tmp_path: Path, invoke, kind: str) -> None:
    sd = net().state_dict()
    index = _hf_sharded(tmp_path / "hf", sd, 2, kind)
    for arg in (index, tmp_path / "hf"):
        result = invoke("diff", f"{HELPERS}:Net", arg)
        assert result.exit_code == 0 and "loads with strict=True" in result.output, result.output
        assert "2 shard(s)" in result.output
    shard = sorted((tmp_path / "hf").glob(f"*-00001-of-00002.{'safetensors' if kind == 'safetensors' else 'bin'}"))[0]
    result = invoke("diff", f"{HELPERS}:Net", shard)
    assert result.exit_code == 1 and "shard 1 of 2" in result.output and index.name in result.output
    res = convert_checkpoint(index, tmp_path / "one.safetensors")
    assert res.verified == "bit-exact" and res.tensors == len(sd)


def test_convert_writes_hf_shards_transformers_can_load(tmp_path: Path, invoke) -> None:
    m = net(n_layers=6)
    save_plain(tmp_path / "a.pt", m)
    out = tmp_path / "hf" / "model.safetensors"
    out.parent.mkdir()
    result = invoke("convert", tmp_path / "a.pt", out, "--shard-size", "2KB")
    assert result.exit_code == 0, result.output
    index = json.loads((out.parent / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1 and shards[0].startswith("model-00001-of-")
    assert index["metadata"]["total_size"] == sum(v.numel() * v.element_size()
                                                  for v in m.state_dict().values())
    from safetensors import safe_open

    for s in shards:
        with safe_open(str(out.parent / s), framework="pt") as f:
            assert f.metadata()["format"] == "pt"
    from huggingface_hub import load_torch_model  # the Hub's loader for sharded checkpoints

    fresh = net(seed=1, n_layers=6)
    load_torch_model(fresh, out.parent, strict=True)
    for k, v in m.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v), k
    assert invoke("diff", f"{HELPERS}:Net", out.parent, "--arg", "n_layers=6").exit_code == 0


# ------------------------------------------------------------------ 11. DCP


def _dcp_save(folder: Path, obj: dict) -> None:
    import warnings

    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(obj, checkpoint_id=str(folder), no_dist=True)


def test_dcp_folder_diff_and_convert_both_ways(tmp_path: Path, invoke) -> None:
    m = net()
    sd = m.state_dict()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    _dcp_save(tmp_path / "dcp", {"model": sd, "optim": opt.state_dict(), "step": 7})
    result = invoke("diff", f"{HELPERS}:Net", tmp_path / "dcp")
    assert result.exit_code == 0, result.output
    assert "weights under key 'model'" in result.output
    res = convert_checkpoint(tmp_path / "dcp", tmp_path / "o.safetensors")
    assert res.verified == "bit-exact" and res.tensors == len(sd)
    from safetensors.torch import load_file

    back = load_file(tmp_path / "o.safetensors")
    assert all(torch.equal(back[k], v) for k, v in sd.items())
    # and back to DCP
    save_plain(tmp_path / "a.pt", m)
    res = convert_checkpoint(tmp_path / "a.pt", tmp_path / "out.dcp")
    import torch.distributed.checkpoint as dcp

    target = {k: torch.zeros_like(v) for k, v in sd.items()}
    dcp.load(target, checkpoint_id=str(tmp_path / "out.dcp"), no_dist=True)
    assert all(torch.equal(target[k], v) for k, v in sd.items())
    # streamed (one tensor read at a time, cast on the fly) into one file per tensor
    res = convert_checkpoint(tmp_path / "a.pt", tmp_path / "bf.dcp", dtype="bf16")
    assert res.cast and len(list((tmp_path / "bf.dcp").glob("*.distcp"))) == len(sd)
    target = {k: torch.zeros_like(v.to(torch.bfloat16) if v.is_floating_point() else v)
              for k, v in sd.items()}
    dcp.load(target, checkpoint_id=str(tmp_path / "bf.dcp"), no_dist=True)
    assert all(torch.equal(target[k], v.to(target[k].dtype)) for k, v in sd.items())


def test_dcp_metadata_is_read_without_torch(tmp_path: Path) -> None:
    """The restricted reader agrees with DCP's own reader on every entry, and a diff of a
    DCP folder's metadata does not import torch; a foreign global still needs trust."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    from torchinspect.io.dcpmeta import read_dcp_metadata

    m = net()
    opt = torch.optim.Adam(m.parameters())
    for p in m.parameters():
        p.grad = torch.ones_like(p)
    opt.step()  # Adam state: exp_avg/exp_avg_sq tensors and a step per parameter
    sd = {**m.state_dict(), "half": torch.randn(3).half(), "bf": torch.randn(2, 2).bfloat16()}
    _dcp_save(tmp_path / "dcp", {"model": sd, "optim": opt.state_dict(), "step": 7})
    ours = read_dcp_metadata(tmp_path / "dcp" / ".metadata")
    ref = FileSystemReader(str(tmp_path / "dcp")).read_metadata()
    assert [e.fqn for e in ours.entries] == list(ref.state_dict_metadata)
    for e in ours.entries:
        item = ref.state_dict_metadata[e.fqn]
        assert e.is_tensor == isinstance(item, TensorStorageMetadata), e.fqn
        if e.is_tensor:
            assert (e.shape, e.dtype, e.chunks) == (tuple(item.size), str(item.properties.dtype)[6:],
                                                    len(item.chunks)), e.fqn
    assert ours.planner_data == {k: tuple(map(str, v)) for k, v in ref.planner_data.items()}
    code = ("import sys; from torchinspect.io.checkpoint import read_checkpoint_meta as r; "
            f"m = r({str(tmp_path / 'dcp')!r}); assert 'torch' not in sys.modules, 'torch imported'; "
            "print(len(m.tensors), m.container_key)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.split() == [str(len(sd)), "model"], out.stderr
    raw = (tmp_path / "dcp" / ".metadata").read_bytes()  # a foreign global: refused, named
    assert b"\x8c\x07pathlib" in raw
    (tmp_path / "dcp" / ".metadata").write_bytes(raw.replace(b"\x8c\x07pathlib", b"\x8c\x07subproc"))
    with pytest.raises(UnsafeCheckpointError) as err:
        read_checkpoint_meta(tmp_path / "dcp")
    assert "subproc.PosixPath" in str(err.value)


# ------------------------------------------------------------------ 13. harmless globals


def test_timm_and_lightning_globals_need_no_trust(tmp_path: Path, invoke) -> None:
    sd = net().state_dict()
    torch.save({"state_dict": sd, "args": argparse.Namespace(lr=0.1, model="net"), "epoch": 3},
               tmp_path / "timm.pth.tar")
    torch.save({"state_dict": sd, "hyper_parameters": {"data_dir": pathlib.PosixPath("/data")},
                "loops": collections.defaultdict(list, {"fit": [1]}), "epoch": 2},
               tmp_path / "lightning.ckpt")
    for f in ("timm.pth.tar", "lightning.ckpt"):
        result = invoke("diff", f"{HELPERS}:Net", tmp_path / f)
        assert result.exit_code == 0, result.output
        res = convert_checkpoint(tmp_path / f, tmp_path / f"{f}.safetensors")
        assert res.verified == "bit-exact" and res.tensors == len(sd)
    data = cli_json(invoke("diff", f"{HELPERS}:Net", tmp_path / "timm.pth.tar", "-f", "json"))
    assert "args" in data["b"]["extras"]
    # anything else is still refused
    torch.save({"state_dict": sd, "x": collections.ChainMap({})}, tmp_path / "other.pt")
    with pytest.raises(UnsafeCheckpointError):
        read_checkpoint_meta(tmp_path / "other.pt")


# ------------------------------------------------------------------ 14. remaps inside the path


def test_per_block_compile_infix_remap(tmp_path: Path, invoke) -> None:
    m = Stage()
    m.layer1 = torch.compile(m.layer1)  # lazy: compiles nothing until called
    torch.save(m.state_dict(), tmp_path / "c.pt")
    assert any("._orig_mod." in k for k in m.state_dict())
    result = invoke("diff", f"{HELPERS}:Stage", tmp_path / "c.pt")
    assert result.exit_code == 1 and "remove '_orig_mod.' wherever" in result.output, result.output
    result = invoke("diff", f"{HELPERS}:Stage", tmp_path / "c.pt", "--auto-prefix")
    assert result.exit_code == 0 and "loads with strict=True" in result.output, result.output


# ------------------------------------------------------------------ 15. counts agree


def test_counts_agree_between_diff_and_convert(tmp_path: Path, invoke) -> None:
    m = TiedLM()
    torch.save(m.state_dict(), tmp_path / "t.pt")
    d = cli_json(invoke("diff", tmp_path / "t.pt", tmp_path / "t.pt", "-f", "json"))
    res = convert_checkpoint(tmp_path / "t.pt", tmp_path / "o.pt")
    assert d["b"]["tensors"] == res.tensors == len(m.state_dict())
    assert d["tied"]["b"] == res.tied and len(res.tied) == 1
    assert d["b"]["bytes"] == res.tensor_bytes_before == sum(
        p.numel() * p.element_size() for p in m.parameters())  # ties counted once


@pytest.mark.parametrize("legacy", [False, True])
def test_counts_agree_across_diff_convert_and_summary(tmp_path: Path, invoke, legacy: bool) -> None:
    """One file with a tied embedding/LM head and a BatchNorm whose counter was not saved:
    diff, convert --arch and summary --arch give the same tensors, ties, folded counters and
    bytes (ties once), and those numbers are computed from the model here."""
    import re

    from test_checkpoint_helpers import TiedBN

    torch.manual_seed(0)
    m = TiedBN()
    sd = {k: v for k, v in m.state_dict().items() if not k.endswith("num_batches_tracked")}
    path = tmp_path / "t.pt"
    torch.save(sd, path, _use_new_zipfile_serialization=not legacy)
    arch = f"{HELPERS}:TiedBN"
    n_tensors = len(sd)
    n_tied = len(sd) - len({v.data_ptr() for v in sd.values()})
    nbytes = sum(t.numel() * t.element_size() for t in {v.data_ptr(): v for v in sd.values()}.values())
    assert (n_tensors, n_tied) == (5 + 1, 1)

    d = cli_json(invoke("diff", path, "--arch", arch, "-f", "json"))
    assert d["verdict"] == "strict" and d["b"]["tensors"] == n_tensors
    assert sum(len(g) - 1 for g in d["tied"]["b"]) == n_tied and d["b"]["bytes"] == nbytes
    assert d["folded"] == ["bn.num_batches_tracked"]

    c = cli_json(invoke("convert", path, tmp_path / "o.pt", "--arch", arch, "-f", "json"))
    assert c["tensors"] == n_tensors and sum(len(g) - 1 for g in c["tied"]) == n_tied
    assert c["tensor_bytes_before"] == nbytes and c["folded"] == d["folded"]

    s = cli_json(invoke("summary", path, "--arch", arch, "--input", "long:1,5", "--no-batch",
                     "--totals", "-f", "json"))
    s = s["models"][0] if "models" in s else s
    note = next(n for n in s["notes"] if n.startswith("weights loaded from"))
    assert re.search(rf"{n_tensors} tensors, {nbytes:,} bytes \({n_tied} tied, counted once\); "
                     r"1 num_batches_tracked absent", note), note
    # the model's totals (ties once) = the file's bytes + the counter BatchNorm filled
    assert s["totals"]["params"] == sum(p.numel() for p in m.parameters())  # tie kept on meta
    assert s["totals"]["param_bytes"] + s["totals"]["buffer_bytes"] == nbytes + 8


# ------------------------------------------------------------------ 17. partial convert


def test_convert_arch_partial_needs_allow_partial(tmp_path: Path, invoke) -> None:
    full = net().state_dict()
    torch.save({k: v for k, v in full.items() if not k.startswith("head.")}, tmp_path / "bb.pt")
    out = tmp_path / "o.pt"
    result = invoke("convert", tmp_path / "bb.pt", out, "--arch", f"{HELPERS}:Net")
    assert result.exit_code == 1 and "--allow-partial" in result.output, result.output
    assert "diff OUT" not in result.output and "inspect diff IN" in result.output
    assert not out.exists()
    result = invoke("convert", tmp_path / "bb.pt", out, "--arch", f"{HELPERS}:Net", "--allow-partial")
    assert result.exit_code == 0 and out.exists(), result.output
    assert "partial" in result.output


def test_every_container_entry_is_listed(tmp_path: Path, invoke) -> None:
    sd = net().state_dict()
    extras = {f"entry{i}": i for i in range(15)}
    torch.save({"state_dict": sd, **extras, "state_dict_ema": sd}, tmp_path / "a.pt")
    result = invoke("diff", f"{HELPERS}:Net", tmp_path / "a.pt")
    assert "other container entries (16)" in result.output and "4 more" in result.output
    data = cli_json(invoke("diff", f"{HELPERS}:Net", tmp_path / "a.pt", "-f", "json"))
    assert "state_dict_ema" in data["b"]["extras"]


# ------------------------------------------------------------------ 18. legacy files, metadata only


def _legacy_file(path: Path) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    m = TiedLM()
    sd = dict(m.state_dict())
    sd["bn.num_batches_tracked"] = torch.tensor(9)
    sd["half"] = torch.randn(3, 5).half()
    sd["row"] = sd["proj.weight"][2]  # a view at an offset inside a shared storage
    sd["empty"] = torch.empty(0, 4)
    torch.save({"model": sd, "epoch": 4, "args": argparse.Namespace(lr=0.1)}, path,
               _use_new_zipfile_serialization=False)
    return sd


def test_legacy_reader_agrees_with_torch_and_locates_every_byte(tmp_path: Path) -> None:
    from torchinspect.io.tensors import FilePool, open_input
    from torchinspect.io.torchlegacy import read_torch_legacy_structure

    path = tmp_path / "legacy.pth"
    sd = _legacy_file(path)
    obj, legacy = read_torch_legacy_structure(path)
    assert obj["epoch"] == 4 and obj["args"] == {"lr": 0.1}
    assert len(legacy.data_offsets) == len(sd) - 2  # the tie and the row view share a storage
    ref = torch.load(path, map_location="meta", weights_only=False)["model"]
    inp = open_input(path)
    assert inp.streamed and inp.container_key == "model"
    assert {t.name: (t.shape, t.dtype) for t in inp.tensors} == {
        k: (tuple(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in ref.items()}
    with FilePool() as files:  # the located bytes are the saved tensors' bytes
        for t in inp.tensors:
            got = b"".join(bytes(c) for c in t.chunks(files))
            assert got == bytes(_bits(sd[t.name]).numpy()), t.name
    meta = read_checkpoint_meta(path)
    assert meta.tied == [["tok.weight", "lm_head.weight"]]
    assert meta.total_bytes == sum(v.numel() * v.element_size() for k, v in sd.items()
                                   if k not in ("lm_head.weight",))


def test_legacy_metadata_does_not_import_torch(tmp_path: Path) -> None:
    path = tmp_path / "legacy.pt"
    _legacy_file(path)
    code = ("import sys; from torchinspect.io.checkpoint import read_checkpoint_meta as r; "
            f"m = r({str(path)!r}); assert 'torch' not in sys.modules, 'torch imported'; "
            "print(len(m.tensors), m.container_key)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.split() == ["8", "model"], out.stderr


def test_legacy_corrupt_records_are_clean_errors(tmp_path: Path, invoke) -> None:
    import struct

    from torchinspect.io.torchlegacy import read_torch_legacy_structure

    path = tmp_path / "legacy.pt"
    _legacy_file(path)
    data = path.read_bytes()
    _, legacy = read_torch_legacy_structure(path)
    first = min(legacy.data_offsets.values()) - 8
    bad = tmp_path / "count.pt"  # a storage's element count no longer matches its tensors
    bad.write_bytes(data[:first] + struct.pack("<q", 10 ** 12) + data[first + 8:])
    cut = tmp_path / "cut.pt"
    cut.write_bytes(data[:-5])
    for p, words in ((bad, "corrupt"), (cut, "truncated")):
        result = invoke("diff", p, p)
        assert result.exit_code == 2 and words in result.output and "Traceback" not in result.output, \
            result.output


def test_legacy_unsafe_global_is_still_refused(tmp_path: Path, invoke) -> None:
    marker = tmp_path / "ran"
    import os

    torch.save({"w": torch.ones(2), "x": _Reduce(os.system, (f"touch {marker}",))},
               tmp_path / "evil.pt", _use_new_zipfile_serialization=False)
    result = invoke("diff", tmp_path / "evil.pt", tmp_path / "evil.pt")
    assert result.exit_code == 2 and ".system" in result.output, result.output
    assert not marker.exists()
