"""The builder settings and input size that a torchvision weights enum implies, without
downloading anything.

torchvision builders rewrite their keyword arguments when given weights (``num_classes``
from the weights' categories, ViT's ``image_size`` for SWAG weights, GoogLeNet/Inception's
``transform_input``/``aux_logits``...). :func:`published_config` applies the same rules
to ``weights=None`` builds, so a meta trace sees the architecture those weights were
published with, and returns the published parameter count and MACs (``meta["_ops"]``,
which torchvision calls GFLOPS) to check against.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torchinspect.errors import InspectError


@dataclass(frozen=True)
class PublishedConfig:
    builder_kwargs: dict[str, Any]
    input_size: tuple[int, int, int]  # (C, H, W) of one image / frame, batch not included
    num_params: int
    macs: int  # round(meta["_ops"] * 1e9): torchvision's "GFLOPS" are multiply-adds
    weights_name: str  # e.g. "ResNet50_Weights.IMAGENET1K_V1"
    meta: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


# Builders that, given weights, force GoogLeNet/Inception settings; value: kept aux heads.
_AUX_DEFAULT = {"googlenet": False, "inception_v3": True,
                "quantized_googlenet": False, "quantized_inception_v3": False}


def _weights_enum(model_name: str) -> Any:
    import torchvision.models as tvm

    try:
        return tvm.get_model_weights(model_name)
    except (ValueError, KeyError):
        raise InspectError(f"{model_name!r} has no published torchvision weights",
                           hint="--published/--weights-config apply to torchvision models with weights") from None


def _pick(enum: Any, weights: str | None) -> Any:
    members = list(enum)
    if not members:
        raise InspectError(f"{enum.__name__} lists no weights", hint="drop --weights-config")
    if weights in (None, "", "default", "first"):
        return members[0]
    name = weights.rpartition(".")[2]
    if name == "DEFAULT":
        return enum.DEFAULT
    for m in members:
        if m.name == name:
            return m
    raise InspectError(f"--weights-config {weights!r}: not one of {enum.__name__}'s weights",
                       hint="choose from " + ", ".join(m.name for m in members))


def _builder_module(model_name: str) -> str:
    import torchvision.models as tvm

    return tvm.get_model_builder(model_name).__module__


def _input_size(transforms: Any, meta: dict[str, Any], module: str) -> tuple[int, int, int]:
    if ".detection." in module:
        return (3, 800, 800)  # detection transforms resize each image to min_size 800 itself
    for attr in ("crop_size", "resize_size"):
        size = getattr(transforms, attr, None)
        if size:
            h = int(size[0])
            w = int(size[1]) if len(size) > 1 else h
            return (3, h, w)
    min_size = meta.get("min_size")
    if min_size:
        return (3, int(min_size[0]), int(min_size[1]))
    return (3, 224, 224)


def published_config(model_name: str, weights: str | None = None) -> PublishedConfig:
    """Builder kwargs, input size and published numbers of ``model_name``'s ``weights``.

    ``weights`` is a member name (``IMAGENET1K_V2``, ``DEFAULT``) or None for the first
    published weights. Nothing is downloaded: only the enum's metadata is read.
    """
    enum = _weights_enum(model_name)
    w = _pick(enum, weights)
    meta = dict(w.meta)
    module = _builder_module(model_name)
    kwargs: dict[str, Any] = {}
    cats = meta.get("categories")
    if cats is not None:
        kwargs["num_classes"] = len(cats)
    if module.endswith("vision_transformer"):
        kwargs["image_size"] = int(meta["min_size"][0])
    elif module.endswith("maxvit"):
        kwargs["input_size"] = tuple(int(s) for s in meta["min_size"])
    elif module.endswith("video.mvit"):
        kwargs["spatial_size"] = tuple(int(s) for s in meta["min_size"])
        kwargs["temporal_size"] = int(meta["min_temporal_size"])
    if model_name in _AUX_DEFAULT:
        kwargs["transform_input"] = True
        kwargs["aux_logits"] = _AUX_DEFAULT[model_name]
        if not model_name.startswith("quantized_"):
            kwargs["init_weights"] = False
    if ".segmentation." in module and model_name != "lraspp_mobilenet_v3_large":
        kwargs["aux_loss"] = True
    if "keypoint_names" in meta:
        kwargs["num_keypoints"] = len(meta["keypoint_names"])
    if ".quantization." in module:
        kwargs["quantize"] = True
        if "backend" in meta:
            kwargs["backend"] = meta["backend"]
    transforms = w.transforms()
    ops = meta.get("_ops")
    return PublishedConfig(
        builder_kwargs=kwargs,
        input_size=_input_size(transforms, meta, module),
        num_params=int(meta.get("num_params", 0)),
        macs=int(round(float(ops) * 1e9)) if ops is not None else 0,
        weights_name=f"{enum.__name__}.{w.name}",
        meta=meta,
    )
