"""What an ``inspect features`` run will do, decided before any row is computed: the
options checked, the model built (random init from a fixed, recorded seed), the weights'
identity, the ordered inputs, the preprocessing and the settings the manifest records.

:class:`FeatureOptions` is what the caller asked for; :class:`ExtractPlan` is the resolved
state that travels through the phases (folder, run, finish) of :func:`extract_features`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from torchinspect import device as devices
from torchinspect.dtypes import RUN, SHORT, short_name
from torchinspect.errors import InspectError
from torchinspect.features.inputs import (
    InputItem,
    Preprocess,
    collect_inputs,
    make_preprocess,
)
from torchinspect.features.layers import check_layer_names
from torchinspect.features.ranks import Ranks
from torchinspect.io.writers import parse_size
from torchinspect.sources.case import make_case, resolve_inputs
from torchinspect.sources.materialize import has_lazy, lazy_real_copy
from torchinspect.sources.origin import WeightsOrigin, WeightsSource

# torch dtype -> the short name manifests and reports use (dtypes.SHORT)
DTYPE_NAMES = {getattr(torch, name): short for short, name in SHORT.items()}
RANDOM_INIT_SEED = 0  # a model built here without --weights: the same weights every run
MAX_IMAGE_BYTES = 256 * 2**20
DEFAULT_BATCH = 64


@dataclass
class FeatureOptions:
    """The caller's options of one run (the CLI flags, the keyword arguments of the API)."""

    layers: list[str]
    output: Path
    options: Any = None  # ModelOptions: --weights, --input, ...
    example: Any = None
    device: str = "cpu"
    batch_size: int | None = None  # inputs per forward; None: DEFAULT_BATCH, reduced to fit memory
    workers: int | None = None
    dtype: str = "fp32"
    save_dtype: str | None = None
    pool: str | None = None
    file_format: str = "safetensors"
    shard_size: str | int = "1GB"
    preprocess: str = "image"
    resize: int | None = None
    crop: int | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    restart: bool = False
    gpu_decode: bool = True
    skip_unreadable: bool = False
    max_image_size: str | int = MAX_IMAGE_BYTES
    progress: Callable[[Any], None] | None = None


@dataclass
class ExtractSetup:
    """The resolved options of a run (complete when made): what every phase reads."""

    opts: FeatureOptions
    ranks: Ranks
    device: str
    compute: torch.dtype
    save: torch.dtype
    pool: str | None
    shard_bytes: int
    max_image_bytes: int

    @property
    def batch(self) -> int:
        return self.opts.batch_size or DEFAULT_BATCH

    @property
    def out_dir(self) -> Path:
        return self.opts.output


@dataclass
class ExtractModel:
    """What ``build_model`` gives: the real model on the run's device and what it came with."""

    net: Any
    name: str
    owned: bool  # built or copied here: its memory format may change
    callers: bool  # the caller's own module: what its forward assigns is put back
    notes: list[str]
    weights: dict[str, Any]
    example: Any
    first: Any  # the first positional example input (a spec or a tensor)
    sample_rank: int | None


@dataclass
class ExtractInputs:
    """What ``plan_inputs`` gives: preprocessing, the ordered rows, the manifest's settings."""

    prep: Preprocess
    items: list[InputItem]
    ignored: list[str]
    settings: dict[str, Any]

    @property
    def order(self) -> dict[str, int]:
        return {it.id: pos for pos, it in enumerate(self.items)}


@dataclass
class ExtractPlan(ExtractSetup):
    """The whole run, made once its phases are done: the one object extraction shares."""

    model: ExtractModel
    inputs: ExtractInputs


