"""Where an output may not go (an input under any name, a file of an input folder, a shard of
an input index, a device, a folder) and how file-system and memory failures reach the user:
one line, exit 2, the user's own path."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import typer

from torchinspect.cli.boundary import command_errors
from torchinspect.cli.output import input_files
from torchinspect.errors import InspectError
from torchinspect.io.atomic import atomic_write_text, check_target


def test_devices_process_files_and_folders_are_never_replaced(tmp_path):
    for target in ("/dev/null", "/dev/stdout", "/proc/self/fd/1"):
        with pytest.raises(InspectError, match="refusing to replace a device or process file"):
            check_target(target)
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")
    with pytest.raises(InspectError, match="is a folder"):
        check_target(tmp_path)


def test_a_symlink_is_followed_the_link_kept(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    atomic_write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_files_of_input_folders_and_index_shards_are_protected(tmp_path):
    folder = tmp_path / "shards"
    folder.mkdir()
    shard = folder / "model-00001-of-00002.safetensors"
    shard.write_bytes(b"x")
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"a": shard.name}}))
    with pytest.raises(InspectError, match="a file of the input folder"):
        check_target(index, protect=[str(folder)])
    with pytest.raises(InspectError, match="a shard of the input"):
        check_target(shard, protect=[str(index)])
    assert check_target(folder / "new.json", protect=[str(folder)])  # a new file beside them
    assert check_target(tmp_path / "elsewhere.json", protect=[str(index), str(folder)])


def test_module_specs_protect_their_source(tmp_path, monkeypatch, invoke):
    monkeypatch.chdir(tmp_path)
    src = ("from torch import nn\nclass Net(nn.Module):\n    def __init__(self):\n"
           "        super().__init__()\n        self.fc = nn.Linear(8, 2)\n"
           "    def forward(self, x):\n        return self.fc(x)\n")
    (tmp_path / "netmod.py").write_text(src)
    assert input_files(["netmod:Net"]) == (os.path.join(".", "netmod.py"),)
    r = invoke("summary", "netmod:Net", "--input", "8", "-o", "netmod.py")
    assert r.exit_code == 2 and "refusing to overwrite the input file" in r.output
    assert (tmp_path / "netmod.py").read_text() == src


def _exit_code(exc: BaseException, capsys) -> tuple[int, str]:
    import concurrent.futures

    @command_errors
    def cmd() -> None:  # raised inside a library's frame, as torch's and the OS's errors are
        future: concurrent.futures.Future[None] = concurrent.futures.Future()  # (one raised in
        future.set_exception(exc)  # a file outside the libraries is the model's code's)
        future.result()

    with pytest.raises(typer.Exit) as info:
        cmd()
    return info.value.exit_code, capsys.readouterr().err


def test_file_system_errors_name_the_users_path(capsys):
    code, err = _exit_code(PermissionError(13, "Permission denied", "ckpt.pth"), capsys)
    assert code == 2 and "error: ckpt.pth: Permission denied" in err and "hint:" in err
    # an atomic write's temporary name is shown as the file the user named
    code, err = _exit_code(IsADirectoryError(21, "Is a directory", "out/.r.json.ab12_x.tmp/r.json",
                                             None), capsys)
    assert code == 2 and "error: out/r.json: Is a directory" in err


def test_allocator_failures_are_out_of_memory_not_internal_errors(capsys):
    code, err = _exit_code(RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: "
                                        "can't allocate memory: you tried to allocate 1 bytes"),
                           capsys)
    assert code == 2 and "error: ran out of memory" in err and "--input or --batch" in err
    code, err = _exit_code(RuntimeError("mat1 and mat2 shapes cannot be multiplied"), capsys)
    assert code == 70 and "internal error" in err


def test_model_code_failures_say_where(tmp_path, invoke):
    raises = tmp_path / "raises.py"
    raises.write_text("import torch\nraise RuntimeError('boom at import')\n")
    r = invoke("summary", f"{raises}:Net")
    assert r.exit_code == 70 and "the model's code raised while being imported" in r.output
    assert f"{raises}:2" in r.output and "report it" not in r.output
    r = invoke("summary", "torch.nn:Linear")
    assert r.exit_code == 2 and "needs arguments" in r.output and "--arg NAME=VALUE" in r.output


@pytest.mark.parametrize(("args", "text"), [
    (["diff", "zoo:convnet", "zoo:convnet", "--values", "--atol", "-5"],
     "--atol -5.0: a tolerance must be a finite number >= 0"),
    (["diff", "zoo:convnet", "zoo:convnet", "--values", "--rtol", "nan"],
     "--rtol nan: a tolerance must be a finite number >= 0"),
    (["export", "zoo:convnet", "-o", "c.onnx", "--atol", "nan"], "--atol"),
    (["export", "zoo:convnet", "-o", "c.onnx", "--static", "--dynamic", "x:0"],
     "--static and --dynamic exclude each other"),
    (["features", "zoo:convnet", "--std", "1,0,1", "-l", "fc1", "-o", "fe"], "a std not 0"),
    (["features", "zoo:convnet", "--mean", "inf,0,0", "-l", "fc1", "-o", "fe"],
     "every value must be a finite number"),
    (["check", "zoo:convnet", "--max-params", "1M", "--junit", "j.xml", "-o", "j.xml"],
     "--junit j.xml and --output name the same file"),
    (["bench", "zoo:convnet", "--profile", "--trace", "nodir/t.json"], "nodir does not exist"),
    (["graph", "zoo:convnet", "--input", "3,28,28", "-o", "g.dot"],
     "the model's forward failed for input"),
    (["bench", "zoo:convnet", "--input", "3,28,28", "--min-time", "0.05", "--max-time", "0.2"],
     "the forward failed in every configuration"),
    (["convert", "w.safetensors", "nodir/x.dcp"], "folder nodir does not exist"),
    (["graph", "zoo:convnet", "--kind", "module", "--saved", "-o", "g.dot"],
     "--saved draws the autograd graph's saved tensors"),
    (["summary", "zoo:convnet", "--no-batch", "--batch", "4"],
     "--batch and --no-batch exclude each other"),
])
def test_bad_values_and_conflicts_are_usage_errors(args, text, invoke, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(2)}, "w.safetensors")
    r = invoke(*args)
    assert r.exit_code == 2, r.output
    assert text in r.output and "hint:" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "j.xml").exists()


@pytest.mark.slow
def test_a_failing_legacy_export_keeps_stdout_for_the_report(tmp_path):
    """The TorchScript exporter dumps its IR from C++ onto file descriptor 1 on failure; with
    --format json that would corrupt the JSON on stdout. It goes to stderr."""
    import subprocess
    import sys

    (tmp_path / "svd.py").write_text("import torch\nfrom torch import nn\nclass Net(nn.Module):\n"
                                     "    def forward(self, x):\n"
                                     "        return torch.linalg.svd(x)[1]\n")
    r = subprocess.run([sys.executable, "-m", "torchinspect", "export", "svd.py:Net", "--input",
                        "4,4", "-o", "s.onnx", "--legacy", "-f", "json"], cwd=tmp_path,
                       capture_output=True, text=True, check=False)
    assert r.returncode == 2 and r.stdout == ""
    assert "ONNX export failed" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "s.onnx").exists()


@pytest.mark.slow
def test_pt2_programs_export_and_bench(tmp_path, invoke, monkeypatch):
    """A .pt2 program keeps its export-time shape guards and refuses .eval(): export fixes the
    shapes (with a note) instead of failing verification; bench runs it."""
    from torch import nn

    monkeypatch.chdir(tmp_path)
    ep = torch.export.export(nn.Sequential(nn.Linear(8, 4), nn.ReLU()).eval(), (torch.randn(2, 8),))
    torch.export.save(ep, "m.pt2")
    r = invoke("export", "m.pt2", "-o", "m.onnx")
    assert r.exit_code == 0, r.output
    assert "a .pt2 program accepts only the shapes it was exported with" in r.output
    r = invoke("bench", "m.pt2", "--min-time", "0.05", "--max-time", "0.2", "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["configs"][0]["status"] == "ok"


def test_a_dynamic_dim_the_model_cannot_move_fails_verification_not_the_tool(tmp_path, invoke,
                                                                              monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fixed.py").write_text(
        "from torch import nn\nclass Net(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.fc = nn.Linear(8, 4)\n"
        "    def forward(self, x):\n        return self.fc(x.reshape(x.shape[0], 8))\n")
    r = invoke("export", "fixed.py:Net", "--input", "2,4", "-o", "f.onnx", "--dynamic", "x:1",
               "-f", "json")
    assert r.exit_code == 1, r.output
    errors = [v["error"] for v in json.loads(r.stdout)["verify"] if v["error"]]
    assert errors and "PyTorch itself fails at these sizes" in errors[0]


@pytest.mark.parametrize(("args", "text"), [
    (["params", "resnet18", "--weights", "w.safetensors", "--arch", "resnet50"],
     "hint: inspect summary resnet18 --weights w.safetensors"),
    (["summary", "net.py"], "hint: name the class or factory to build: net.py:ClassName"),
    (["check", "zoo:convnet", "--config", "folder"], "--config folder: is a folder"),
    (["bench", "zoo:convnet", "--compare", "folder"], "--compare folder: is a folder"),
    (["features", "zoo:convnet", "-l", "fc", "-o", "folder", "folder/t.pt"],
     "folder, which is never read as input"),
])
def test_messages_name_the_real_mistake(args, text, invoke, tmp_path, monkeypatch):
    from safetensors.torch import save_file

    monkeypatch.chdir(tmp_path)
    save_file({"w": torch.zeros(2)}, "w.safetensors")
    (tmp_path / "net.py").write_text("x = 1\n")
    (tmp_path / "folder").mkdir()
    torch.save(torch.zeros(1, 28, 28), tmp_path / "folder" / "t.pt")
    r = invoke(*args)
    assert r.exit_code == 2, r.output
    assert text in r.output


# ------------------------------------------------------------------ atomic writer (io/atomic.py)


def test_a_replaced_file_keeps_its_mode_a_new_one_follows_the_umask(tmp_path):
    import stat

    target = tmp_path / "report.json"
    target.write_text("old")
    target.chmod(0o600)
    atomic_write_text(target, "new")
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o600
    old = os.umask(0o077)
    try:
        atomic_write_text(tmp_path / "fresh.json", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "fresh.json").stat().st_mode) == 0o600
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "open.json", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "open.json").stat().st_mode) == 0o644


def test_without_force_a_file_that_appears_meanwhile_is_not_replaced(tmp_path):
    from torchinspect.io.atomic import atomic_path

    target = tmp_path / "out.json"
    with pytest.raises(InspectError, match="created by another run"):
        with atomic_path(target, force=False) as tmp:
            tmp.write_text("mine")
            target.write_text("theirs")  # another process finished first
    assert target.read_text() == "theirs"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_stale_temporary_folders_of_dead_runs_are_removed_others_kept(tmp_path):
    import socket
    import subprocess
    import sys
    import tempfile
    import time

    from torchinspect.io.atomic import STALE_AFTER_S, TEMP_MARK, clean_stale_temps

    def temp_of(name: str, pid: int) -> Path:
        folder = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=tmp_path))
        (folder / TEMP_MARK).write_text(f"{pid} {socket.gethostname()}\n")
        return folder

    target = tmp_path / "out.pt"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        folders = {}
        for name, pid in (("dead", int(dead.stdout)), ("live", live.pid), ("old", live.pid)):
            folders[name] = temp_of(target.name, pid)
        past = time.time() - STALE_AFTER_S - 60
        os.utime(folders["old"] / TEMP_MARK, (past, past))
        foreign = tmp_path / ".out.pt.someone-else.tmp"  # same pattern, no mark: not ours
        foreign.mkdir()
        other_name = temp_of("other.pt", int(dead.stdout))  # another output's, also dead
        (tmp_path / "keep.tmp").mkdir()  # a folder of the user's
        removed = clean_stale_temps(tmp_path)
        assert sorted(removed) == sorted([folders["dead"], folders["old"], other_name])
        assert folders["live"].is_dir() and foreign.is_dir() and (tmp_path / "keep.tmp").is_dir()
    finally:
        live.kill()
        live.wait()


def test_a_full_disk_names_the_file_and_leaves_nothing(tmp_path, monkeypatch):
    import errno

    from torchinspect.io.atomic import atomic_path

    target = tmp_path / "out.bin"
    with pytest.raises(InspectError, match=r"out\.bin: no space left on the device"):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"x")
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("renameat2", [True, False], ids=["renameat2", "fallback"])
def test_folders_are_swapped_in_one_step(tmp_path, monkeypatch, renameat2):
    from torchinspect.io import atomic
    from torchinspect.io.atomic import atomic_folder

    if not renameat2:  # a C library or file system without it
        monkeypatch.setattr(atomic, "_renameat2", lambda src, dst, flags: False)

    target = tmp_path / "ckpt.dcp"
    with atomic_folder(target, force=False) as new:
        (new / "a").write_text("1")
    with atomic_folder(target, force=True) as new:
        (new / "b").write_text("2")
        assert (target / "a").read_text() == "1"  # the old folder is in place until the swap
    assert sorted(p.name for p in target.iterdir()) == ["b"]
    with pytest.raises(InspectError, match="created by another run"):
        with atomic_folder(target, force=False) as new:
            (new / "c").write_text("3")
    assert sorted(p.name for p in target.iterdir()) == ["b"]
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.dcp"]


def _full_tmpfs(path: Path) -> bool:
    """A 64 KB tmpfs at ``path``, filled to the last byte; False where it cannot be mounted."""
    import subprocess

    path.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(path)],
                      capture_output=True).returncode != 0:
        return False
    try:
        fd = os.open(path / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 512):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
    except BaseException:
        subprocess.run(["umount", str(path)], check=False)
        raise
    return True


def test_a_full_disk_before_the_first_byte_is_one_line_and_leaves_no_folder(tmp_path, invoke):
    """The clean-up mark was written outside the try: on a full disk the temporary folder
    stayed (no later run removed it) and the error was a bare ``OSError: [Errno 28]``."""
    import subprocess

    disk = tmp_path / "disk"
    if not _full_tmpfs(disk):
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        r = invoke("params", "zoo:mnist-net", "-f", "json", "-o", disk / "out.json")
        assert r.exit_code == 2, r.output
        errors = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and f"{disk}/out.json: no space left on the device" in errors[0]
        assert "needed" in errors[0] and "free" in errors[0] and "Errno" not in r.output
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]  # no temporary folder
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_a_full_disk_at_the_mark_or_the_data_names_the_space_needed(tmp_path, invoke, monkeypatch):
    """Without a tmpfs: the mark's write, then the data's, fail with ENOSPC."""
    import errno
    import pathlib

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(os, "write", full)
        r = invoke("params", "zoo:mnist-net", "-f", "json", "-o", tmp_path / "out.json")
    assert r.exit_code == 2, r.output
    assert (f"error: {tmp_path}/out.json: no space left on the device while writing it (more "
            "space needed") in r.output
    with monkeypatch.context() as m:
        m.setattr(pathlib.Path, "write_bytes", full)
        r = invoke("params", "zoo:mnist-net", "-f", "json", "-o", tmp_path / "out.json")
    assert r.exit_code == 2, r.output
    from torchinspect.device import fmt_size

    size = fmt_size(len(invoke("params", "zoo:mnist-net", "-f", "json").stdout.encode()))
    assert f"out.json: no space left on the device while writing it ({size} needed" in r.output
    assert list(tmp_path.iterdir()) == []


def test_an_empty_unmarked_temporary_folder_of_a_killed_run_is_removed(tmp_path):
    """A run killed between creating its folder and marking it left an empty folder."""
    import time

    from torchinspect.io.atomic import clean_stale_temps

    empty = tmp_path / ".out.json.abc123.tmp"
    empty.mkdir()
    past = time.time() - 120
    os.utime(empty, (past, past))
    fresh = tmp_path / ".out.json.def456.tmp"
    fresh.mkdir()
    full = tmp_path / ".out.json.ghi789.tmp"
    full.mkdir()
    (full / "data").write_text("someone's")
    os.utime(full, (past, past))
    assert clean_stale_temps(tmp_path) == [empty]
    assert fresh.is_dir() and full.is_dir()
