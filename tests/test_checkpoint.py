"""The safe reader: formats, containers, prefixes, metadata without data, GPU-saved files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from test_checkpoint_helpers import (
    DATA_DIR,
    TiedLM,
    net,
    save_compiled,
    save_dataparallel,
    save_plain,
    save_simulated_gpu,
)
from torchinspect.errors import InspectError
from torchinspect.io.checkpoint import (
    CheckpointFormat,
    detect_format,
    extract_state_dict,
    find_prefix_remaps,
    read_checkpoint,
    read_checkpoint_meta,
    read_state_dict,
    strip_prefixes,
)


def _assert_same(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert torch.equal(a[k], b[k]), k


# ------------------------------------------------------------------ formats

def test_detect_format_by_content_not_extension(tmp_path: Path) -> None:
    sd = net().state_dict()
    torch.save(sd, tmp_path / "weights.safetensors")  # wrong extension on purpose
    torch.save(sd, tmp_path / "legacy.bin", _use_new_zipfile_serialization=False)
    from safetensors.torch import save_file

    save_file(sd, tmp_path / "st.pt")
    assert detect_format(tmp_path / "weights.safetensors") is CheckpointFormat.torch_zip
    assert detect_format(tmp_path / "legacy.bin") is CheckpointFormat.torch_legacy
    assert detect_format(tmp_path / "st.pt") is CheckpointFormat.safetensors


def test_model_archives_are_detected_and_refused_as_weights(tmp_path: Path) -> None:
    m = torch.nn.Linear(3, 2)
    ep = torch.export.export(m, (torch.randn(1, 3),))
    torch.export.save(ep, tmp_path / "m.pt2")
    assert detect_format(tmp_path / "m.pt2") is CheckpointFormat.export_pt2
    with pytest.raises(InspectError, match=r"torch\.export program.*not a weights file") as err:
        read_checkpoint(tmp_path / "m.pt2")
    assert "inspect summary" in err.value.hint


def test_every_format_loads_the_same_tensors(tmp_path: Path) -> None:
    sd = net().state_dict()
    from safetensors.torch import save_file

    torch.save(sd, tmp_path / "a.pt")
    torch.save(sd, tmp_path / "b.pt", _use_new_zipfile_serialization=False)
    save_file(sd, tmp_path / "c.safetensors")
    for name in ("a.pt", "b.pt", "c.safetensors"):
        got, ckpt, used = read_state_dict(tmp_path / name)
        assert used is None
        assert dict(got).keys() == sd.keys()
        for k in sd:
            assert torch.equal(got[k], sd[k])
        assert ckpt.file_size == (tmp_path / name).stat().st_size


def test_zip_checkpoints_are_memory_mapped(tmp_path: Path) -> None:
    save_plain(tmp_path / "a.pt")
    ckpt = read_checkpoint(tmp_path / "a.pt", mmap=True)
    maps = Path("/proc/self/maps")
    if not maps.exists():
        pytest.skip("needs /proc/self/maps (Linux)")
    assert str(tmp_path / "a.pt") in maps.read_text()  # the file is mapped, not read
    del ckpt


def test_safetensors_metadata_is_returned(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    save_file({"w": torch.ones(2)}, tmp_path / "m.safetensors", metadata={"epoch": "4"})
    assert read_checkpoint(tmp_path / "m.safetensors").metadata == {"epoch": "4"}


# ------------------------------------------------------------------ containers and prefixes

def test_dataparallel_container_is_unwrapped_and_prefix_stripped(tmp_path: Path) -> None:
    model = net()
    saved = save_dataparallel(tmp_path / "dp.pt", model)
    ckpt = read_checkpoint(tmp_path / "dp.pt")
    sd, used = extract_state_dict(ckpt.obj)
    assert used == "state_dict"
    assert all(k.startswith("module.") for k in sd)
    stripped, prefixes = strip_prefixes(sd)
    assert prefixes == ["module."]
    _assert_same(stripped, {k.removeprefix("module."): v for k, v in saved.items()})
    model.load_state_dict(stripped, strict=True)


def test_compiled_prefix_and_nested_wrappers(tmp_path: Path) -> None:
    saved = save_compiled(tmp_path / "c.pt")
    sd, _, used = read_state_dict(tmp_path / "c.pt")
    assert used is None and all(k.startswith("_orig_mod.") for k in saved)
    nested = {f"module.{k}": v for k, v in sd.items()}  # DDP around a compiled module
    out, prefixes = strip_prefixes(nested)
    assert prefixes == ["module.", "_orig_mod."]
    assert set(out) == set(net().state_dict())


def test_strip_prefixes_leaves_partial_prefixes_alone() -> None:
    sd = {"module.a": 1, "b": 2}
    assert strip_prefixes(sd) == (sd, [])


@pytest.mark.parametrize("key", ["model", "model_ema", "state_dict_ema", "net"])
def test_container_keys(tmp_path: Path, key: str) -> None:
    sd = net().state_dict()
    torch.save({key: sd, "epoch": 1}, tmp_path / "c.pt")
    got, _, used = read_state_dict(tmp_path / "c.pt")
    assert used == key and got.keys() == sd.keys()


def test_ema_is_chosen_only_explicitly(tmp_path: Path) -> None:
    a, b = net(0).state_dict(), net(1).state_dict()
    torch.save({"model": a, "model_ema": b}, tmp_path / "c.pt")
    got, _, used = read_state_dict(tmp_path / "c.pt")
    assert used == "model" and torch.equal(got["head.weight"], a["head.weight"])
    got, _, used = read_state_dict(tmp_path / "c.pt", key="model_ema")
    assert used == "model_ema" and torch.equal(got["head.weight"], b["head.weight"])


def test_nested_lightning_style_container() -> None:
    sd = net().state_dict()
    obj = {"checkpoint": 1, "model": {"state_dict": sd, "config": {"d": 8}}}
    got, used = extract_state_dict(obj)
    assert used == "model/state_dict" and got.keys() == sd.keys()
    got, used = extract_state_dict(obj, key="model/state_dict")
    assert used == "model/state_dict"


def test_no_state_dict_lists_top_level_keys() -> None:
    obj = {"a": {"x": torch.ones(1)}, "b": {"y": torch.ones(1)}, "epoch": 3}
    with pytest.raises(InspectError, match=r"top-level keys: a \(1 tensors\), b \(1 tensors\), epoch"):
        extract_state_dict(obj)
    with pytest.raises(InspectError, match="--key 'zzz' not found"):
        extract_state_dict(obj, key="zzz")
    got, used = extract_state_dict(obj, key="b")
    assert used == "b" and list(got) == ["y"]


def test_find_prefix_remaps_ranks_candidates() -> None:
    model_keys = [f"backbone.{k}" for k in net().state_dict()]
    ckpt_keys = [f"module.{k}" for k in net().state_dict()]
    remaps = find_prefix_remaps(model_keys, ckpt_keys)
    best = remaps[0]
    assert (best.strip, best.add) == ("module.", "backbone.")
    assert best.matched == len(model_keys) == best.total
    assert all(r.matched <= best.matched for r in remaps)
    assert find_prefix_remaps(model_keys, model_keys) == []  # nothing beats identity


# ------------------------------------------------------------------ metadata without data

def test_meta_matches_a_full_load(tmp_path: Path) -> None:
    saved = save_dataparallel(tmp_path / "dp.pt")
    meta = read_checkpoint_meta(tmp_path / "dp.pt")
    assert meta.format is CheckpointFormat.torch_zip
    assert meta.container_key == "state_dict"
    assert set(meta.extras) == {"optimizer", "scheduler", "epoch", "best_acc", "arch"}
    assert meta.extras["epoch"] == "5"
    assert list(meta.tensors) == list(saved)
    for k, t in saved.items():
        m = meta.tensors[k]
        assert m.shape == tuple(t.shape) and m.dtype == str(t.dtype).removeprefix("torch.")
        assert m.nbytes == t.numel() * t.element_size() and m.device == "cpu"


@pytest.mark.parametrize("fmt", ["legacy", "safetensors", "fp16", "bf16"])
def test_meta_other_formats_and_dtypes(tmp_path: Path, fmt: str) -> None:
    sd = net().state_dict()
    path = tmp_path / "w.bin"
    if fmt == "legacy":
        torch.save(sd, path, _use_new_zipfile_serialization=False)
    elif fmt == "safetensors":
        from safetensors.torch import save_file

        save_file(sd, path)
    else:
        dtype = torch.float16 if fmt == "fp16" else torch.bfloat16
        sd = {k: v.to(dtype) if v.is_floating_point() else v for k, v in sd.items()}
        torch.save(sd, path)
    meta = read_checkpoint_meta(path)
    assert {k: (m.shape, m.dtype) for k, m in meta.tensors.items()} == {
        k: (tuple(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in sd.items()}


def test_meta_does_not_import_torch(tmp_path: Path) -> None:
    save_dataparallel(tmp_path / "dp.pt")
    from safetensors.torch import save_file

    save_file(net().state_dict(), tmp_path / "w.safetensors")
    code = (
        "import sys; from torchinspect.io.checkpoint import read_checkpoint_meta as r;"
        f"a = r({str(tmp_path / 'dp.pt')!r}); b = r({str(tmp_path / 'w.safetensors')!r});"
        "print(len(a.tensors), len(b.tensors), 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    n = len(net().state_dict())
    assert out.stdout.split() == [str(n), str(n), "False"]


def test_tied_weights_share_storage_in_meta(tmp_path: Path) -> None:
    torch.save(TiedLM().state_dict(), tmp_path / "t.pt")
    meta = read_checkpoint_meta(tmp_path / "t.pt")
    assert meta.tensors["tok.weight"].storage == meta.tensors["lm_head.weight"].storage
    assert meta.tensors["tok.weight"].storage != meta.tensors["proj.weight"].storage


# ------------------------------------------------------------------ GPU-saved checkpoints

def test_simulated_gpu_checkpoint_loads_on_cpu_and_reports_device(tmp_path: Path) -> None:
    sd = net().state_dict()
    save_simulated_gpu(tmp_path / "g.pt", {"model": sd, "epoch": 2})
    meta = read_checkpoint_meta(tmp_path / "g.pt")
    assert meta.devices == ["cuda:0"] and meta.container_key == "model"
    got, _, _ = read_state_dict(tmp_path / "g.pt")
    _assert_same(got, sd)
    assert all(t.device.type == "cpu" for t in got.values())


def test_meta_fallback_path_records_devices(tmp_path: Path) -> None:
    """Legacy files go through torch.load with a recording map_location."""
    import torch.serialization as ser

    original = ser.location_tag
    ser.location_tag = lambda storage: "cuda:1"
    try:
        torch.save(net().state_dict(), tmp_path / "g.pt", _use_new_zipfile_serialization=False)
    finally:
        ser.location_tag = original
    assert read_checkpoint_meta(tmp_path / "g.pt").devices == ["cuda:1"]


_GPU_FILE = DATA_DIR / "gpu_saved_state_dict.pt"
_GPU_CONTAINER = DATA_DIR / "gpu_saved_container.pt"
_GPU_REF = DATA_DIR / "gpu_saved_reference.pt"


@pytest.mark.skipif(not _GPU_FILE.exists(),
                    reason="tests/data/gpu_saved_state_dict.pt not made yet: run "
                    "tests/data/make_gpu_checkpoint.py on a CUDA machine and commit its outputs")
def test_real_gpu_saved_checkpoint_loads_on_cpu() -> None:
    meta = read_checkpoint_meta(_GPU_FILE)
    assert meta.devices == ["cuda:0"]
    got, _, _ = read_state_dict(_GPU_FILE)
    ref, _, _ = read_state_dict(_GPU_REF)
    _assert_same(got, ref)
    sd, ckpt, used = read_state_dict(_GPU_CONTAINER)
    assert used == "model" and "epoch" in ckpt.obj
    _assert_same(strip_prefixes(sd)[0], ref)
