"""Malicious and corrupt files: exit 2, one line, no traceback, and no code from the file runs."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch

from test_checkpoint_helpers import net, payloads, save_plain, write_payload
from torchinspect.errors import InspectError, UnsafeCheckpointError
from torchinspect.io.checkpoint import read_checkpoint, read_checkpoint_meta

PAYLOADS = ["os_system", "eval", "exec", "nested_pickle_loads"]
# the global each payload needs (posix.system on Linux; __builtin__.eval in protocol 2)
EXPECTED_GLOBAL = {"os_system": ".system", "eval": ".eval", "exec": ".exec",
                   "nested_pickle_loads": ".loads"}


def _assert_clean_failure(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    out = result.output
    assert "Traceback" not in out
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out
    for n in needles:
        assert n in out, out


@pytest.mark.parametrize("how", ["zip", "legacy", "pickle"])
@pytest.mark.parametrize("payload", PAYLOADS)
def test_malicious_pickles_are_refused_and_never_run(tmp_path: Path, invoke, payload: str, how: str) -> None:
    marker = tmp_path / "PWNED"
    evil = tmp_path / "evil.pt"
    write_payload(evil, payloads(marker)[payload], how)
    good = tmp_path / "good.pt"
    save_plain(good)
    for args in (["diff", good, evil], ["convert", evil, tmp_path / "out.pt"],
                 ["diff", good, evil, "--values"]):
        result = invoke(*args)
        _assert_clean_failure(result, "--trust-pickle", EXPECTED_GLOBAL[payload])
        assert not marker.exists(), f"payload ran via {args[0]}"
    assert not (tmp_path / "out.pt").exists()
    if how == "pickle":  # pickle.dump: torch.load can never read it; said up front, globals named
        for read in (read_checkpoint, read_checkpoint_meta):
            with pytest.raises(InspectError, match="plain Python pickle") as perr:
                read(evil)
            assert EXPECTED_GLOBAL[payload] in perr.value.message
        assert not marker.exists()
        return
    with pytest.raises(UnsafeCheckpointError) as err:
        read_checkpoint(evil)
    assert any(EXPECTED_GLOBAL[payload] in g for g in err.value.globals)
    with pytest.raises(UnsafeCheckpointError):
        read_checkpoint_meta(evil)
    assert not marker.exists()


def test_trust_pickle_is_the_only_way_past_a_refusal(tmp_path: Path) -> None:
    """The explicit flag does run the file (which is why it is never automatic)."""
    marker = tmp_path / "RAN"
    evil = tmp_path / "evil.pt"
    write_payload(evil, payloads(marker)["exec"], "zip")
    with pytest.raises(UnsafeCheckpointError):
        read_checkpoint(evil)
    assert not marker.exists()
    read_checkpoint(evil, trust_pickle=True)
    assert marker.exists()


def _truncated(tmp_path: Path) -> Path:
    good = tmp_path / "good.pt"
    save_plain(good)
    data = good.read_bytes()
    p = tmp_path / "truncated.pt"
    p.write_bytes(data[: len(data) // 2])
    return p


def _truncated_legacy(tmp_path: Path) -> Path:
    p = tmp_path / "legacy.pt"
    torch.save(net().state_dict(), p, _use_new_zipfile_serialization=False)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 3])
    return p


def _torchscript(tmp_path: Path) -> Path:
    p = tmp_path / "scripted.pt"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), p)
    return p


def _st(tmp_path: Path, header: bytes, n: int | None = None, data: bytes = b"") -> Path:
    p = tmp_path / "bad.safetensors"
    p.write_bytes(struct.pack("<Q", len(header) if n is None else n) + header + data)
    return p


def _st_json(tmp_path: Path, obj: dict, data_len: int) -> Path:
    return _st(tmp_path, json.dumps(obj).encode(), data=b"\0" * data_len)


def _write(path: Path, data: str | bytes) -> Path:
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


CORRUPT = {
    "empty": (lambda t: _write(t / "e.pt", b""), "is empty"),
    "truncated_zip": (_truncated, "truncated"),
    "truncated_legacy": (_truncated_legacy, "truncated"),
    "lfs_pointer": (lambda t: _write(t / "l.pt", "version https://git-lfs.github.com/spec/v1\n"
                                     "oid sha256:" + "a" * 64 + "\nsize 12345\n"), "git lfs pull"),
    "text": (lambda t: _write(t / "x.pth", "just some notes\n"), "text file"),
    "html": (lambda t: _write(t / "h.bin", "<!DOCTYPE html><html><body>Sign in</body></html>"), "HTML"),
    "st_header_past_end": (lambda t: _st(t, b'{"a":1}', n=10_000), "runs past the end"),
    "st_header_over_100mb": (lambda t: _st(t, b"{}", n=200_000_000), "over the 100 MB limit"),
    "st_not_json": (lambda t: _st(t, b"{not json at all}"), "not valid JSON"),
    "st_overlap": (lambda t: _st_json(t, {
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, 12), "overlapping"),
    "st_out_of_range": (lambda t: _st_json(t, {
        "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, 8), "past the"),
    "st_wrong_size": (lambda t: _st_json(t, {
        "a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, 8), "needs"),
}


@pytest.mark.parametrize("case", sorted(CORRUPT))
def test_corrupt_files_exit_2_with_one_line(tmp_path: Path, invoke, case: str) -> None:
    make, needle = CORRUPT[case]
    bad = make(tmp_path)
    good = tmp_path / "good_ref.pt"
    save_plain(good)
    result = invoke("diff", good, bad)
    _assert_clean_failure(result, needle, str(bad.name))
    result = invoke("convert", bad, tmp_path / "out.safetensors")
    _assert_clean_failure(result, needle)
    assert not (tmp_path / "out.safetensors").exists()
    with pytest.raises(InspectError, match=str(bad.name).replace(".", r"\.")):
        read_checkpoint(bad)


def test_torchscript_is_a_model_side_in_diff(tmp_path: Path, invoke) -> None:
    scripted = _torchscript(tmp_path)
    weights = tmp_path / "w.pt"
    torch.save(torch.nn.Linear(2, 2).state_dict(), weights)
    result = invoke("diff", scripted, weights, "--trust-pickle")
    assert result.exit_code == 0, result.output
    assert "loads with strict=True (2 tensors)" in result.output


# ------------------------------------------------------------------ one safetensors rule (issue 20)


def _st_raw(tmp_path: Path, header: str, data: bytes) -> Path:
    return _st(tmp_path, header.encode(), data=data)


_A = '"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}'
_B_AT = '"b": {{"dtype": "F32", "shape": [2], "data_offsets": [{0}, {1}]}}'
ST_INVALID = {
    "trailing_bytes": (lambda t: _st_raw(t, "{" + _A + "}", b"\0" * 12), "trailing data"),
    "gap": (lambda t: _st_raw(t, "{" + _A + ", " + _B_AT.format(12, 20) + "}", b"\0" * 20),
            "gap in the data"),
    "duplicate_keys": (lambda t: _st_raw(t, "{" + _A + ", " + _A + "}", b"\0" * 8), "names 'a' twice"),
    "nested_json": (lambda t: _st_raw(t, '{"__metadata__": ' + "[" * 100_000 + "]" * 100_000 + "}", b""),
                    "nested too deeply"),
    "shape_2_63": (lambda t: _st_raw(t, '{"big": {"dtype": "U8", "shape": [0, 9223372036854775808], '
                                     '"data_offsets": [0, 0]}}', b""), "tensor 'big' has an invalid shape"),
    "shape_bool": (lambda t: _st_raw(t, '{"flag": {"dtype": "F32", "shape": [true, 2], '
                                     '"data_offsets": [0, 8]}}', b"\0" * 8), "tensor 'flag' has an invalid shape"),
    "shape_negative": (lambda t: _st_raw(t, '{"neg": {"dtype": "F32", "shape": [-1, -2], '
                                         '"data_offsets": [0, 8]}}', b"\0" * 8), "tensor 'neg' has an invalid shape"),
}


@pytest.mark.parametrize("case", sorted(ST_INVALID))
def test_every_reader_applies_one_safetensors_rule(tmp_path: Path, invoke, case: str) -> None:
    """diff, convert, params, summary --arch (and both library readers) refuse the same files,
    exit 2."""
    make, needle = ST_INVALID[case]
    bad = make(tmp_path)
    good = tmp_path / "good_ref.pt"
    save_plain(good)
    _assert_clean_failure(invoke("diff", good, bad), needle)
    _assert_clean_failure(invoke("convert", bad, tmp_path / "out.pt"), needle)
    _assert_clean_failure(invoke("params", bad), needle)  # the metadata view of a bare file
    _assert_clean_failure(invoke("summary", bad, "--arch", "zoo:convnet"), needle)
    assert not (tmp_path / "out.pt").exists()
    for read in (read_checkpoint, read_checkpoint_meta):
        with pytest.raises(InspectError, match=needle):
            read(bad)


def test_safetensors_library_agrees_on_the_rule(tmp_path: Path) -> None:
    """What the safetensors library itself refuses (trailing bytes, gaps), the rule refuses;
    a file it writes passes."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file, save_file

    ok = tmp_path / "ok.safetensors"
    save_file({"a": torch.ones(2), "b": torch.zeros(3, dtype=torch.float16)}, ok)
    assert set(read_checkpoint_meta(ok).tensors) == {"a", "b"}
    for case in ("trailing_bytes", "gap"):
        bad = ST_INVALID[case][0](tmp_path)
        with pytest.raises(SafetensorError):
            load_file(bad)
        with pytest.raises(InspectError):
            read_checkpoint_meta(bad)


