"""CUDA code paths: building and tracing on a GPU, GPU-saved checkpoints. Skipped without CUDA."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

DATA = Path(__file__).parent / "data"
TINY = f"{DATA / 'make_gpu_checkpoint.py'}:Tiny"
GPU_FILE = DATA / "gpu_saved_state_dict.pt"


def _summary_json(invoke, *args: str) -> dict:
    result = invoke("summary", *args, "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.cuda
def test_build_on_cuda():
    from torchinspect.sources import load_model

    lm = load_model("resnet18", device="cuda")
    assert next(lm.model.parameters()).is_cuda


@pytest.mark.cuda
@pytest.mark.parametrize("model", ["zoo:convnet", "resnet18", "zoo:gpt-tiny"])
def test_cuda_trace_matches_meta_trace(invoke, model):
    meta = _summary_json(invoke, model)
    cuda = _summary_json(invoke, model, "--device", "cuda")
    assert cuda["totals"]["macs"] == meta["totals"]["macs"]
    assert cuda["totals"]["params"] == meta["totals"]["params"]


@pytest.mark.cuda
def test_cuda_index_device(invoke):
    result = invoke("summary", "zoo:convnet", "--device", "cuda:0")
    assert result.exit_code == 0, result.output


@pytest.mark.cuda
def test_cuda_index_out_of_range_is_a_clean_error(invoke):
    result = invoke("summary", "zoo:convnet", "--device", f"cuda:{torch.cuda.device_count()}")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output


def test_gpu_saved_checkpoint_loads_on_this_machine(invoke):
    """The committed fixture was saved on cuda:0; it must load wherever the tests run."""
    if not GPU_FILE.exists():
        pytest.skip("tests/data/gpu_saved_state_dict.pt not made yet (tests/data/make_gpu_checkpoint.py)")
    from torchinspect.io.checkpoint import read_checkpoint_meta
    from torchinspect.sources import load_model

    assert "cuda:0" in read_checkpoint_meta(GPU_FILE).devices
    lm = load_model(str(GPU_FILE), arch=TINY)
    ref = torch.load(DATA / "gpu_saved_reference.pt", weights_only=True)
    for k, v in lm.model.state_dict().items():
        assert v.device.type == "cpu"
        assert torch.equal(v, ref[k])
    result = invoke("summary", GPU_FILE, "--arch", TINY, "--input", "3,8,8")
    assert result.exit_code == 0, result.output
    container = invoke("summary", DATA / "gpu_saved_container.pt", "--arch", TINY, "--input", "3,8,8")
    assert container.exit_code == 0, container.output


@pytest.mark.cuda
def test_cuda_build_refused_when_weights_exceed_free_gpu_memory(invoke):
    result = invoke("summary", "zoo:llama-70b", "--device", "cuda")
    free = torch.cuda.mem_get_info()[0]
    if free > 300e9:
        pytest.skip("this GPU could hold 282 GB of weights")
    assert result.exit_code == 2, result.output
    assert "for its weights on cuda" in result.output and "Traceback" not in result.output
