"""`inspect convert`: containers, prefixes, dtypes, tied weights, GPU->CPU, verification, safety."""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
import zlib
from pathlib import Path

import pytest
import torch

from test_checkpoint_helpers import (
    HELPERS,
    TiedLM,
    net,
    save_compiled,
    save_dataparallel,
    save_plain,
    save_simulated_gpu,
)
from torchinspect.checkpoints import convert_checkpoint
from torchinspect.errors import InspectError
from torchinspect.io.zipcrc import (
    ZipPatchError,
    crc_mismatches,
    read_central_directory,
    set_stored_crcs,
)


def _load(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(path)
    return torch.load(path, weights_only=True)  # no map_location: must already be CPU


def _assert_equal(got: dict, expected: dict) -> None:
    assert list(got) == list(expected)
    for k in expected:
        assert got[k].dtype == expected[k].dtype and torch.equal(got[k], expected[k]), k


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_dataparallel_container_to_plain_state_dict(tmp_path: Path, invoke, suffix: str) -> None:
    model = net()
    saved = save_dataparallel(tmp_path / "dp.pt", model)
    out = tmp_path / f"out{suffix}"
    result = invoke("convert", tmp_path / "dp.pt", out, "--auto-prefix", "--arch", f"{HELPERS}:Net")
    assert result.exit_code == 0, result.output
    for text in ("weights taken from", "'state_dict'", "strip prefix 'module.'",
                 "optimizer", "Dropped", f"loads into {HELPERS}:Net with strict=True", "bit-exact"):
        assert text in result.output, text
    got = _load(out)
    _assert_equal(got, {k.removeprefix("module."): v for k, v in saved.items()})
    net().load_state_dict(got, strict=True)
    if suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(out), "pt") as f:
            assert f.metadata() == {"epoch": "5", "best_acc": "0.75", "arch": "Net"}
        assert "epoch = 5" in result.output


def test_auto_prefix_without_arch_and_compiled(tmp_path: Path) -> None:
    saved = save_compiled(tmp_path / "c.pt")
    res = convert_checkpoint(tmp_path / "c.pt", tmp_path / "o.pt", auto_prefix=True)
    assert res.stripped and res.stripped[0].startswith("_orig_mod.")
    _assert_equal(_load(tmp_path / "o.pt"), {k.removeprefix("_orig_mod."): v for k, v in saved.items()})
    assert res.verified == "bit-exact"


@pytest.mark.parametrize(("flag", "dtype"), [("fp16", torch.float16), ("bf16", torch.bfloat16),
                                             ("fp32", torch.float32)])
def test_dtype_casts_floating_tensors_only(tmp_path: Path, invoke, flag: str, dtype) -> None:
    sd = net().state_dict()
    src = {k: v.double() if v.is_floating_point() and flag == "fp32" else v for k, v in sd.items()}
    torch.save(src, tmp_path / "a.pt")
    result = invoke("convert", tmp_path / "a.pt", tmp_path / "b.safetensors", "--dtype", flag)
    assert result.exit_code == 0, result.output
    assert "exact after cast" in result.output
    got = _load(tmp_path / "b.safetensors")
    for k, v in src.items():
        if v.is_floating_point():
            assert got[k].dtype == dtype and torch.equal(got[k], v.to(dtype)), k
        else:
            assert got[k].dtype == v.dtype and torch.equal(got[k], v), k  # int64 counter untouched
    n_float = sum(v.is_floating_point() for v in src.values())
    src_name = str(next(v for v in src.values() if v.is_floating_point()).dtype).removeprefix("torch.")
    assert f"{src_name}->{str(dtype).removeprefix('torch.')}" in result.output
    assert str(n_float) in result.output


def test_tied_weights_to_safetensors_and_pt(tmp_path: Path) -> None:
    m = TiedLM()
    torch.save(m.state_dict(), tmp_path / "t.pt")
    res = convert_checkpoint(tmp_path / "t.pt", tmp_path / "t.safetensors")
    assert res.tied == [["tok.weight", "lm_head.weight"]]
    got = _load(tmp_path / "t.safetensors")
    assert torch.equal(got["tok.weight"], got["lm_head.weight"])
    fresh = TiedLM()
    fresh.load_state_dict(got, strict=True)
    assert fresh.lm_head.weight is fresh.tok.weight
    res = convert_checkpoint(tmp_path / "t.pt", tmp_path / "t2.pt", dtype="fp16")
    got = _load(tmp_path / "t2.pt")  # .pt keeps the sharing
    assert got["tok.weight"].data_ptr() == got["lm_head.weight"].data_ptr()
    assert got["tok.weight"].dtype == torch.float16


def test_gpu_saved_checkpoint_becomes_cpu(tmp_path: Path, invoke) -> None:
    sd = net().state_dict()
    save_simulated_gpu(tmp_path / "g.pt", {"model": sd, "epoch": 3})
    data = json.loads(invoke("convert", tmp_path / "g.pt", tmp_path / "c.pt", "-f", "json").output)
    assert data["schema"] == "torchinspect/convert/v1"
    assert data["devices_before"] == ["cuda:0"] and data["devices_after"] == ["cpu"]
    assert data["container_key"] == "model"
    from torchinspect.io.checkpoint import read_checkpoint_meta

    assert read_checkpoint_meta(tmp_path / "c.pt").devices == ["cpu"]
    _assert_equal(_load(tmp_path / "c.pt"), sd)


