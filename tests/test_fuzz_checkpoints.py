"""Property-based fuzzing of the readers of untrusted bytes (issue 12).

Real checkpoints (torch.save zip and legacy, safetensors) are mutated — truncated, bytes
flipped, safetensors header length/offsets forged, zip records corrupted, legacy storage
counts forged, zip members duplicated, zip size fields lying, data.pkl turned into a
compression bomb (issue 20) — and read with the metadata reader (the restricted zip and
legacy readers). Every outcome must be a result or a clean :class:`InspectError` (the CLI's
exit 2), never another exception; duplicated members and bombs must always be refused; on
every file the reader accepts, ``torch.load(map_location="meta", weights_only=True)`` (or
safetensors) loads too, and both agree on every key, shape and dtype: accepting a file the
real loader refuses fails the test (``diff`` would call it loadable). A small sample runs in the normal
suite; ``-m slow`` runs 10,000+ cases.
"""

from __future__ import annotations

import io
import json
import struct
import tempfile
import warnings
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchinspect.errors import InspectError
from torchinspect.io.checkpoint import read_checkpoint_meta
from zip_forge import Member, bomb_stream, build_zip

#: Mutations every reader must refuse (a later reader could see other bytes, or memory blows up).
ALWAYS_REFUSED = ("dup_member", "bomb")


def _seeds() -> dict[str, bytes]:
    torch.manual_seed(0)
    sd = {"emb.weight": torch.randn(6, 4), "head.weight": torch.randn(3, 4),
          "bn.num_batches_tracked": torch.tensor(5), "h": torch.randn(4).half()}
    sd["tied"] = sd["emb.weight"]
    out: dict[str, bytes] = {}
    buf = io.BytesIO()
    torch.save({"state_dict": sd, "epoch": 3}, buf)
    out["zip"] = buf.getvalue()
    buf = io.BytesIO()
    torch.save(sd, buf, _use_new_zipfile_serialization=False)
    out["legacy"] = buf.getvalue()
    from safetensors.torch import save

    out["safetensors"] = save({k: v.clone() for k, v in sd.items()}, metadata={"format": "pt"})
    return out


SEEDS = _seeds()


def _legacy_counts() -> list[int]:
    """Byte positions of the legacy seed's 8-byte storage element counts."""
    from torchinspect.io.torchlegacy import read_torch_legacy_structure

    path = Path(tempfile.mkdtemp(prefix="torchinspect-fuzz-seed-")) / "legacy.pt"
    path.write_bytes(SEEDS["legacy"])
    return sorted(off - 8 for off in read_torch_legacy_structure(path)[1].data_offsets.values())


LEGACY_COUNTS = _legacy_counts()
_DIR = Path(tempfile.mkdtemp(prefix="torchinspect-fuzz-"))


def _zip_seed_members() -> list[Member]:
    import zipfile

    with zipfile.ZipFile(io.BytesIO(SEEDS["zip"])) as zf:
        return [Member(i.filename, zf.read(i)) for i in zf.infolist()]


def _forged_members(draw: st.DrawFn, how: str) -> list[Member]:
    members = _zip_seed_members()
    i = draw(st.integers(0, len(members) - 1))
    m = members[i]
    if how == "dup_member":  # the same name twice, the copy before or after, other bytes or the same
        other = draw(st.one_of(st.binary(max_size=64), st.sampled_from([x.data for x in members])))
        copy = Member(m.name.upper() if draw(st.booleans()) else m.name, other)
        at = i if draw(st.booleans()) else draw(st.integers(i + 1, len(members)))
        members.insert(at, copy)
    elif how == "size_lie":
        lie = draw(st.integers(0, 2 ** 32 - 2))
        field = draw(st.sampled_from(["file_size", "local_sizes", "crc"]))
        members[i] = Member(m.name, m.data, file_size=lie if field == "file_size" else None,
                            local_sizes=(lie, lie) if field == "local_sizes" else None,
                            crc=lie if field == "crc" else None)
    else:  # bomb: data.pkl deflated and padded with zeros, size declared honestly or not
        k = next(j for j, x in enumerate(members) if x.name.endswith("data.pkl"))
        pkl = members[k].data
        mib = draw(st.integers(17, 48))
        declared = len(pkl) + (mib << 20 if draw(st.booleans()) else draw(st.integers(0, 1 << 20)))
        members[k] = Member(members[k].name, bomb_stream(pkl, mib), 8, declared, crc=0)
    return members


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, bytes, str]:
    kind = draw(st.sampled_from(sorted(SEEDS)))
    data = bytearray(SEEDS[kind])
    how = draw(st.sampled_from(["truncate", "flip", "splice", "st_header", "st_offsets", "zip_record",
                                   "legacy_count", "dup_member", "size_lie", "bomb"]))
    if how in ALWAYS_REFUSED + ("size_lie",):
        return ("zip", build_zip(_forged_members(draw, how)), how)
    if how == "truncate":
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif how == "flip":
        for _ in range(draw(st.integers(1, 8))):
            i = draw(st.integers(0, len(data) - 1))
            data[i] = draw(st.integers(0, 255))
    elif how == "splice":
        i = draw(st.integers(0, len(data)))
        data[i:i] = draw(st.binary(min_size=1, max_size=64))
    elif how == "st_header" and kind == "safetensors":
        data[:8] = struct.pack("<Q", draw(st.one_of(st.integers(0, 2 ** 64 - 1),
                                                    st.integers(0, len(data) + 16))))
    elif how == "st_offsets" and kind == "safetensors":
        (n,) = struct.unpack("<Q", bytes(data[:8]))
        header = json.loads(bytes(data[8:8 + n]))
        name = draw(st.sampled_from(sorted(k for k in header if k != "__metadata__")))
        field = draw(st.sampled_from(["data_offsets", "shape", "dtype"]))
        header[name][field] = draw(st.one_of(
            st.lists(st.integers(-5, 10 ** 6), max_size=3), st.text(max_size=6), st.integers()))
        raw = json.dumps(header).encode()
        data = bytearray(struct.pack("<Q", len(raw)) + raw + bytes(data[8 + n:]))
    elif how == "zip_record" and kind == "zip":
        sigs = [i for i in range(len(data) - 4) if data[i:i + 2] == b"PK"]
        i = draw(st.sampled_from(sigs)) + draw(st.integers(4, 40))
        if i < len(data):
            data[i] = draw(st.integers(0, 255))
    elif how == "legacy_count" and kind == "legacy":  # forge a storage record's element count
        i = draw(st.sampled_from(LEGACY_COUNTS))
        data[i:i + 8] = struct.pack("<q", draw(st.integers(-(2 ** 63), 2 ** 63 - 1)))
    return kind, bytes(data), how