def test_deeply_nested_shard_index_is_a_clean_error(tmp_path: Path, invoke) -> None:
    index = tmp_path / "model.safetensors.index.json"
    index.write_text('{"weight_map": ' + "[" * 100_000 + "]" * 100_000 + "}")
    good = tmp_path / "good_ref.pt"
    save_plain(good)
    _assert_clean_failure(invoke("diff", good, index), "not a readable JSON index")


def test_loading_a_torchscript_archive_prints_no_torch_deprecation(tmp_path: Path) -> None:
    """torch's FutureWarning that `torch.jit.load` is deprecated is not ours to show under
    every summary of a .ts.pt file."""
    import warnings

    from torchinspect.sources.archives import load_file

    path = _torchscript(tmp_path)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        loaded = load_file(str(path), key=None, trust_pickle=True, device="cpu")
    assert isinstance(loaded.model, torch.jit.ScriptModule)
    assert not [w for w in seen if "torch.jit.load" in str(w.message)], [str(w.message) for w in seen]


# ------------------------------------------------------------------ paths (issue 38, item 3)


def _sharded(folder: Path, tensors: dict[str, torch.Tensor]) -> dict[str, str]:
    """Two safetensors shards and their index in ``folder``; returns the weight map."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    names = sorted(tensors)
    half = len(names) // 2 or 1
    shards = {"model-00001-of-00002.safetensors": names[:half],
              "model-00002-of-00002.safetensors": names[half:]}
    weight_map = {}
    for shard, keys in shards.items():
        save_file({k: tensors[k].contiguous() for k in keys}, str(folder / shard))
        weight_map.update({k: shard for k in keys})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return weight_map


def test_a_shard_linked_outside_the_folder_is_refused(tmp_path: Path, invoke) -> None:
    """convert followed a shard that was a symlink to a file outside the folder and copied
    that file's tensors (exit 0)."""
    folder = tmp_path / "ckpt"
    _sharded(folder, {"a": torch.zeros(2), "b": torch.ones(2)})
    secret = tmp_path / "outside.safetensors"
    from safetensors.torch import save_file

    save_file({"b": torch.full((2,), 7.0)}, str(secret))
    shard = folder / "model-00002-of-00002.safetensors"
    shard.unlink()
    shard.symlink_to(secret)
    out = tmp_path / "o.safetensors"
    index = folder / "model.safetensors.index.json"
    for args in (["convert", folder, out], ["diff", index, folder],
                 ["convert", folder / "model.safetensors.index.json", out]):
        _assert_clean_failure(invoke(*args), "is a symbolic link to", "outside")
    assert not out.exists()
    inside = folder / "real-b.safetensors"  # a link that stays inside the folder is fine
    save_file({"b": torch.ones(2)}, str(inside))
    shard.unlink()
    shard.symlink_to(inside.name)
    assert invoke("convert", index, out).exit_code == 0


