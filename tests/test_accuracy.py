"""The acceptance bar: torchvision classifiers at their first published weights' settings.

Params must equal weights.meta["num_params"] exactly; MACs must be within 0.1% of
weights.meta["_ops"] * 1e9. torchvision rounds "_ops" (GFLOPS) to 3 decimals, a step of
1e6 MACs, so for small models (under 500 M MACs) the count must round to the published
value instead (|diff| <= 0.5e6). benchmarks/accuracy_torchvision.py checks all of them.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torchvision.models as tvm

from torchinspect.inputs import ExampleInputs, TensorSpec
from torchinspect.sources.published import published_config
from torchinspect.trace import trace_model

DOZEN = ["resnet50", "vit_b_16", "swin_t", "convnext_tiny", "efficientnet_b0",
         "mobilenet_v3_large", "maxvit_t", "regnet_y_400mf", "googlenet", "inception_v3",
         "densenet121", "squeezenet1_0"]


def macs_match(ours: int, published: int) -> bool:
    return abs(ours - published) <= max(1e-3 * published, 0.5e6)


def _build(name: str, kwargs: dict, device: str) -> torch.nn.Module:
    with warnings.catch_warnings(), torch.device(device):
        warnings.simplefilter("ignore")
        return tvm.get_model_builder(name)(weights=None, **kwargs)


@pytest.mark.parametrize("name", DOZEN)
def test_published_params_and_macs(name: str) -> None:
    cfg = published_config(name)
    weights = list(tvm.get_model_weights(name))[0]
    assert cfg.num_params == weights.meta["num_params"]
    try:
        model = _build(name, cfg.builder_kwargs, "meta")
    except Exception:  # regnet reads tensor values while building
        model = _build(name, cfg.builder_kwargs, "cpu")
    trace = trace_model(model, ExampleInputs((TensorSpec((1, *cfg.input_size)),)),
                        rebuild=lambda d: _build(name, cfg.builder_kwargs, d))
    assert trace.params.total == weights.meta["num_params"]
    published = weights.meta["_ops"] * 1e9
    assert macs_match(trace.total_macs, round(published)), (trace.total_macs, published)
    assert trace.fallback_reason is None


def test_published_config_builder_rules() -> None:
    vit_h = published_config("vit_h_14")
    assert vit_h.builder_kwargs["image_size"] == 518 and vit_h.input_size == (3, 518, 518)
    g = published_config("googlenet")
    assert g.builder_kwargs["aux_logits"] is False and g.builder_kwargs["transform_input"] is True
    assert published_config("inception_v3").builder_kwargs["aux_logits"] is True
    assert published_config("inception_v3").input_size == (3, 299, 299)
    r = published_config("resnet50", "IMAGENET1K_V2")
    assert r.weights_name == "ResNet50_Weights.IMAGENET1K_V2"
    assert r.macs == round(tvm.ResNet50_Weights.IMAGENET1K_V2.meta["_ops"] * 1e9)
    assert published_config("fcn_resnet50").builder_kwargs["num_classes"] == len(
        tvm.segmentation.FCN_ResNet50_Weights.COCO_WITH_VOC_LABELS_V1.meta["categories"])


def test_published_config_bad_weights_name() -> None:
    from torchinspect.errors import InspectError

    with pytest.raises(InspectError, match="IMAGENET1K_V1"):
        published_config("resnet18", "NOPE")
