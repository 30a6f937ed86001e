"""Hostile zip archives (issue 20: items 1, 7, 8, 15): refused before anything reads them.

Every archive here is built by the test (tests/zip_forge.py). A payload would create a marker
file if any reader unpickled it without the weights-only restriction; each test asserts the
marker is never created and the command exits 2 with one ``error:`` line.
"""

from __future__ import annotations

import io
import struct
import tracemalloc
import warnings
import zipfile
from pathlib import Path

import pytest
import torch

from test_checkpoint_helpers import payloads, save_plain
from torchinspect.errors import InspectError
from torchinspect.io.checkpoint import read_checkpoint, read_checkpoint_meta
from torchinspect.io.zipcheck import EXPAND_FLOOR, open_zip
from zip_forge import Member, bomb_stream, build_zip, deflated, torch_members, with_member

ORDERS = ["malicious_first", "harmless_first"]


def _one_error(result, *needles: str) -> None:
    out = result.output
    assert result.exit_code == 2, out
    assert "Traceback" not in out
    assert len([ln for ln in out.splitlines() if ln.startswith("error:")]) == 1, out
    for n in needles:
        assert n in out, out


# ------------------------------------------------------------------ item 1: .pt2 duplicates


class _Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


@pytest.fixture(scope="module")
def pt2_members(tmp_path_factory: pytest.TempPathFactory) -> list[Member]:
    path = tmp_path_factory.mktemp("pt2") / "tiny.pt2"
    torch.export.save(torch.export.export(_Tiny(), (torch.randn(1, 2),)), path)
    with zipfile.ZipFile(path) as zf:
        return [Member(i.filename, zf.read(i)) for i in zf.infolist()]


def _evil_pickle(marker: Path) -> bytes:
    buf = io.BytesIO()
    torch.save(payloads(marker)["exec"], buf)  # weights-only refuses it: torch.export retries unrestricted
    return buf.getvalue()


def _pt2_with_duplicate(members: list[Member], evil: bytes, order: str) -> bytes:
    """Two ``sample_inputs/model.pt`` members: one at its place, one at the end of the archive
    (the layout where torch's miniz reads the first and Python's zipfile the last)."""
    i = next(k for k, m in enumerate(members) if m.name.endswith("sample_inputs/model.pt"))
    harmless = members[i]
    first, last = (Member(harmless.name, evil), harmless) if order == "malicious_first" \
        else (harmless, Member(harmless.name, evil))
    return build_zip(members[:i] + [first] + members[i + 1:] + [last])


@pytest.mark.parametrize("order", ORDERS)
def test_pt2_with_a_duplicated_member_is_refused_and_never_runs(tmp_path: Path, invoke, pt2_members,
                                                                order: str) -> None:
    marker = tmp_path / "PWNED"
    evil = tmp_path / "evil.pt2"
    evil.write_bytes(_pt2_with_duplicate(pt2_members, _evil_pickle(marker), order))
    for args in (["summary", evil], ["params", evil], ["diff", evil, evil]):
        result = invoke(*args)
        assert not marker.exists(), f"payload ran via {args[0]} ({order})"
        _one_error(result, "two members are named", "model.pt")
        assert "--trust-pickle" not in result.output