def test_key_rename_strip_and_ema(tmp_path: Path, invoke) -> None:
    a, b = net(0).state_dict(), net(1).state_dict()
    torch.save({"model": a, "model_ema": {f"module.{k}": v for k, v in b.items()}}, tmp_path / "c.pt")
    result = invoke("convert", tmp_path / "c.pt", tmp_path / "o.pt", "--key", "model_ema",
                    "--strip-prefix", "module.", "--rename", r"^layers\.(\d+)\.=blocks.\1.")
    assert result.exit_code == 0, result.output
    got = _load(tmp_path / "o.pt")
    expected = {k.replace("layers.", "blocks.", 1) if k.startswith("layers.") else k: v
                for k, v in b.items()}
    _assert_equal(got, expected)
    assert "layers.{0..5}" in result.output  # renames are grouped


def test_keep_extra_keeps_the_container(tmp_path: Path) -> None:
    save_dataparallel(tmp_path / "dp.pt")
    convert_checkpoint(tmp_path / "dp.pt", tmp_path / "o.pt", keep_extra=True, dtype="fp16")
    obj = torch.load(tmp_path / "o.pt", weights_only=True)
    assert {"state_dict", "optimizer", "scheduler", "epoch"} <= set(obj)
    assert obj["epoch"] == 5
    assert all(v.dtype in (torch.float16, torch.int64) for v in obj["state_dict"].values())


def test_legacy_input_is_streamed(tmp_path: Path) -> None:
    sd = net().state_dict()
    torch.save({"state_dict": sd}, tmp_path / "l.pt", _use_new_zipfile_serialization=False)
    res = convert_checkpoint(tmp_path / "l.pt", tmp_path / "o.safetensors")
    assert res.in_format == "torch_legacy" and res.verified == "bit-exact"
    _assert_equal(_load(tmp_path / "o.safetensors"), sd)


def test_arch_mismatch_fails_and_writes_nothing(tmp_path: Path, invoke) -> None:
    save_plain(tmp_path / "a.pt", net(num_classes=5))
    out = tmp_path / "o.pt"
    result = invoke("convert", tmp_path / "a.pt", out, "--arch", f"{HELPERS}:Net")
    assert result.exit_code == 1, result.output
    assert "do not load into" in result.output and "Traceback" not in result.output
    assert not out.exists() and not list(tmp_path.glob(".o.pt.*"))


def test_existing_out_needs_force_and_in_is_never_overwritten(tmp_path: Path, invoke) -> None:
    src = tmp_path / "a.pt"
    save_plain(src)
    before = src.read_bytes()
    out = tmp_path / "o.pt"
    out.write_bytes(b"old")
    result = invoke("convert", src, out)
    assert result.exit_code == 2 and "already exists" in result.output and "--force" in result.output
    assert out.read_bytes() == b"old"
    assert invoke("convert", src, out, "--force").exit_code == 0
    _assert_equal(_load(out), _load(src))
    for args in (["convert", src, src], ["convert", src, src, "--force"]):
        result = invoke(*args)
        assert result.exit_code == 2 and "input file" in result.output
    assert src.read_bytes() == before


def test_usage_errors(tmp_path: Path, invoke) -> None:
    save_plain(tmp_path / "a.pt")
    for args, needle in ((["--dtype", "fp8"], "--dtype"), (["--rename", "x"], "REGEX=REPL"),
                         (["--rename", "(=y"], "bad regular expression")):
        result = invoke("convert", tmp_path / "a.pt", tmp_path / "o.pt", *args)
        assert result.exit_code == 2 and needle in result.output, result.output
    result = invoke("convert", tmp_path / "a.pt", tmp_path / "o.txt")
    assert result.exit_code == 2 and "unknown output format" in result.output
    with pytest.raises(InspectError, match="same key"):
        convert_checkpoint(tmp_path / "a.pt", tmp_path / "o.pt", rename=[r".*=x"])


# ------------------------------------------------------------------ .pt output is a valid zip


