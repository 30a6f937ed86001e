"""Every torchvision builder (all of list_models()) summarizes with its default input.

Classification and the light families run on meta in a few seconds; detection models
(data-dependent NMS: a CPU fallback with a real build) and quantized models (CPU kernels)
take longer and carry the `slow` mark (`make test-slow`, run by CI).
"""

from __future__ import annotations

import warnings

import pytest
import torchvision.models as tvm

from torchinspect.sources import load_model
from torchinspect.trace import trace_model

ALL = tvm.list_models()
HEAVY = {n for n in ALL if tvm.get_model_builder(n).__module__.split(".")[2] in ("detection", "quantization")}


def _params(names: list[str]) -> list:
    return [pytest.param(n, marks=pytest.mark.slow) if n in HEAVY else n for n in names]


FAMILIES = {"classification", "detection", "optical_flow", "quantization", "segmentation", "video"}


def test_every_builder_is_of_a_family_we_trace() -> None:
    # every builder of list_models() is parametrized below; a new family (with inputs of its
    # own) must be taught to sources/torchvision.py before it can pass
    def family(name: str) -> str:  # torchvision.models.resnet / torchvision.models.detection.ssd
        parts = tvm.get_model_builder(name).__module__.split(".")
        return parts[2] if len(parts) > 3 else "classification"

    families = {n: family(n) for n in ALL}
    assert ALL and set(families.values()) <= FAMILIES, set(families.values()) - FAMILIES


@pytest.mark.parametrize("name", _params(ALL))
def test_builder_traces_with_default_input(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = load_model(name, device="meta")
        trace = trace_model(loaded.model, loaded.example, rebuild=loaded.rebuild)
    assert trace.calls and trace.calls[0].name == ""
    assert trace.params.total > 0 and trace.total_macs > 0
    assert trace.outputs is not None
    weights = list(tvm.get_model_weights(name))
    if name in HEAVY:  # real run (NMS / quantized kernels), and it says why
        assert trace.device == "cpu" and trace.fallback_reason
    else:
        assert trace.device == "meta" and trace.fallback_reason is None
    if weights and not name.startswith("quantized_"):
        # the default build (weights=None) may differ from the published one in num_classes
        # and aux heads, so only the order of magnitude is checked here (test_accuracy pins it)
        assert trace.params.total > weights[0].meta["num_params"] / 3
