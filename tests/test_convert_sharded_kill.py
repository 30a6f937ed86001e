"""`convert --shard-size S --force` over an existing sharded OUT replaces the set as a whole
(issue 29, item 7): a run killed at any point leaves the old checkpoint or the new one,
never an index over a mix of old and new shards.

Each test converts A into a sharded OUT, then runs a second convert of B over it with
--force in a new process and SIGKILLs it at one point (before the first shard is put in
place, between shards, before the index, after the index), then loads OUT through its index.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from torchinspect.checkpoints import convert_checkpoint

_SRC_ROOT = Path(__file__).resolve().parents[1] / "src"

_KILL = """
import os, signal, sys
import torchinspect.io.atomic as A
import torchinspect.checkpoints.write as W

point = sys.argv[3]
calls = [0]
real = A.publish

def publish(*a, **kw):
    calls[0] += 1
    if point.startswith("before-publish-") and calls[0] == int(point.rsplit("-", 1)[1]):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*a, **kw)

A.publish = publish
if point == "before-cleanup":
    def die(*a, **kw):
        os.kill(os.getpid(), signal.SIGKILL)
    W._remove_replaced_shards = die
from torchinspect.checkpoints import convert_checkpoint
convert_checkpoint(sys.argv[1], sys.argv[2], shard_size="40KB", force=True)
"""


def _sd(base: float) -> dict[str, torch.Tensor]:
    return {f"w{i}": torch.full((64, 64), base + i) for i in range(6)}  # 16 KB each: 3 shards


def _load(out: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    index = json.loads(out.with_name(out.name + ".index.json").read_text())
    got: dict[str, torch.Tensor] = {}
    for shard in sorted(set(index["weight_map"].values())):
        got.update(load_file(str(out.with_name(shard))))
    assert set(got) == set(index["weight_map"])
    return got


@pytest.mark.slow
@pytest.mark.parametrize("point", ["before-publish-1", "before-publish-3", "before-publish-4",
                                   "before-cleanup"])
def test_a_killed_sharded_force_leaves_old_or_new(tmp_path: Path, point: str) -> None:
    old, new = _sd(0.0), _sd(100.0)
    torch.save(old, tmp_path / "old.pt")
    torch.save(new, tmp_path / "new.pt")
    out = tmp_path / "out.safetensors"
    convert_checkpoint(tmp_path / "old.pt", out, shard_size="40KB")
    assert len(list(tmp_path.glob("out-*.safetensors"))) == 3
    env = {**os.environ, "PYTHONPATH": f"{_SRC_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-c", _KILL, str(tmp_path / "new.pt"), str(out), point],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr  # killed at the chosen point
    got = _load(out)
    expected = new if point == "before-cleanup" else old  # publish 4 is the index
    assert set(got) == set(expected)
    for k in expected:
        assert torch.equal(got[k], expected[k]), (point, k)
    # the next run replaces whatever is there and leaves exactly one set
    convert_checkpoint(tmp_path / "new.pt", out, shard_size="40KB", force=True)
    got = _load(out)
    assert all(torch.equal(got[k], new[k]) for k in new)
    index = json.loads((tmp_path / "out.safetensors.index.json").read_text())
    assert sorted(p.name for p in tmp_path.glob("out-*.safetensors")) == \
        sorted(set(index["weight_map"].values()))  # the dead run's files removed too


def test_force_alternates_names_and_removes_the_old_set(tmp_path: Path) -> None:
    torch.save(_sd(0.0), tmp_path / "a.pt")
    out = tmp_path / "out.safetensors"
    convert_checkpoint(tmp_path / "a.pt", out, shard_size="40KB")
    first = sorted(p.name for p in tmp_path.glob("out-*.safetensors"))
    convert_checkpoint(tmp_path / "a.pt", out, shard_size="40KB", force=True)
    second = sorted(p.name for p in tmp_path.glob("out-*.safetensors"))
    assert not set(first) & set(second) and len(second) == 3  # a new set, the old one gone
    convert_checkpoint(tmp_path / "a.pt", out, shard_size="40KB", force=True)
    assert sorted(p.name for p in tmp_path.glob("out-*.safetensors")) == first
