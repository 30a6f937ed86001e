"""io/writers.py: atomic tensor files; HF-style sharded safetensors (written by convert's
one sharded writer, read back by the one index reader, io/layouts.read_hf_index)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from torchinspect.checkpoints import convert_checkpoint
from torchinspect.errors import InspectError
from torchinspect.io.layouts import read_hf_index
from torchinspect.io.writers import plan_shards, write_tensors


def _tensors():
    g = torch.Generator().manual_seed(0)
    return {"a": torch.randn(4, 3, generator=g), "b": torch.arange(10, dtype=torch.int64),
            "c": torch.randn(2, 2, generator=g).to(torch.bfloat16)}


def test_safetensors_round_trip_with_metadata(tmp_path):
    t = _tensors()
    view = torch.randn(8, 8)[:, :2]  # a non-contiguous view of a bigger storage
    path = tmp_path / "x.safetensors"
    write_tensors(path, {**t, "view": view}, metadata={"model": "m", "rows": 4})
    back = load_file(str(path))
    for k, v in t.items():
        assert back[k].dtype == v.dtype and torch.equal(back[k], v)
    assert torch.equal(back["view"], view)
    with safe_open(str(path), framework="pt") as fh:
        assert fh.metadata() == {"model": "m", "rows": "4"}
    assert [p.name for p in tmp_path.iterdir()] == ["x.safetensors"]  # no temp files left


def test_pt_and_npy(tmp_path):
    t = {k: v for k, v in _tensors().items() if k != "c"}
    write_tensors(tmp_path / "x.pt", t, fmt="pt", metadata={"k": "v"})
    obj = torch.load(tmp_path / "x.pt", weights_only=True)
    assert obj["__metadata__"] == {"k": "v"} and torch.equal(obj["a"], t["a"])
    files = write_tensors(tmp_path / "y.npy", t, fmt="npy")
    assert [f.name for f in files] == ["y.a.npy", "y.b.npy"]
    assert np.array_equal(np.load(files[0]), t["a"].numpy())
    with pytest.raises(InspectError, match="bfloat16"):
        write_tensors(tmp_path / "z.npy", {"c": _tensors()["c"]}, fmt="npy")


def test_plan_shards_greedy_and_oversized():
    plan = plan_shards({"a": 40, "b": 40, "c": 100, "d": 10}, 90)
    assert plan.shards == [["a", "b"], ["c"], ["d"]] and plan.total_size == 190


def test_sharded_safetensors_and_the_index_reader(tmp_path):
    g = torch.Generator().manual_seed(1)
    sd = {f"layer{i}.weight": torch.randn(64, 64, generator=g) for i in range(5)}  # 16 KiB each
    write_tensors(tmp_path / "in.safetensors", sd)
    res = convert_checkpoint(tmp_path / "in.safetensors", tmp_path / "model.safetensors",
                             shard_size=40_000)
    index_path = tmp_path / "model.safetensors.index.json"
    weight_map = read_hf_index(index_path)
    assert json.loads(index_path.read_text())["metadata"]["total_size"] == 5 * 64 * 64 * 4
    files = sorted(set(weight_map.values()))
    assert files == res.shards == ["model-00001-of-00003.safetensors",
                                   "model-00002-of-00003.safetensors",
                                   "model-00003-of-00003.safetensors"]
    for name, f in weight_map.items():
        assert torch.equal(load_file(str(tmp_path / f))[name], sd[name])
    assert weight_map["layer0.weight"] == files[0]


def test_the_index_reader_refuses_shards_outside_the_folder(tmp_path):
    index = tmp_path / "m.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"a": "../secret.safetensors"}}))
    with pytest.raises(InspectError, match="points outside the folder"):
        read_hf_index(index)


def test_writer_refuses_to_overwrite_an_input(tmp_path):
    src = tmp_path / "in.safetensors"
    write_tensors(src, {"a": torch.ones(1)})
    with pytest.raises(InspectError, match="overwrite the input"):
        write_tensors(src, {"a": torch.zeros(1)}, protect=(src,))
