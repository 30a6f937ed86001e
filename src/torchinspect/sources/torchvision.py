"""torchvision builders (all of `torchvision.models.list_models()`), built with weights=None.

Default inputs follow each family's published weights: the classification crop size
(3,224,224 for resnet18, 3,299,299 for inception_v3), segmentation's resize size, video
clips of 16 frames, two frames for optical flow, and a list of images for detection.
"""

from __future__ import annotations

import re
import sys
import warnings
from dataclasses import dataclass
from typing import Any

from torchinspect.errors import InspectError
from torchinspect.inputs import ExampleInputs, TensorSpec
from torchinspect.sources.base import call_builder, closest


class Family:
    classification = "classification"
    quantized = "quantized"
    segmentation = "segmentation"
    detection = "detection"
    video = "video"
    optical_flow = "optical_flow"


@dataclass(frozen=True)
class TorchvisionModel:
    name: str
    family: str
    builder: Any
    weights_enum: Any  # the WeightsEnum class, or None


_DYNAMO_UTILS = "torch._dynamo.utils"


def torchvision_models() -> Any:
    """``torchvision.models``, imported without importing TorchDynamo along with it.

    ``torchvision.ops.roi_align`` imports ``is_compile_supported`` from
    ``torch._dynamo.utils`` at import time, which imports all of TorchDynamo (about a second
    of a 3 s command) for a function only RoIAlign calls: a stand-in's function does that
    import when it is called."""
    from torchinspect.privtorch import call_later, standing_in

    if "torchvision.models" in sys.modules:
        import torchvision.models as tvm

        return tvm
    import torch  # noqa: F401 - first, and whole: the stand-in is for torchvision alone

    with standing_in(_DYNAMO_UTILS,
                     is_compile_supported=call_later(_DYNAMO_UTILS, "is_compile_supported")):
        import torchvision.models as tvm
    return tvm


def list_names() -> list[str]:
    return list(torchvision_models().list_models())


# ``@register_model()`` / ``@register_model(name="quantized_resnet18")``, other decorators,
# then the builder's ``def NAME(`` (the first top-level def after it)
_REGISTERED = re.compile(r"""^@register_model\((?:name\s*=\s*["']([\w.]+)["'])?\)[\s\S]*?^def (\w+)""",
                         re.MULTILINE)


def registered_names() -> list[str]:
    """The names ``torchvision.models.list_models()`` gives, read from torchvision's source
    files without importing it (and torch: ~2 s), so an unknown name is answered at once;
    the import itself where torchvision is already loaded or its files can't be read."""
    import importlib.util
    from pathlib import Path

    if "torchvision.models" not in sys.modules:
        spec = importlib.util.find_spec("torchvision")
        roots = list(spec.submodule_search_locations or []) if spec else []
        names = [m.group(1) or m.group(2) for root in roots
                 for path in sorted((Path(root) / "models").rglob("*.py"))
                 for m in _REGISTERED.finditer(_read(path))]
        if names:
            return sorted(set(names))
    return sorted(list_names())


def _read(path: Any) -> str:
    try:
        return str(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return ""


def lookup(name: str) -> TorchvisionModel | None:
    tvm = torchvision_models()

    if name not in tvm.list_models():
        return None
    builder = tvm.get_model_builder(name)
    module = builder.__module__
    if ".quantization." in module:
        family = Family.quantized
    elif ".segmentation." in module:
        family = Family.segmentation
    elif ".detection." in module:
        family = Family.detection
    elif ".video." in module:
        family = Family.video
    elif ".optical_flow." in module:
        family = Family.optical_flow
    else:
        family = Family.classification
    try:
        weights_enum = tvm.get_model_weights(name)
    except (ValueError, KeyError):
        weights_enum = None
    return TorchvisionModel(name, family, builder, weights_enum)


def unknown_model_error(name: str, extra_names: list[str] | None = None) -> InspectError:
    names = registered_names() + (extra_names or [])
    near = closest(name, names)
    hint = f"did you mean {', '.join(near)}?" if near else "see torchvision.models.list_models()"
    return InspectError(
        f"unknown model {name!r}: not a torchvision model, zoo:NAME, python spec (file.py:Name) or file",
        hint=hint + " (zoo models are written zoo:NAME; files must exist)",
    )


def _first_weights(tv: TorchvisionModel) -> Any:
    if tv.weights_enum is None:
        return None
    members = list(tv.weights_enum)
    return members[0] if members else None


def default_example(tv: TorchvisionModel, model: Any = None) -> ExampleInputs:
    """The input a user of this model's first published weights would feed it."""
    w = _first_weights(tv)
    t = w.transforms() if w is not None else None
    if tv.family in (Family.classification, Family.quantized):
        size = int(t.crop_size[0]) if t is not None else 224
        fixed = getattr(model, "image_size", None)  # ViT: the builder fixes the size
        if isinstance(fixed, int):
            size = fixed
        return ExampleInputs((TensorSpec((1, 3, size, size)),))
    if tv.family == Family.segmentation:
        size = int(t.resize_size[0]) if t is not None else 520
        return ExampleInputs((TensorSpec((1, 3, size, size)),))
    if tv.family == Family.video:
        h, w_ = (int(t.crop_size[0]), int(t.crop_size[1])) if t is not None else (112, 112)
        return ExampleInputs((TensorSpec((1, 3, 16, h, w_)),))
    if tv.family == Family.optical_flow:
        frame = TensorSpec((1, 3, 368, 496))  # FlyingChairs crop; RAFT needs H, W % 8 == 0
        return ExampleInputs((frame, frame))
    # detection: a list of 3-D images; the model's transform resizes them to min_size
    size = 800
    transform = getattr(model, "transform", None)
    min_size = getattr(transform, "min_size", None)
    if min_size:
        size = int(min_size[0])
    return ExampleInputs(([TensorSpec((3, size, size))],))


def build(tv: TorchvisionModel, kwargs: dict[str, Any], device: str) -> Any:
    """Build with weights=None (never downloads). Quantized models are quantized for real."""
    user_keys = tuple(kwargs)
    kwargs = dict(kwargs)
    for key in ("weights", "weights_backbone"):  # None (no weights) is what we pass anyway
        if kwargs.get(key) is not None:
            raise InspectError(
                f"--arg {key}={kwargs[key]!r} is not supported: torchinspect never downloads "
                f"weights ({key}=None, the default here, downloads nothing)",
                hint="pass a local file with --weights FILE (e.g. saved with "
                "torch.save(model.state_dict()))")
    kwargs["weights"] = None
    if tv.family == Family.detection or tv.family == Family.segmentation:
        kwargs.setdefault("weights_backbone", None)
    if tv.family == Family.quantized:
        kwargs.setdefault("quantize", True)
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if tv.family == Family.quantized and kwargs.get("quantize"):
            # quantized kernels are CPU-only and calibration needs real data
            return call_builder(tv.builder, kwargs, tv.name, user_keys)
        with torch.device(device):
            return call_builder(tv.builder, kwargs, tv.name, user_keys)


def needs_real_build(tv: TorchvisionModel, kwargs: dict[str, Any]) -> bool:
    return tv.family == Family.quantized and kwargs.get("quantize", True)