def _assert_valid_zip(path: Path) -> None:
    """zipfile's own check, every member's CRC recomputed, headers consistent, `unzip -t`."""
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None
        for info in zf.infolist():
            assert info.compress_type == zipfile.ZIP_STORED
            crc = 0
            with zf.open(info) as fh:  # 1 MB at a time
                while block := fh.read(1 << 20):
                    crc = zlib.crc32(block, crc)
            assert info.CRC == crc, info.filename
    assert crc_mismatches(path) == []  # local data descriptors agree with the central directory
    if shutil.which("unzip"):
        proc = subprocess.run(["unzip", "-tqq", str(path)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


def _zip_test_state_dict() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    big = torch.randn(5 * 1024 * 1024 + 17)  # 20 MB: more than one 16 MB chunk
    emb = torch.randn(64, 8)
    return {"big": big, "emb.weight": emb, "proj.bias": torch.randn(8),
            "head.weight": emb, "steps": torch.tensor([7, -1], dtype=torch.int64),
            "mask": torch.tensor([True, False, True]), "empty": torch.empty(0, 4)}


@pytest.mark.parametrize("case", ["pt", "safetensors", "pt-fp16", "legacy"])
def test_pt_output_is_a_valid_zip(tmp_path: Path, case: str) -> None:
    sd = _zip_test_state_dict()
    if case == "safetensors":
        from safetensors.torch import save_file

        src = tmp_path / "in.safetensors"
        save_file({k: v for k, v in sd.items() if k != "head.weight"}, src)  # no aliasing there
        sd = {k: v for k, v in sd.items() if k != "head.weight"}
    else:
        src = tmp_path / "in.pt"
        torch.save(sd, src, _use_new_zipfile_serialization=case != "legacy")
    dtype = torch.float16 if case == "pt-fp16" else None
    out = tmp_path / "out.pt"
    res = convert_checkpoint(src, out, dtype="fp16" if dtype else None)
    assert res.verified == ("exact after cast" if dtype else "bit-exact")
    _assert_valid_zip(out)
    got = torch.load(out, weights_only=True)
    assert sorted(got) == sorted(sd)  # safetensors stores its keys sorted
    for k, v in sd.items():
        want = v.to(dtype) if dtype and v.is_floating_point() else v
        assert got[k].dtype == want.dtype and got[k].shape == want.shape, k
        assert torch.equal(_bits(got[k]), _bits(want)), k
    if "head.weight" in sd:  # tied storages stay one record, with one valid CRC
        assert res.tied == [["emb.weight", "head.weight"]]
        assert got["emb.weight"].data_ptr() == got["head.weight"].data_ptr()
        with zipfile.ZipFile(out) as zf:
            records = [n for n in zf.namelist() if "/data/" in n and not n.endswith("serialization_id")]
        assert len(records) == len(sd) - 1


def test_zip_crc_patch_zip64_records_and_offsets(tmp_path: Path) -> None:
    """A >4 GB record and records past 4 GB (ZIP64 extra fields, 8-byte data descriptor
    sizes). The skeleton is sparse, so nothing is written or read but headers."""
    import os

    from torch.serialization import skip_data

    path = tmp_path / "big.pt"
    big = 5 * 2**30 // 4 + 3
    with skip_data():
        torch.save({"a": torch.empty(10), "big": torch.empty(big), "after": torch.empty(7)}, path)
    prefix = zipfile.ZipFile(path).namelist()[0].split("/")[0]
    want = {f"{prefix}/data/0": (0x01234567, 40), f"{prefix}/data/1": (0x89ABCDEF, big * 4),
            f"{prefix}/data/2": (0xFEDCBA98, 28)}
    fd = os.open(path, os.O_RDWR)
    try:
        entries = {e.name: e for e in read_central_directory(fd)}
        assert entries[f"{prefix}/data/2"].header_offset > 2**32  # really ZIP64
        set_stored_crcs(fd, want)
        with pytest.raises(ZipPatchError, match="bytes"):
            set_stored_crcs(fd, {f"{prefix}/data/2": (1, 27)})
        with pytest.raises(ZipPatchError, match="missing"):
            set_stored_crcs(fd, {f"{prefix}/data/9": (1, 1)})
    finally:
        os.close(fd)
    with zipfile.ZipFile(path) as zf:
        for name, (crc, size) in want.items():
            assert (zf.getinfo(name).CRC, zf.getinfo(name).file_size) == (crc, size)
    assert crc_mismatches(path) == []


def test_a_bit_flipped_torch_zip_is_refused_not_converted(tmp_path, invoke):
    """torch.load never checks the zip CRC-32s: convert does, before writing anything."""
    src = tmp_path / "ok.pth"
    torch.save({"w": torch.arange(1000, dtype=torch.float32)}, src)
    data = bytearray(src.read_bytes())
    with zipfile.ZipFile(src) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith("/data/0"))
    data[info.header_offset + 30 + len(info.filename) + len(info.extra) + 100] ^= 0x01
    bad = tmp_path / "flip.pth"
    bad.write_bytes(bytes(data))
    assert torch.load(bad, weights_only=True)["w"].shape == (1000,)  # torch reads it silently
    r = invoke("convert", bad, tmp_path / "out.safetensors")
    assert r.exit_code == 2 and "damaged: Bad CRC-32" in r.output and "hint:" in r.output
    assert not (tmp_path / "out.safetensors").exists()
    assert invoke("convert", src, tmp_path / "ok.safetensors").exit_code == 0


def test_key_changes_may_not_leave_an_empty_key(tmp_path, invoke):
    src = tmp_path / "m.pth"
    torch.save({"module.w": torch.zeros(2)}, src)
    r = invoke("convert", src, tmp_path / "o.safetensors", "--strip-prefix", "module.w")
    assert r.exit_code == 2 and "with an empty key" in r.output
    assert not (tmp_path / "o.safetensors").exists()