def test_a_hugging_face_cache_snapshot_is_read_through_its_blob_links(tmp_path: Path, invoke) -> None:
    """The HF cache's snapshot folder holds only links to ``../../blobs/SHA``: "the folder the
    user named" includes that repository's blobs, and nothing else."""
    repo = tmp_path / "hub" / "models--org--tiny"
    staging = tmp_path / "staging"
    wm = _sharded(staging, {"a": torch.zeros(2), "b": torch.ones(2)})
    (staging / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 8,
                                                     "num_hidden_layers": 1,
                                                     "num_attention_heads": 2,
                                                     "intermediate_size": 16,
                                                     "vocab_size": 32}))
    snap = repo / "snapshots" / "0123abcd"
    (repo / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    for i, f in enumerate(sorted(staging.iterdir())):
        blob = repo / "blobs" / f"sha{i}"
        f.rename(blob)
        (snap / f.name).symlink_to(Path("../../blobs") / blob.name)
    r = invoke("diff", snap, snap / "model.safetensors.index.json")
    assert r.exit_code == 0, r.output
    r = invoke("convert", snap / "model.safetensors.index.json", tmp_path / "o.safetensors")
    assert r.exit_code == 0, r.output
    assert set(wm) == {"a", "b"}
    # a snapshot linking into another repository's blobs is outside
    other = tmp_path / "hub" / "models--org--other" / "blobs"
    other.mkdir(parents=True)
    shard = snap / "model-00002-of-00002.safetensors"
    shard.resolve().rename(other / "stolen")
    shard.unlink()
    shard.symlink_to(other / "stolen")
    _assert_clean_failure(invoke("convert", snap, tmp_path / "p.safetensors"),
                          "is a symbolic link to", "outside")


def test_a_model_folders_config_linked_outside_is_refused(tmp_path: Path, invoke) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"model_type": "bert"}))
    (folder / "config.json").symlink_to(elsewhere)
    _assert_clean_failure(invoke("summary", folder), "config.json is a symbolic link to", "outside")