def check_options(opts: FeatureOptions) -> tuple[torch.dtype, torch.dtype, str | None, int, int]:
    """(compute dtype, storage dtype, pool, shard bytes, image size cap) of valid options."""
    if opts.batch_size is not None and opts.batch_size <= 0:
        raise InspectError(f"--batch {opts.batch_size} must be positive", hint="e.g. --batch 64")
    if opts.pool not in (None, "none", "gap"):
        raise InspectError(f"--pool {opts.pool!r}: unknown pooling", hint="use gap (global average pool) or none")
    if opts.file_format not in ("safetensors", "npy", "pt"):
        raise InspectError(f"--save-format {opts.file_format!r}: unknown file format",
                           hint="use safetensors, npy or pt")
    compute = _dtype(opts.dtype, "--dtype")
    save = _dtype(opts.save_dtype, "--save-dtype") if opts.save_dtype else compute
    if opts.file_format == "npy" and save == torch.bfloat16:
        raise InspectError("--save-format npy cannot hold bfloat16",
                           hint="use --save-format safetensors or pt, or --save-dtype fp32")
    if not opts.layers:
        raise InspectError("no layers given", hint="pass --layers NAME[,NAME...]; --list shows them")
    out = opts.output
    if out.exists() and not out.is_dir():
        raise InspectError(f"-o {out}: exists and is not a folder", hint="features are written to a folder")
    pool = None if opts.pool == "none" else opts.pool
    return compute, save, pool, parse_size(opts.shard_size), parse_size(opts.max_image_size, "--max-image-size")


def check_device(device: str) -> str:
    """The real device to run on: meta is refused (features are real numbers), auto is cpu."""
    dev = devices.parse_device(device)
    if dev == "meta":
        raise InspectError("--device meta: features are real numbers and need a real device",
                           hint="use --device cpu or cuda[:N]")
    dev = devices.real_device(dev)
    devices.check_available(dev)
    return dev


def _dtype(text: str, option: str) -> torch.dtype:
    short = short_name(str(text))
    if short is None or short not in RUN:
        raise InspectError(f"{option} {text!r}: unknown dtype", hint="use fp32, fp16 or bf16")
    return getattr(torch, SHORT[short])


# ------------------------------------------------------------------ model and weights


@dataclass
class _Built:
    net: Any
    name: str
    example: Any
    notes: list[str]
    owned: bool  # built or copied here: its memory format may be changed
    weights: WeightsOrigin


def build_model(setup: ExtractSetup, model: Any) -> ExtractModel:
    """The real model on the run's device, its name, example and the weights' identity.

    A model built here starts from ``sources.origin.RANDOM_INIT_SEED`` (the caller's RNG
    state is put back), so a rerun without ``--weights`` builds the same weights and may
    resume."""
    options = setup.opts.options
    built = _resolve_model(model, setup.device, options)
    if not isinstance(model, torch.nn.Module):
        setup.ranks.broadcast_weights(built.net)  # rank 0's, whatever each rank built
    notes = list(built.notes)
    note = built.weights.note("these features come from an untrained model")
    if note:
        notes.append(note)
    example = built.example
    if setup.opts.example is not None:  # "3,224,224", shapes, tensors: as every other API takes them
        example = resolve_inputs(setup.opts.example, None)
    check_layer_names(built.net, setup.opts.layers)
    sample_rank, _, first = example_info(example)
    return ExtractModel(built.net, built.name, built.owned, built.net is _callers(model), notes,
                        built.weights.to_dict(built.net), example, first, sample_rank)


def _callers(model: Any) -> Any:
    """The caller's own module, when ``model`` is one or a ModelCase holding one."""
    return model if isinstance(model, torch.nn.Module) else getattr(model, "model", None)


def _resolve_model(model: Any, device: str, options: Any) -> _Built:
    """The real model on ``device`` for a spec, a ModelCase or a module."""
    if isinstance(model, torch.nn.Module):
        return _callers_module(model, device, options)
    if isinstance(model, str):
        case = make_case(model, options=options, device=device, need_inputs=False)
        return _Built(case.real_model(device), case.name, case.example, list(case.notes), True,
                      case.weights)
    case = model  # a ModelCase: its model may be the caller's own
    net = case.real_model(device)
    return _Built(net, case.name, case.example, list(case.notes), net is not case.model,
                  case.weights)


