"""`inspect env` and torchinspect.env.collect_env."""

from __future__ import annotations

import csv
import importlib.metadata
import importlib.util
import io
import json
import os
import platform
import shutil
import stat
import subprocess
import sys

import pytest
import torch

from torchinspect import env as env_mod
from torchinspect.env import collect_env, format_cudnn_version


def env_json(invoke, *extra: str) -> dict:
    result = invoke("env", "--format", "json", *extra)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def fake_tool(tmp_path, name: str, script: str) -> None:
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_env_table(invoke):
    result = invoke("env")
    assert result.exit_code == 0, result.output
    for text in ("Versions", torch.__version__, platform.python_version(), "CUDA available",
                 "cudnn.benchmark", "torch threads", "Optional components", "onnxruntime", "dot"):
        assert text in result.output
    assert "Traceback" not in result.output


def test_env_json_matches_the_running_torch(invoke):
    data = env_json(invoke)
    assert data["schema"] == "torchinspect/env/v1"
    assert data["torch"] == torch.__version__
    assert data["python"] == platform.python_version()
    assert data["cuda_available"] == torch.cuda.is_available()
    assert data["cuda_version"] == torch.version.cuda
    assert data["cudnn_enabled"] == torch.backends.cudnn.enabled
    assert data["cudnn_benchmark"] == torch.backends.cudnn.benchmark
    assert data["cudnn_deterministic"] == torch.backends.cudnn.deterministic
    assert data["torch_num_threads"] == torch.get_num_threads()
    assert data["cpu_count"] == os.cpu_count()
    assert data["platform"] == platform.platform()
    expected_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert len(data["gpus"]) == expected_gpus
    if torch.backends.cudnn.is_available():
        assert data["cudnn_version"] == format_cudnn_version(torch.backends.cudnn.version())


def test_env_json_torchvision_version(invoke):
    import torchvision  # a required dependency: a broken install fails, never skips
    assert env_json(invoke)["torchvision"] == torchvision.__version__


def test_env_reports_optional_components(invoke):
    comps = {c["name"]: c for c in env_json(invoke)["components"]}
    for name in ("onnx", "onnxruntime", "thop", "torchinfo", "safetensors", "graphviz"):
        assert comps[name]["present"] == (importlib.util.find_spec(name) is not None), name
        if comps[name]["present"]:
            assert comps[name]["version"]
    for name in ("onnx", "torchinfo", "safetensors", "graphviz"):
        if comps[name]["present"]:
            assert comps[name]["version"] == importlib.metadata.version(name)
    dot = shutil.which("dot")
    assert comps["dot"]["present"] == (dot is not None)
    if dot:
        out = subprocess.run([dot, "-V"], capture_output=True, text=True, check=True)
        assert comps["dot"]["version"] in out.stdout + out.stderr