@pytest.mark.parametrize("kind", ["fifo", "device", "socket"])
def test_special_files_are_named_as_such_never_empty(tmp_path: Path, invoke, kind: str) -> None:
    """A FIFO or /dev/zero given as a checkpoint said "is empty (0 bytes)"."""
    import os
    import socket

    if kind == "fifo":
        path, words = tmp_path / "pipe.pt", "is a FIFO, not a regular file"
        os.mkfifo(path)
    elif kind == "device":
        path, words = Path("/dev/zero"), "is a device, not a regular file"
    else:
        path, words = tmp_path / "s.pt", "is a socket, not a regular file"
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(path))  # the file stays after the socket is closed
    good = tmp_path / "good.pt"
    save_plain(good)
    for args in (["params", path], ["diff", path, good], ["summary", path],
                 ["summary", "zoo:mnist-net", "--weights", path],
                 ["convert", path, tmp_path / "o.safetensors"]):
        r = invoke(*args)
        _assert_clean_failure(r, words)
        assert "empty" not in r.output


@pytest.mark.parametrize("args", [
    ["convert", "{good}", "{bad}.safetensors"], ["convert", "{good}", "{bad}.dcp"],
    ["params", "{good}", "-f", "json", "-o", "{bad}.json"],
    ["graph", "zoo:mnist-net", "-o", "{bad}.dot"],
], ids=["convert", "convert-dcp", "report", "graph"])
def test_an_output_name_that_is_not_utf8_is_refused_up_front(tmp_path: Path, invoke, args) -> None:
    """``convert`` to a name that is not UTF-8 ended with exit 70 ("verification failed ...
    report this") after writing."""
    import os

    good = tmp_path / "good.pt"
    save_plain(good)
    bad = os.fsdecode(bytes(tmp_path) + b"/o\xff\xfe")
    r = invoke(*[a.format(good=good, bad=bad) for a in args])
    _assert_clean_failure(r, "the file name is not valid UTF-8 (byte 0xff)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.pt"]