def _check(case: tuple[str, bytes, str]) -> None:
    kind, data, how = case
    path = _DIR / f"case.{ 'safetensors' if kind == 'safetensors' else 'pt'}"
    path.write_bytes(data)
    try:
        meta = read_checkpoint_meta(path)
    except InspectError:
        return  # the CLI prints it as error/hint and exits 2
    assert how not in ALWAYS_REFUSED, f"{how} was accepted"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if kind == "safetensors":
                from safetensors.torch import load

                ref = load(data)
            else:
                obj = torch.load(path, map_location="meta", weights_only=True)
                from torchinspect.io.state_dict import extract_state_dict

                ref, _ = extract_state_dict(obj)
    except Exception as exc:  # noqa: BLE001 - any refusal by torch/safetensors is the finding
        # we accepted a file the real loader refuses: `diff` would say "loads" about a file
        # torch cannot load
        pytest.fail(f"{how} on {kind}: read_checkpoint_meta accepted a file that "
                    f"{'safetensors' if kind == 'safetensors' else 'torch.load'} refuses: "
                    f"{type(exc).__name__}: {str(exc)[:200]}")
    assert set(meta.tensors) == set(ref), (sorted(meta.tensors), sorted(ref))
    for k, t in meta.tensors.items():
        assert t.shape == tuple(ref[k].shape), k
        assert t.dtype == str(ref[k].dtype).removeprefix("torch."), k


_SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
                 derandomize=True)


@settings(max_examples=150, **_SETTINGS)
@given(mutated())
def test_fuzz_sample(case: tuple[str, bytes, str]) -> None:
    _check(case)


@pytest.mark.slow
@settings(max_examples=10_000, **_SETTINGS)
@given(mutated())
def test_fuzz_10k(case: tuple[str, bytes, str]) -> None:
    _check(case)


def test_unmutated_seeds_agree_with_torch() -> None:
    for kind, data in SEEDS.items():
        _check((kind, data, "none"))
        path = _DIR / f"seed.{'safetensors' if kind == 'safetensors' else 'pt'}"
        path.write_bytes(data)
        assert len(read_checkpoint_meta(path).tensors) == 5, kind


def test_zip_member_marked_compressed_is_a_clean_error(tmp_path: Path) -> None:
    """Found by the 10k run: data.pkl's central record says "deflate" over stored bytes, and
    zipfile raised zlib.error. It must be the usual exit-2 error naming the file."""
    data = bytearray(SEEDS["zip"])
    central = data.find(b"PK\x01\x02")
    assert data[central + 46:central + 46 + 16].endswith(b"data.pkl")
    data[central + 10:central + 12] = struct.pack("<H", 8)  # compression method: deflate
    path = tmp_path / "deflated.pt"
    path.write_bytes(bytes(data))
    with pytest.raises(InspectError) as err:
        read_checkpoint_meta(path)
    assert str(path) in err.value.message and err.value.hint


@pytest.mark.parametrize("legacy", [False, True])
def test_container_holding_itself_is_read(tmp_path: Path, legacy: bool) -> None:
    """Found by the 10k run: a flipped byte made the state_dict's last value a memo GET of
    the dict itself, and the tensor walk never ended (memory grew until the OOM killer)."""
    sd: dict = {"w": torch.ones(2)}
    sd["self"] = sd
    path = tmp_path / "selfref.pt"
    torch.save(sd, path, _use_new_zipfile_serialization=not legacy)
    meta = read_checkpoint_meta(path)
    assert list(meta.tensors) == ["w"] and meta.extras == {"self": "dict (2 entries)"}