def test_env_reflects_cudnn_flags(invoke, monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    data = env_json(invoke)
    assert data["cudnn_benchmark"] is True
    assert data["cudnn_deterministic"] is True


def test_env_csv_is_flat_key_value(invoke):
    result = invoke("env", "--format", "csv")
    assert result.exit_code == 0, result.output
    rows = list(csv.reader(io.StringIO(result.output)))
    assert rows[0] == ["key", "value"]
    values = dict(rows[1:])
    assert values["torch"] == torch.__version__
    assert values["cuda_available"] == str(torch.cuda.is_available())
    assert "components.onnx.present" in values


def test_env_markdown(invoke):
    result = invoke("env", "--format", "markdown")
    assert result.exit_code == 0, result.output
    assert "### Versions" in result.output
    assert f"| torch | {torch.__version__} |" in result.output


def test_env_output_file(invoke, tmp_path):
    target = tmp_path / "env.json"
    result = invoke("env", "-f", "json", "-o", str(target))
    assert result.exit_code == 0, result.output
    assert json.loads(target.read_text())["schema"] == "torchinspect/env/v1"


def test_env_bad_format_is_a_usage_error(invoke):
    result = invoke("env", "--format", "yaml")
    assert result.exit_code == 2


def test_env_without_nvidia_smi_or_dot(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH
    info = collect_env()
    assert info.driver_version is None
    dot = next(c for c in info.components if c.name == "dot")
    assert not dot.present and dot.version is None


def test_env_reads_driver_from_nvidia_smi(monkeypatch, tmp_path):
    fake_tool(tmp_path, "nvidia-smi", 'echo "550.54.15"')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert collect_env().driver_version == "550.54.15"


def test_env_tolerates_a_hanging_or_failing_nvidia_smi(monkeypatch, tmp_path):
    monkeypatch.setattr(env_mod, "PROBE_TIMEOUT_S", 0.2)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    fake_tool(tmp_path, "nvidia-smi", "exec sleep 30")
    assert env_mod.nvidia_driver_version() is None
    fake_tool(tmp_path, "nvidia-smi", "echo 'NVIDIA-SMI has failed' >&2; exit 9")
    assert env_mod.nvidia_driver_version() is None


def test_env_notes_a_broken_gpu_query(monkeypatch):
    def boom(i):
        raise RuntimeError("driver exploded")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", boom)
    info = collect_env()
    assert info.gpus == ()
    assert any("driver exploded" in n for n in info.notes)


def test_cudnn_version_encoding():
    assert format_cudnn_version(8902) == "8.9.2"  # cuDNN 8: major*1000 + minor*100 + patch
    assert format_cudnn_version(90100) == "9.1.0"  # cuDNN 9: major*10000 + minor*100 + patch
    assert format_cudnn_version(91002) == "9.10.2"
    assert format_cudnn_version(None) is None


def test_env_cli_module_does_not_import_torch():
    code = ("import sys, torchinspect.cli.env; "
            "assert 'torch' not in sys.modules, 'torch imported at module level'")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.cuda
def test_env_lists_each_gpu(invoke):
    data = env_json(invoke)
    assert len(data["gpus"]) == torch.cuda.device_count()
    for gpu in data["gpus"]:
        props = torch.cuda.get_device_properties(gpu["index"])
        assert gpu["name"] == props.name
        assert gpu["capability"] == f"{props.major}.{props.minor}"
        assert gpu["total_memory"] == props.total_memory
    if shutil.which("nvidia-smi"):
        assert data["driver_version"]


# ---------------------------------------------------------------- versions without imports


def test_env_versions_without_importing_torch(tmp_path):
    """`inspect env --no-runtime` reads every version from metadata and version.py files:
    torch, torchvision, timm and transformers are never imported."""
    code = ("import sys, json\n"
            "from typer.testing import CliRunner\n"
            "from torchinspect.cli.app import app\n"
            "r = CliRunner().invoke(app, ['env', '--no-runtime', '-f', 'json'])\n"
            "assert r.exit_code == 0, r.output\n"
            "heavy = [m for m in ('torch', 'torchvision', 'timm', 'transformers', 'onnxruntime')"
            " if m in sys.modules]\n"
            "assert not heavy, heavy\n"
            "print(r.stdout)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, env={**os.environ, "COLUMNS": "120"})
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["runtime"] is False and data["cuda_available"] is None
    assert data["torch"] == torch.__version__  # with its +cuXXX tag, as torch says
    assert data["cuda_version"] == torch.version.cuda
    import torchvision  # a required dependency: a broken install fails, never skips
    assert data["torchvision"] == torchvision.__version__
    for name in ("timm", "transformers"):
        assert data[name] == importlib.metadata.version(name)


def test_env_table_lists_timm_and_transformers(invoke):
    result = invoke("env")
    assert result.exit_code == 0, result.output
    rows = dict(line.split(None, 1) for line in result.output.split("CUDA")[0].splitlines()[1:]
                if line.strip())
    assert rows["timm"] == importlib.metadata.version("timm")
    assert rows["transformers"] == importlib.metadata.version("transformers")


def test_env_imports_torch_only_when_useful(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch")  # as in a fresh `inspect env`
    monkeypatch.setattr(env_mod, "nvidia_driver_present", lambda: False)
    monkeypatch.setattr(env_mod.sys, "platform", "linux")
    assert env_mod.wants_runtime(None) is False
    assert env_mod.wants_runtime(True) is True
    monkeypatch.setattr(env_mod, "nvidia_driver_present", lambda: True)
    assert env_mod.wants_runtime(None) is True  # a GPU machine: the CUDA facts matter
    assert env_mod.wants_runtime(False) is False


def test_env_without_runtime_says_how_to_get_it(invoke):
    result = invoke("env", "--no-runtime")
    assert result.exit_code == 0, result.output
    assert "torch was not imported" in result.output and "--runtime" in result.output
    cuda = dict(line.rsplit(None, 1) for line in
                result.output.split("\nCUDA\n")[1].split("\n\n")[0].splitlines())
    assert cuda["CUDA available"] == "-" and cuda["CUDA version (torch build)"] == str(
        torch.version.cuda or "-")


def test_version_file_is_read_not_run(monkeypatch, tmp_path):
    pkg = tmp_path / "fakepkg"
    pkg.mkdir()
    marker = tmp_path / "ran"
    (pkg / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (pkg / "version.py").write_text(f"open({str(marker)!r}, 'w').close()\n"
                                    "__version__ = '1.2.3+cu999'\ncuda: str = '9.9'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert env_mod.package_version("fakepkg") == "1.2.3+cu999"
    assert env_mod.version_file("fakepkg")["cuda"] == "9.9"
    assert not marker.exists() and "fakepkg" not in sys.modules
    assert env_mod.package_version("no_such_package_here") is None