def _callers_module(model: torch.nn.Module, device: str, options: Any) -> _Built:
    here = devices.model_device(model, default=device)
    if devices.has_meta_tensors(model):
        raise InspectError("the model's weights are on meta", hint="pass a model with real weights")
    example = None  # options.inputs: the example, as for a spec
    if options is not None and getattr(options, "inputs", None):
        example = resolve_inputs(list(options.inputs), None, batch=options.batch,
                                 no_batch=options.no_batch)
    name = type(model).__name__
    weights = WeightsOrigin(WeightsSource.module, module=name)
    if has_lazy(model):  # the first batch sizes the lazy modules: of a copy
        return _Built(lazy_real_copy(model).to(device), name, example,
                      ["lazy modules are sized on a copy (the model passed in stays lazy)"], False,
                      weights)
    if torch.device(here) != torch.device(device):
        import copy

        return _Built(copy.deepcopy(model).to(device), name, example,
                      [f"the model was copied from {here} to {device}"], True, weights)
    return _Built(model, name, example, [], False, weights)


def example_info(example: Any) -> tuple[int | None, tuple[int, int] | None, Any]:
    """(sample rank, (H, W) of an image-like input, first positional spec/tensor)."""
    first = None
    if example is None:
        return None, None, None
    args = getattr(example, "args", None)
    if args is not None:
        first = args[0] if args else None
    elif isinstance(example, torch.Tensor):
        first = example
    elif isinstance(example, (tuple, list)) and example:
        first = example[0]
    shape = getattr(first, "shape", None)
    if shape is None:
        return None, None, first
    shape = tuple(shape)
    hw = (int(shape[-2]), int(shape[-1])) if len(shape) == 4 and shape[1] in (1, 3) else None
    return len(shape) - 1, hw, first


# ------------------------------------------------------------------ inputs and settings


def plan_inputs(setup: ExtractSetup, built: ExtractModel, model: Any,
                inputs: Sequence[str]) -> ExtractInputs:
    """Preprocessing, the ordered input rows, and the settings the manifest records."""
    o = setup.opts
    _, hw, _ = example_info(built.example)
    prep = make_preprocess(built.name if isinstance(model, str) else None, hw, mode=o.preprocess,
                           resize=o.resize, crop=o.crop, mean=o.mean, std=o.std)
    ignored: list[str] = []
    if inputs:
        items, ignored = collect_inputs(list(inputs), sample_rank=built.sample_rank,
                                        exclude=setup.out_dir)
        if not items:
            _no_inputs(inputs, setup.out_dir)
    else:
        items = random_items(built.first)
    # tensor files are fed as they are: the image preprocessing is recorded only when some
    # input is an image
    images = any(it.kind == "image" for it in items)
    recorded = prep.to_dict() if images else {"mode": "tensors"} if inputs else {"mode": "random"}
    settings = {"model": built.name, "weights": built.weights, "layers": o.layers,
                "pool": setup.pool, "save_dtype": DTYPE_NAMES[setup.save],
                "file_format": o.file_format, "preprocess": recorded}
    # as the manifest holds them (lists)
    return ExtractInputs(prep, items, ignored, json.loads(json.dumps(settings)))


def _no_inputs(inputs: Sequence[str], out_dir: Path) -> None:
    out_real = os.path.realpath(out_dir)
    inside = [str(i) for i in inputs if os.path.realpath(i) == out_real
              or os.path.realpath(i).startswith(out_real + os.sep)]
    raise InspectError(
        f"no images or tensor files found in {', '.join(map(str, inputs))}"
        + (f" ({', '.join(inside)}: inside the output folder {out_dir}, which is never read as "
           "input)" if inside else ""),
        hint="put the inputs outside the output folder" if inside else
        "folders are searched recursively for .jpg/.png/... and .pt/.npy/.safetensors")


def random_items(first: Any) -> list[InputItem]:
    if first is None:
        raise InspectError("no INPUTS and no example input to draw random rows from",
                           hint="pass images/tensor files, or --input 3,224,224 for a random batch")
    n = int(first.shape[0]) if len(tuple(first.shape)) > 0 else 1
    return [InputItem(f"random#{i}", None, "random", None, i) for i in range(n)]
