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


# ------------------------------------------------------------------ outputs: never lose data
# (issue 20: items 2, 3, 7, 10, 14)

_SRC_ROOT = Path(__file__).resolve().parents[1] / "src"


def _dcp_values(folder: Path, like: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    import torch.distributed.checkpoint as dcp

    target = {k: torch.zeros_like(v) for k, v in like.items()}
    dcp.load(target, checkpoint_id=str(folder), no_dist=True)
    return target


def _temps(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp")]


def test_force_never_deletes_an_input_inside_the_output_folder(tmp_path: Path, invoke) -> None:
    folder = tmp_path / "out.dcp"
    folder.mkdir()
    sd = save_plain(folder / "in.pt")
    (folder / "notes.txt").write_text("mine")
    for out in (folder, f"{folder}/"):  # NAME.dcp, or any NAME/ with its slash
        result = invoke("convert", folder / "in.pt", out, "--force")
        assert result.exit_code == 2 and "holds the input" in result.output, result.output
    assert (folder / "notes.txt").read_text() == "mine"
    _assert_equal(_load(folder / "in.pt"), sd)
    # a folder that is not this tool's DCP output is refused by name, even with --force
    other = tmp_path / "other.dcp"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    result = invoke("convert", folder / "in.pt", other, "--force")
    assert result.exit_code == 2 and "not a DCP checkpoint written by inspect convert" in result.output
    assert "'notes.txt'" in result.output and (other / "notes.txt").read_text() == "mine"
    # our own output is replaced
    assert invoke("convert", folder / "in.pt", tmp_path / "ours.dcp").exit_code == 0
    save_plain(tmp_path / "b.pt", net(seed=1))
    assert invoke("convert", tmp_path / "b.pt", tmp_path / "ours.dcp", "--force").exit_code == 0
    _assert_equal(_dcp_values(tmp_path / "ours.dcp", sd), net(seed=1).state_dict())


_KILL_SCRIPT = """
import os, signal, sys
from pathlib import Path
import torchinspect.checkpoints.write as W
import torchinspect.checkpoints.verify as V
import torchinspect.io.atomic as A

point = sys.argv[3]

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def wrap(module, name, before):
    real = getattr(module, name)
    def patched(*a, **kw):
        if before:
            die()
        out = real(*a, **kw)
        die()
        return out
    setattr(module, name, patched)

if point == "writing":  # inside dcp.save, after the first tensor was read
    real_chunks = W.Entry.chunks
    def chunks(self, *a, **kw):
        yield from real_chunks(self, *a, **kw)
        die()
    W.Entry.chunks = chunks
elif point == "verifying":
    wrap(V, "_verify_dcp", True)
elif point == "before-swap":
    wrap(A, "exchange", True)
elif point == "after-swap":
    wrap(A, "exchange", False)
from torchinspect.checkpoints import convert_checkpoint
convert_checkpoint(sys.argv[1], sys.argv[2], force=True)
"""


@pytest.mark.parametrize("point", ["writing", "verifying", "before-swap", "after-swap"])
def test_a_killed_dcp_replace_leaves_old_or_new_and_the_next_run_cleans_up(
        tmp_path: Path, point: str) -> None:
    import os
    import sys

    old, new = net(seed=0).state_dict(), net(seed=1).state_dict()
    torch.save(old, tmp_path / "old.pt")
    torch.save(new, tmp_path / "new.pt")
    out = tmp_path / "out.dcp"
    convert_checkpoint(tmp_path / "old.pt", out)
    env = {**os.environ, "PYTHONPATH": f"{_SRC_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-c", _KILL_SCRIPT, str(tmp_path / "new.pt"), str(out),
                           point], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr  # killed at the chosen point
    got = _dcp_values(out, old)  # a whole checkpoint is there: the old one or the new one
    expected = new if point == "after-swap" else old
    _assert_equal(got, expected)
    assert _temps(tmp_path), "the killed run left its temporary folder"
    # the next run (a new process) works with --force (no fixed .NAME.old in the way) and
    # removes the dead run's temporary folder
    proc = subprocess.run([sys.executable, "-m", "torchinspect", "convert", str(tmp_path / "new.pt"),
                           str(out), "--force"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "wrote" in proc.stdout, proc.stderr
    assert not _temps(tmp_path)
    _assert_equal(_dcp_values(out, new), new)


def _short_record(path: Path, sd: dict[str, torch.Tensor]) -> None:
    """A torch.save zip whose first storage record holds 16 bytes while the pickle claims
    the whole tensor (the next record's bytes follow it in the file)."""
    torch.save(sd, path)
    with zipfile.ZipFile(path) as zf:
        members = [(i, zf.read(i)) for i in zf.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for info, data in members:
            if info.filename.endswith("/data/0"):
                data = data[:16]
            zf.writestr(info.filename, data)


def test_a_record_shorter_than_its_tensor_is_not_verified_bit_exact(tmp_path: Path, invoke) -> None:
    src = tmp_path / "short.pt"
    _short_record(src, {"w": torch.arange(64, dtype=torch.float32),
                        "b": torch.full((64,), 7.0)})
    with pytest.raises(Exception):  # noqa: B017 - torch's own reader refuses the file
        torch.load(src, weights_only=True)
    for out in ("o.pt", "o.safetensors", "o.dcp"):
        result = invoke("convert", src, tmp_path / out)
        assert result.exit_code == 2, result.output
        assert "verified" not in result.output and "Traceback" not in result.output
        assert "short.pt" in result.output and not (tmp_path / out).exists()
    assert not _temps(tmp_path)


def test_verification_does_not_trust_the_converters_own_reader(tmp_path: Path, monkeypatch) -> None:
    """A reader bug that hands the writer wrong bytes is caught: the check re-reads IN and
    OUT with torch's and safetensors' own loaders."""
    from torchinspect.checkpoints import plan as plan_mod

    sd = save_plain(tmp_path / "a.pt")
    real = plan_mod.Entry.chunks

    def off_by_one(self, files, overflow=None):
        for chunk in real(self, files, overflow):
            data = bytearray(chunk)
            if self.name == "head.bias" and data:
                data[0] ^= 1
            yield bytes(data)

    monkeypatch.setattr(plan_mod.Entry, "chunks", off_by_one)
    for out in ("o.pt", "o.safetensors"):
        with pytest.raises(InspectError, match="'head.bias' differs after reload"):
            convert_checkpoint(tmp_path / "a.pt", tmp_path / out)
        assert not (tmp_path / out).exists()
    assert "head.bias" in sd


def test_two_converts_to_one_out_the_second_fails(tmp_path: Path, monkeypatch) -> None:
    """Run A writes; while it verifies, run B (another process) converts to the same OUT and
    finishes first. A must not replace B's file and say "wrote"."""
    import os
    import sys

    from torchinspect.checkpoints import convert as convert_mod

    save_plain(tmp_path / "a.pt", net(seed=0))
    save_plain(tmp_path / "b.pt", net(seed=1))
    env = {**os.environ, "PYTHONPATH": f"{_SRC_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    real_verify = convert_mod.verify
    for out in ("o.pt", "o.dcp"):
        def verify_after_the_other_run(plan, files, out=out):
            proc = subprocess.run([sys.executable, "-m", "torchinspect", "convert",
                                   str(tmp_path / "b.pt"), str(tmp_path / out)],
                                  env=env, capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0 and "wrote" in proc.stdout, proc.stderr
            real_verify(plan, files)

        monkeypatch.setattr(convert_mod, "verify", verify_after_the_other_run)
        with pytest.raises(InspectError, match="created by another run"):
            convert_checkpoint(tmp_path / "a.pt", tmp_path / out)
        if out == "o.pt":  # B's result is intact
            _assert_equal(_load(tmp_path / out), net(seed=1).state_dict())
        else:
            _assert_equal(_dcp_values(tmp_path / out, net(seed=1).state_dict()),
                          net(seed=1).state_dict())
    assert not _temps(tmp_path)


def test_replacing_keeps_the_mode_new_files_follow_the_umask(tmp_path: Path) -> None:
    import os
    import stat

    save_plain(tmp_path / "a.pt")
    out = tmp_path / "o.safetensors"
    convert_checkpoint(tmp_path / "a.pt", out)
    out.chmod(0o600)
    convert_checkpoint(tmp_path / "a.pt", out, force=True)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    old = os.umask(0o027)
    try:
        convert_checkpoint(tmp_path / "a.pt", tmp_path / "new.pt")
        convert_checkpoint(tmp_path / "a.pt", tmp_path / "new.dcp")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.pt").stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "new.dcp").stat().st_mode) == 0o750


def test_key_names_with_terminal_escapes_are_shown_escaped(tmp_path: Path, invoke) -> None:
    torch.save({"evil\x1b[2Jkey": torch.ones(2)}, tmp_path / "e.pt")
    for fmt in ("table", "markdown"):
        result = invoke("convert", tmp_path / "e.pt", tmp_path / f"o\x1b[31m-{fmt}.pt",
                        "--rename", "evil=good", "-f", fmt)
        assert result.exit_code == 0, result.output
        assert "\x1b" not in result.output
        assert "good\\x1b[2Jkey" in result.output and "wrote" in result.output


def test_ctrl_c_during_a_dcp_convert_is_exit_130_without_output(tmp_path: Path) -> None:
    import os
    import signal
    import sys
    import time

    sd = save_plain(tmp_path / "a.pt")
    convert_checkpoint(tmp_path / "a.pt", tmp_path / "out.dcp")
    ready = tmp_path / "ready"
    script = f"""
import sys, time
from pathlib import Path
import torchinspect.checkpoints.plan as P
real = P.Entry.chunks
def slow(self, *a, **kw):
    Path({str(ready)!r}).touch()
    time.sleep(60)
    yield from real(self, *a, **kw)
P.Entry.chunks = slow
from torchinspect.cli.app import main
sys.argv = ["inspect", "convert", {str(tmp_path / "a.pt")!r}, {str(tmp_path / "out.dcp")!r}, "--force"]
main()
"""
    env = {**os.environ, "PYTHONPATH": f"{_SRC_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not ready.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert ready.exists(), proc.communicate()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err and "CheckpointException" not in err
    assert not _temps(tmp_path)
    _assert_equal(_dcp_values(tmp_path / "out.dcp", sd), sd)  # the old output is untouched


def _tmpfs(path: Path, size: str) -> bool:
    path.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


@pytest.mark.parametrize("out", ["o.dcp", "o.pt", "o.safetensors", "o-sharded.safetensors"])
def test_a_full_disk_is_one_line_naming_the_file(tmp_path: Path, invoke, out: str) -> None:
    disk = tmp_path / "disk"
    if not _tmpfs(disk, "1m"):
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        g = torch.Generator().manual_seed(0)
        torch.save({f"w{i}": torch.randn(256, 256, generator=g) for i in range(8)},
                   tmp_path / "big.pt")  # 2 MiB of tensors onto a 1 MiB disk
        extra = ["--shard-size", "300KB"] if "sharded" in out else []
        result = invoke("convert", tmp_path / "big.pt", disk / out, *extra)
        assert result.exit_code == 2, result.output
        lines = [ln for ln in result.output.splitlines() if ln.strip()]
        assert lines[0].startswith(f"error: {disk}") and "no space left" in lines[0], result.output
        assert "Traceback" not in result.output and len(lines) == 2  # error + hint
        assert list(disk.iterdir()) == []  # nothing half-written left
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_enospc_from_the_writer_names_the_file(tmp_path: Path, invoke, monkeypatch) -> None:
    """Without a tmpfs: a writer that fails with ENOSPC midway."""
    import errno

    from torchinspect.io import writers

    save_plain(tmp_path / "a.pt")

    def full(fd, data, pos):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writers.os, "pwrite", full)
    for out in ("o.safetensors", "o.pt"):
        result = invoke("convert", tmp_path / "a.pt", tmp_path / out)
        assert result.exit_code == 2 and f"{tmp_path / out}: no space left" in result.output
        assert not (tmp_path / out).exists() and not _temps(tmp_path)


def test_a_foreign_folder_that_appears_at_out_meanwhile_is_not_swapped_out(tmp_path, monkeypatch):
    from torchinspect.checkpoints import convert as convert_mod

    save_plain(tmp_path / "a.pt")
    out = tmp_path / "o.dcp"
    real_verify = convert_mod.verify

    def verify_while_someone_writes_there(plan, files):
        out.mkdir()
        (out / "mine.txt").write_text("theirs")
        real_verify(plan, files)

    monkeypatch.setattr(convert_mod, "verify", verify_while_someone_writes_there)
    with pytest.raises(InspectError, match="'mine.txt'"):
        convert_checkpoint(tmp_path / "a.pt", out, force=True)
    assert [p.name for p in out.iterdir()] == ["mine.txt"] and not _temps(tmp_path)


# ------------------------------------------------------------------ issue 21 item 4, issue 24


def test_a_prefix_every_key_shares_is_noted_where_it_is_made(tmp_path: Path, invoke) -> None:
    saved = save_dataparallel(tmp_path / "dp.pt")
    result = invoke("convert", tmp_path / "dp.pt", tmp_path / "kept.safetensors")
    assert result.exit_code == 0, result.output
    note = "note: every key starts with 'module.' (DataParallel/DDP); --auto-prefix strips it"
    assert note in result.output
    assert list(_load(tmp_path / "kept.safetensors")) == list(saved)  # kept, as asked
    data = json.loads(invoke("convert", tmp_path / "dp.pt", tmp_path / "j.pt", "-f", "json").output)
    assert data["wrapper_prefixes"] == ["module."]
    result = invoke("convert", tmp_path / "dp.pt", tmp_path / "stripped.safetensors", "--auto-prefix")
    assert result.exit_code == 0 and "note: every key" not in result.output
    net().load_state_dict(_load(tmp_path / "stripped.safetensors"), strict=True)
    # nested wrappers: DDP around torch.compile
    torch.save({f"module._orig_mod.{k}": v for k, v in net().state_dict().items()}, tmp_path / "n.pt")
    result = invoke("convert", tmp_path / "n.pt", tmp_path / "n.safetensors")
    assert ("every key starts with 'module._orig_mod.' (DataParallel/DDP/torch.compile); "
            "--auto-prefix strips them") in result.output
    save_plain(tmp_path / "plain.pt")
    assert "note: every key" not in invoke("convert", tmp_path / "plain.pt", tmp_path / "p.pt").output
    # with --arch the refusal names the remap that would make it load
    result = invoke("convert", tmp_path / "dp.pt", tmp_path / "a.pt", "--arch", f"{HELPERS}:Net")
    assert result.exit_code == 1
    assert f"pass --auto-prefix (strip prefix 'module.' (DataParallel/DDP) matches {len(saved)} of " \
        in result.output


def test_out_can_be_given_with_dash_o(tmp_path: Path, invoke) -> None:
    sd = save_plain(tmp_path / "in.pth")
    out = tmp_path / "out.safetensors"
    result = invoke("convert", tmp_path / "in.pth", "-o", out)
    assert result.exit_code == 0, result.output
    _assert_equal(_load(out), sd)
    result = invoke("convert", tmp_path / "in.pth", "--output", f"{tmp_path / 'run'}/")  # slash kept: DCP
    assert result.exit_code == 0 and (tmp_path / "run" / ".metadata").is_file(), result.output
    result = invoke("convert", tmp_path / "in.pth", tmp_path / "a.pt", "-o", tmp_path / "b.pt")
    assert result.exit_code == 2 and "OUT given twice" in result.output
    assert not (tmp_path / "a.pt").exists() and not (tmp_path / "b.pt").exists()
    result = invoke("convert", tmp_path / "in.pth")
    assert result.exit_code == 2 and "missing the converted checkpoint OUT" in result.output
    assert "the converted checkpoint" in invoke("convert", "--help").output


def test_dash_f_without_a_value_asks_about_force(tmp_path: Path, invoke) -> None:
    save_plain(tmp_path / "a.pt")
    result = invoke("convert", tmp_path / "a.pt", tmp_path / "o.pt", "-f")
    assert result.exit_code == 2
    assert "-f is --format; did you mean --force?" in result.output
    assert "see `inspect convert --help`" in result.output
    assert not (tmp_path / "o.pt").exists()
    result = invoke("diff", tmp_path / "a.pt", tmp_path / "a.pt", "-f")  # diff has no --force
    assert result.exit_code == 2 and "did you mean --force" not in result.output


def test_all_lists_every_renamed_key(tmp_path: Path, invoke) -> None:
    saved = save_dataparallel(tmp_path / "dp.pt")
    args = ("convert", tmp_path / "dp.pt", tmp_path / "o.pt", "--auto-prefix")
    short = invoke(*args).output
    assert "--all lists every one" in short
    last = list(saved)[-1]  # module.head.bias: past the first 8 groups
    line = f"{last} -> {last.removeprefix('module.')}"
    assert line not in short
    full = invoke(*args, "--all", "--force").output
    assert line in full and "more groups" not in full
    shown = [ln for ln in full.splitlines() if ln.startswith("module.") and " -> " in ln]
    from torchinspect.io.keys import group_keys

    assert len(shown) == len(group_keys(saved))  # one line per layer pattern, none left out
    data = json.loads(invoke(*args, "--force", "-f", "json").output)
    assert len(data["renamed"]) == len(saved)  # JSON is always complete
