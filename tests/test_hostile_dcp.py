"""torch.distributed.checkpoint folders built as an attacker would (issue 29, item 5).

A real ``dcp.save`` folder, then its ``.metadata`` rewritten: a data file named outside the
folder (``..``, absolute), a symlink out, a FIFO, ``/dev/zero``, a byte range past the file,
a piece larger than its tensor, a payload in the metadata pickle. Our metadata reader is the
only reader (DCP's ``FileSystemReader`` never runs on an untrusted folder) and the data files
are read by this tool from the validated metadata: each case is exit 2 with one line, no
outside byte reaches the output, nothing hangs.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import warnings
from pathlib import Path

import pytest
import torch

from test_checkpoint_helpers import payloads


def _save(folder: Path, sd: dict) -> None:
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(sd, storage_writer=dcp.FileSystemWriter(str(folder), single_file_per_rank=False),
                 no_dist=True)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    out = tmp_path / "ck.dcp"
    _save(out, {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4), "b": torch.ones(4)})
    return out


def _rewrite(folder: Path, fqn: str, **change: object) -> None:
    """Change the storage record of ``fqn``'s first piece (trusted pickle: the test's own)."""
    path = folder / ".metadata"
    md = pickle.loads(path.read_bytes())
    key = next(k for k in md.storage_data if k.fqn == fqn)
    md.storage_data[key] = dataclasses.replace(md.storage_data[key], **change)
    path.write_bytes(pickle.dumps(md))


def _secret(tmp_path: Path) -> Path:
    """An outside file holding a valid torch.save of a tensor: what an attacker would copy."""
    private = tmp_path / "private"
    private.mkdir()
    secret = private / "secret.pt"
    torch.save(torch.full((3, 4), 42.0), secret)
    return secret


def _refused(result, *needles: str) -> None:
    out = result.output
    assert result.exit_code == 2, out
    assert "Traceback" not in out
    assert len([ln for ln in out.splitlines() if ln.startswith("error:")]) == 1, out
    for n in needles:
        assert n in out, out


def test_a_clean_folder_converts_through_our_reader(folder: Path, invoke, tmp_path: Path, monkeypatch) -> None:
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import load_file

    def refuse(*a: object, **k: object) -> None:
        raise AssertionError("DCP's reader used on an untrusted folder")

    monkeypatch.setattr(dcp, "FileSystemReader", refuse)
    monkeypatch.setattr(dcp, "load", refuse)
    out = tmp_path / "o.safetensors"
    result = invoke("convert", folder, out)
    assert result.exit_code == 0, result.output
    got = load_file(str(out))
    assert torch.equal(got["w"], torch.arange(12, dtype=torch.float32).reshape(3, 4))


@pytest.mark.parametrize("how", ["dotdot", "absolute", "nested_dotdot"])
def test_data_file_outside_the_folder_is_refused(folder: Path, invoke, tmp_path: Path, how: str) -> None:
    secret = _secret(tmp_path)
    rel = {"dotdot": "../private/secret.pt", "absolute": str(secret),
           "nested_dotdot": "sub/../../private/secret.pt"}[how]
    _rewrite(folder, "w", relative_path=rel, offset=0, length=secret.stat().st_size)
    out = tmp_path / "o.safetensors"
    _refused(invoke("convert", folder, out), "'w'", "folder")
    assert not out.exists()


def test_symlink_out_of_the_folder_is_refused(folder: Path, invoke, tmp_path: Path) -> None:
    secret = _secret(tmp_path)
    (folder / "link.distcp").symlink_to(secret)
    _rewrite(folder, "w", relative_path="link.distcp", offset=0, length=secret.stat().st_size)
    out = tmp_path / "o.safetensors"
    _refused(invoke("convert", folder, out), "leaves the folder")
    assert not out.exists()


def test_symlinked_metadata_is_refused(folder: Path, invoke, tmp_path: Path) -> None:
    real = tmp_path / "elsewhere.metadata"
    (folder / ".metadata").rename(real)
    (folder / ".metadata").symlink_to(real)
    _refused(invoke("convert", folder, tmp_path / "o.safetensors"), ".metadata")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_data_file_does_not_hang(folder: Path, invoke, tmp_path: Path) -> None:
    os.mkfifo(folder / "pipe.distcp")
    _rewrite(folder, "w", relative_path="pipe.distcp", offset=0, length=100)
    _refused(invoke("convert", folder, tmp_path / "o.safetensors"), "not a regular file")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_dev_zero_is_refused(folder: Path, invoke, tmp_path: Path) -> None:
    (folder / "zero.distcp").symlink_to("/dev/zero")
    _rewrite(folder, "w", relative_path="zero.distcp", offset=0, length=1 << 40)
    _refused(invoke("convert", folder, tmp_path / "o.safetensors"))


@pytest.mark.parametrize("change", [{"offset": 1 << 30}, {"length": 1 << 40}, {"length": 10}])
def test_byte_ranges_are_checked(folder: Path, invoke, tmp_path: Path, change: dict) -> None:
    _rewrite(folder, "w", **change)
    _refused(invoke("convert", folder, tmp_path / "o.safetensors"), "'w'")


def test_metadata_payload_never_runs_and_dcp_never_reads_it(folder: Path, invoke, tmp_path: Path) -> None:
    """A global beyond DCP's metadata classes: our reader refuses, and there is no second
    reader (DCP's plain pickle.load) to run it."""
    marker = tmp_path / "PWNED"
    md = pickle.loads((folder / ".metadata").read_bytes())
    md.planner_data = {"w": ("w",), "evil": payloads(marker)["os_system"]}
    (folder / ".metadata").write_bytes(pickle.dumps(md))
    for cmd in (["convert", folder, tmp_path / "o.safetensors"], ["diff", folder, folder]):
        result = invoke(*cmd)
        assert not marker.exists(), cmd
        _refused(result, ".metadata", "--trust-pickle")


def test_trusted_folder_still_reads_with_dcp(folder: Path, invoke, tmp_path: Path) -> None:
    """--trust-pickle keeps DCP's own reader for metadata ours does not know (a harmless
    foreign global here)."""
    md = pickle.loads((folder / ".metadata").read_bytes())
    import datetime

    md.planner_data = {"w": ("w",), "b": ("b",), "note": datetime.date(2020, 1, 1)}
    (folder / ".metadata").write_bytes(pickle.dumps(md))
    assert invoke("convert", folder, tmp_path / "a.safetensors").exit_code == 2
    result = invoke("convert", folder, tmp_path / "o.safetensors", "--trust-pickle")
    assert result.exit_code == 0, result.output


def test_symlink_inside_the_folder_is_refused_too(folder: Path, invoke, tmp_path: Path) -> None:
    """A link that stays inside the folder is still a link: only regular files are read."""
    data = next(p for p in folder.iterdir() if p.suffix == ".distcp")
    (folder / "alias.distcp").symlink_to(data.name)
    _rewrite(folder, "w", relative_path="alias.distcp")
    _refused(invoke("convert", folder, tmp_path / "o.safetensors"), "symbolic link")
