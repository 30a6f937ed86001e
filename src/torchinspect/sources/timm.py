"""``timm:NAME`` — any architecture of ``timm.list_models()``, built with pretrained=False.

``--arg`` values are ``timm.create_model`` keyword arguments (``--arg num_classes=10``,
``--arg img_size=384``). The default input is the pretrained config's ``input_size``
(``img_size``/``in_chans`` given with ``--arg`` win). timm is optional: install
``torchinspect[models]``.
"""

from __future__ import annotations

import warnings
from typing import Any

from torchinspect.errors import InspectError
from torchinspect.inputs import ExampleInputs, TensorSpec
from torchinspect.sources.base import call_builder, closest

PREFIX = "timm:"


def import_timm() -> Any:
    try:
        import timm
    except ImportError:
        raise InspectError("timm: models need the timm package, which is not installed",
                           hint="pip install 'torchinspect[models]' (or pip install timm)") from None
    return timm


def check_name(name: str) -> str:
    """The name if timm knows it (``arch`` or ``arch.pretrained_tag``), else an error."""
    timm = import_timm()
    if not name:
        raise InspectError("timm: needs a model name", hint="e.g. timm:resnet50 or timm:vit_base_patch16_224")
    arch = name.partition(".")[0]
    if timm.is_model(arch):
        return name
    names = timm.list_models()
    near = [n for n in names if n.startswith(arch)][:3] or closest(arch, names)
    if len(near) < 3:
        near += [n for n in timm.list_models(f"*{arch}*") if n not in near][: 3 - len(near)]
    hint = (f"did you mean {', '.join(PREFIX + n for n in near)}? " if near else "") + \
        "timm.list_models('*vit*') lists names matching a pattern"
    raise InspectError(f"unknown timm model {name!r} ({len(names)} architectures known)", hint=hint)


def build(name: str, kwargs: dict[str, Any], device: str) -> Any:
    timm = import_timm()
    import torch

    if kwargs.get("pretrained"):
        raise InspectError("--arg pretrained=True is not supported: torchinspect never downloads weights",
                           hint="pass a local file with --weights FILE")
    kw = {k: v for k, v in kwargs.items() if k != "pretrained"}
    with warnings.catch_warnings(), torch.device(device):
        warnings.simplefilter("ignore")
        return call_builder(lambda **k: timm.create_model(name, pretrained=False, **k), kw,
                            PREFIX + name)


def default_example(name: str, kwargs: dict[str, Any], model: Any = None) -> ExampleInputs:
    """``(1, *input_size)`` of the pretrained config, with ``img_size``/``in_chans`` applied."""
    size: tuple[int, ...] = (3, 224, 224)
    cfg = getattr(model, "pretrained_cfg", None)
    if not cfg:
        from timm.models import get_pretrained_cfg

        found = get_pretrained_cfg(name)
        cfg = found.to_dict() if found is not None else {}
    if cfg.get("input_size"):
        size = tuple(int(d) for d in cfg["input_size"])
    img = kwargs.get("img_size")
    if isinstance(img, int):
        size = (size[0], img, img)
    elif isinstance(img, (tuple, list)) and len(img) == 2:
        size = (size[0], int(img[0]), int(img[1]))
    if isinstance(kwargs.get("in_chans"), int):
        size = (kwargs["in_chans"], *size[1:])
    return ExampleInputs((TensorSpec((1, *size)),))