def test_pt2_duplicate_refused_in_a_separate_process(tmp_path: Path, pt2_members) -> None:
    """The same through the installed entry point (no CliRunner): exit 2, no marker."""
    import os
    import subprocess
    import sys

    marker = tmp_path / "PWNED"
    evil = tmp_path / "evil.pt2"
    evil.write_bytes(_pt2_with_duplicate(pt2_members, _evil_pickle(marker), "malicious_first"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-m", "torchinspect", "summary", str(evil)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert not marker.exists()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "two members are named" in proc.stderr


def test_pt2_duplicate_in_another_case_is_refused(tmp_path: Path, pt2_members) -> None:
    """miniz looks names up case-insensitively: ``MODEL.PT`` is the same member to torch."""
    from torchinspect.sources.pt2 import check_pt2

    i = next(k for k, m in enumerate(pt2_members) if m.name.endswith("sample_inputs/model.pt"))
    upper = Member(pt2_members[i].name.replace("model.pt", "MODEL.PT"), b"x")
    path = tmp_path / "case.pt2"
    path.write_bytes(build_zip(pt2_members + [upper]))
    with pytest.raises(InspectError, match="two members are named"):
        check_pt2(str(path), trust_pickle=False)


# ------------------------------------------------------------------ item 1: torch zip duplicates


def _sd() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return {"w": torch.randn(4, 4), "b": torch.randn(4)}


def _evil_data_pkl(marker: Path) -> Member:
    members = torch_members({"w": torch.zeros(2), "evil": payloads(marker)["os_system"]})
    return next(m for m in members if m.name.endswith("data.pkl"))


@pytest.mark.parametrize("order", ORDERS)
def test_torch_zip_with_two_data_pkl_is_refused(tmp_path: Path, invoke, order: str) -> None:
    marker = tmp_path / "PWNED"
    path = tmp_path / "dup.pt"
    members = with_member(torch_members(_sd()), "data.pkl", _evil_data_pkl(marker),
                          before=order == "malicious_first")
    path.write_bytes(build_zip(members))
    good = tmp_path / "good.pt"
    torch.save(_sd(), good)
    for args in (["diff", good, path], ["convert", path, tmp_path / "out.safetensors"],
                 ["summary", path], ["params", "resnet18", "--weights", path]):
        result = invoke(*args)
        assert not marker.exists(), f"payload ran via {args[0]}"
        _one_error(result, "two members are named", "data.pkl")
    assert not (tmp_path / "out.safetensors").exists()
    for read in (read_checkpoint, read_checkpoint_meta):
        with pytest.raises(InspectError, match="two members"):
            read(path)
    assert not marker.exists()


@pytest.mark.parametrize("order", ["harmless_first", "malicious_first"])
def test_features_tensor_input_with_two_data_pkl_is_refused(tmp_path: Path, invoke,
                                                           order: str) -> None:
    """A .pt tensor INPUT of `features` goes through the same checked torch.load."""
    marker = tmp_path / "PWNED"
    path = tmp_path / "x.pt"
    members = with_member(torch_members(torch.zeros(1, 28, 28)), "data.pkl",
                          _evil_data_pkl(marker), before=order == "malicious_first")
    path.write_bytes(build_zip(members))
    result = invoke("features", "zoo:convnet", path, "-l", "fc", "-o", tmp_path / "out")
    assert not marker.exists(), "payload ran via a features input"
    assert result.exit_code == 2, result.output
    assert "two members are named" in result.output


def test_duplicate_storage_record_is_refused(tmp_path: Path) -> None:
    """Two ``data/0`` records: the reader would stream one, torch.load map the other."""
    members = torch_members(_sd())
    rec = next(m for m in members if m.name.endswith("data/0"))
    path = tmp_path / "dup_record.pt"
    path.write_bytes(build_zip(with_member(members, "data/0", Member(rec.name, b"\0" * len(rec.data)),
                                           before=False)))
    with pytest.raises(InspectError, match="two members are named"):
        read_checkpoint_meta(path)


def _lying(tmp_path: Path, how: str) -> Path:
    members = torch_members(_sd())
    i = next(k for k, m in enumerate(members) if m.name.endswith("data.pkl"))
    m = members[i]
    if how == "local_name":
        members[i] = Member(m.name, m.data, local_name=m.name.replace("data.pkl", "data.pkX"))
    elif how == "local_sizes":
        members[i] = Member(m.name, m.data, local_sizes=(len(m.data) - 4, len(m.data) - 4))
    elif how == "stored_sizes":
        members[i] = Member(m.name, m.data, file_size=len(m.data) + 100)
    elif how == "crc":  # central directory and local header agree, the bytes do not
        members[i] = Member(m.name, m.data, crc=0x12345678)
    blob = build_zip(members, prepend=b"PK\x03\x04" + b"\0" * 60 if how == "prepended" else b"",
                     comment=b"PK\x05\x06" + b"\0" * 20 if how == "comment_eocd" else b"")
    path = tmp_path / f"{how}.pt"
    path.write_bytes(blob)
    return path


LIES = {"local_name": "local header names", "local_sizes": "sizes differ",
        "stored_sizes": "is stored but claims", "crc": "CRC-32 does not match",
        "prepended": "does not end where", "comment_eocd": "ambiguous"}


@pytest.mark.parametrize("how", sorted(LIES))
def test_headers_that_disagree_are_refused_by_every_reader(tmp_path: Path, invoke, how: str) -> None:
    path = _lying(tmp_path, how)
    good = tmp_path / "good.pt"
    torch.save(_sd(), good)
    _one_error(invoke("diff", good, path), LIES[how])
    _one_error(invoke("convert", path, tmp_path / "o.safetensors"), LIES[how])
    for read in (read_checkpoint, read_checkpoint_meta):
        with pytest.raises(InspectError, match=LIES[how]):
            read(path)


def test_a_real_checkpoint_and_pt2_pass_the_check(tmp_path: Path, pt2_members) -> None:
    good = tmp_path / "good.pt"
    save_plain(good)
    assert open_zip(good).torch_prefix == "good/"
    pt2 = tmp_path / "m.pt2"
    pt2.write_bytes(build_zip(pt2_members))
    from torchinspect.sources.pt2 import check_pt2

    check_pt2(str(pt2), trust_pickle=False)  # harmless: no error


# ------------------------------------------------------------------ item 7: sizes and views


def _forged_storage(tmp_path: Path, how: str) -> Path:
    """``w`` claims 64 float32 elements while its record holds 16 bytes, or sits at offset 10**9."""
    members = torch_members({"w": torch.arange(4.0), "b": torch.ones(2)})
    i = next(k for k, m in enumerate(members) if m.name.endswith("data.pkl"))
    pkl = members[i].data
    if how == "numel":  # persistent id ('storage', FloatStorage, '0', 'cpu', 4): numel 4 -> 64
        at = pkl.index(b"X\x03\x00\x00\x00cpuq")
        j = pkl.index(b"K\x04", at)
        pkl = pkl[:j] + b"K\x40" + pkl[j + 2:]
    else:  # the storage offset argument of _rebuild_tensor_v2: K\x00 -> J 10**9
        j = pkl.index(b"K\x00K\x04\x85")
        pkl = pkl[:j] + b"J" + struct.pack("<i", 10 ** 9) + pkl[j + 2:]
    members[i] = Member(members[i].name, pkl)
    path = tmp_path / f"{how}.pt"
    path.write_bytes(build_zip(members))
    return path


@pytest.mark.parametrize("how", ["numel", "offset"])
def test_storage_sizes_and_views_are_checked(tmp_path: Path, invoke, how: str) -> None:
    path = _forged_storage(tmp_path, how)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception):  # noqa: B017,PT011 - torch.load refuses it too
            torch.load(path, weights_only=True, map_location="cpu")
    needle = "holds 16 bytes, its tensors say 256" if how == "numel" else "reaches past the end"
    good = tmp_path / "good.pt"
    torch.save({"w": torch.arange(4.0), "b": torch.ones(2)}, good)
    _one_error(invoke("diff", good, path), needle)
    _one_error(invoke("convert", path, tmp_path / "o.safetensors"), needle)
    _one_error(invoke("summary", path, "--arch", "resnet18"), needle)
    assert not (tmp_path / "o.safetensors").exists()


# ------------------------------------------------------------------ item 8: compression bombs


def _bomb(tmp_path: Path, declared: str) -> Path:
    """data.pkl deflated: the real pickle then 256 MiB of zeros (about 260 KB compressed).
    ``declared="honest"`` says 256 MiB in the headers, ``"lie"`` says 1 MiB."""
    members = torch_members(_sd())
    i = next(k for k, m in enumerate(members) if m.name.endswith("data.pkl"))
    pkl = members[i].data
    stream = bomb_stream(pkl, 256)
    size = len(pkl) + (256 << 20) if declared == "honest" else len(pkl) + (1 << 20)
    members[i] = Member(members[i].name, stream, 8, size, crc=0)
    path = tmp_path / f"bomb_{declared}.pt"
    path.write_bytes(build_zip(members))
    assert path.stat().st_size < 1 << 20
    return path


@pytest.mark.parametrize("declared", ["honest", "lie"])
def test_compression_bomb_is_refused_with_bounded_memory(tmp_path: Path, invoke, declared: str) -> None:
    path = _bomb(tmp_path, declared)
    needle = "compression bomb"
    tracemalloc.start()
    try:
        with pytest.raises(InspectError, match=needle) as err:
            read_checkpoint_meta(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * EXPAND_FLOOR, f"{peak:,} bytes allocated"  # never the 256 MiB
    assert "--trust-pickle" not in err.value.message + (err.value.hint or "")
    good = tmp_path / "good.pt"
    torch.save(_sd(), good)
    for args in (["diff", good, path], ["summary", path, "--arch", "resnet18"],
                 ["convert", path, tmp_path / "o.pt"]):
        result = invoke(*args)
        _one_error(result, needle)
        assert "--trust-pickle" not in result.output


def test_deflated_checkpoint_within_limits_is_read(tmp_path: Path) -> None:
    """A re-zipped (deflated) checkpoint is still a checkpoint: read, CRC checked."""
    members = [deflated(m.name, m.data) if m.name.endswith("data.pkl") else m
               for m in torch_members(_sd())]
    path = tmp_path / "deflated.pt"
    path.write_bytes(build_zip(members))
    meta = read_checkpoint_meta(path)
    assert {k: t.shape for k, t in meta.tensors.items()} == {"w": (4, 4), "b": (4,)}
    loaded = read_checkpoint(path).obj
    assert torch.equal(loaded["w"], _sd()["w"])


def test_pt2_sample_inputs_zip_is_validated_too(tmp_path: Path, pt2_members) -> None:
    """The sample inputs are a torch.save zip inside the archive: a compression bomb (or a
    duplicated member) there is refused before torch.load sees those bytes."""
    from torchinspect.sources.pt2 import check_pt2

    inner = torch_members(((torch.randn(1, 2),), {}))
    k = next(j for j, m in enumerate(inner) if m.name.endswith("data.pkl"))
    inner[k] = Member(inner[k].name, bomb_stream(inner[k].data, 64), 8, len(inner[k].data) + (64 << 20), crc=0)
    members = [Member(m.name, build_zip(inner)) if m.name.endswith("sample_inputs/model.pt") else m
               for m in pt2_members]
    path = tmp_path / "nested.pt2"
    path.write_bytes(build_zip(members))
    with pytest.raises(InspectError, match="sample_inputs/model.pt: invalid zip archive.*compression bomb"):
        check_pt2(str(path), trust_pickle=False)


def test_damaged_members_lists_records_whose_bytes_changed(tmp_path: Path) -> None:
    """The streaming CRC pass a copier (convert) can run: a flipped data byte is named."""
    members = torch_members(_sd())
    path = tmp_path / "ok.pt"
    path.write_bytes(build_zip(members))
    assert open_zip(path).damaged_members() == []
    k = next(j for j, m in enumerate(members) if m.name.endswith("data/0"))
    flipped = bytes([members[k].data[0] ^ 1]) + members[k].data[1:]
    import zlib

    members[k] = Member(members[k].name, flipped, crc=zlib.crc32(members[k].data))
    path.write_bytes(build_zip(members))
    assert open_zip(path).damaged_members() == [members[k].name]


def test_a_broken_archive_is_called_damaged_not_an_attack(tmp_path: Path, invoke) -> None:
    import zipfile

    path = tmp_path / "bad.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", b"x" * 100)
    data = bytearray(path.read_bytes())
    data[-10:-8] = b"\xff\xff"  # the end record's central directory size
    path.write_bytes(bytes(data))
    r = invoke("params", path)
    assert r.exit_code == 2 and "invalid zip archive" in r.stderr
    assert "hint: the file is damaged or not a well-formed zip archive" in r.stderr
    assert "fool" not in r.stderr
