"""Hugging Face transformers models: a model folder (``config.json``) or ``hf:ARCH``.

* ``path/to/model_dir`` — a folder holding ``config.json`` (and maybe ``*.safetensors``
  shards with their index): the model is built from the config on meta, as the class
  named in ``config.architectures`` (``AutoModel`` when none is named). Nothing is read
  from the network, and no remote code runs.
* ``hf:ARCH`` — a default config for a model type (``hf:llama``, ``hf:bert``) through
  ``AutoConfig.for_model``, built as its base model (``AutoModel``); ``hf:ClassName``
  (``hf:LlamaForCausalLM``) builds that class from its default config.

``--arg key=value`` overrides config attributes (``--arg num_hidden_layers=2``).
Default inputs follow the model's ``main_input_name``: ``input_ids`` of length 128
(values below ``vocab_size``), ``pixel_values`` at the config's image size, ``input_features``
(speech encoders, 3000 frames), ``input_values`` (1 s of 16 kHz audio); encoder-decoder
models also get ``decoder_input_ids``. transformers is optional: ``torchinspect[models]``.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from torchinspect.errors import InspectError, first_line
from torchinspect.inputs import ExampleInputs, TensorSpec
from torchinspect.io.compare import checkpoint_side, match_keys, model_side, tied_groups
from torchinspect.io.layouts import read_hf_index, resolve_layout
from torchinspect.io.regular import member, read_regular
from torchinspect.sources.base import closest

PREFIX = "hf:"
TEXT_LENGTH = 128


def import_transformers() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach the network for a config
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    try:
        import transformers
    except ImportError:
        raise InspectError("Hugging Face models need the transformers package, which is not installed",
                           hint="pip install 'torchinspect[models]' (or pip install transformers)") from None
    transformers.logging.set_verbosity_error()
    return transformers


def is_model_dir(path: Path) -> bool:
    return path.is_dir() and (path / "config.json").is_file()


def _apply(config: Any, kwargs: dict[str, Any], what: str) -> Any:
    for key, value in kwargs.items():
        if not hasattr(config, key):
            near = closest(key, [k for k in config.to_dict() if not k.startswith("_")])
            raise InspectError(f"--arg {key}: {what} has no config attribute {key!r}",
                               hint=f"did you mean {', '.join(near)}?" if near
                               else "--arg sets attributes of the model's config")
        setattr(config, key, value)
    return config


_MAX_CONFIG_BYTES = 16 << 20  # a config.json is a few KB


def config_from_dir(path: Path, kwargs: dict[str, Any]) -> Any:
    tr = import_transformers()
    where = str(path / "config.json")
    try:  # read once, inside the folder (a link to elsewhere refused), as an untrusted file
        config_file = member(path, "config.json", what=str(path))
        raw = json.loads(bytes(read_regular(config_file, limit=_MAX_CONFIG_BYTES, what=where))
                         .decode("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise InspectError(f"{where}: not a readable JSON config ({first_line(exc, limit=120)})",
                           hint="a Hugging Face model folder holds the config.json saved by "
                           "save_pretrained") from None
    if not isinstance(raw, dict):
        raise InspectError(f"{where}: not a JSON object", hint="a Hugging Face model folder "
                           "holds the config.json saved by save_pretrained")
    model_type = raw.get("model_type")
    if not model_type or model_type not in tr.CONFIG_MAPPING:
        if raw.get("auto_map"):
            raise InspectError(f"{path}: the model needs its own code (auto_map), which torchinspect "
                               "does not run", hint="load it yourself with trust_remote_code=True "
                               "and pass the module to torchinspect.summarize")
        raise InspectError(f"{path / 'config.json'}: model_type {model_type!r} is not known to "
                           f"transformers {tr.__version__}",
                           hint="upgrade transformers, or check the config's model_type")
    try:  # from the bytes read above: the file is never read a second time
        config = tr.CONFIG_MAPPING[model_type].from_dict(raw)
    except Exception as exc:
        raise InspectError(f"{path / 'config.json'}: transformers cannot read it "
                           f"({first_line(exc, typed=True, limit=160)})",
                           hint="check the config.json against the model type's config class") from None
    return _apply(config, kwargs, str(path))


def config_for(arch: str, kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """``hf:ARCH`` -> (config, model class or None for AutoModel)."""
    tr = import_transformers()
    if not arch:
        raise InspectError("hf: needs an architecture", hint="e.g. hf:bert, hf:llama or hf:LlamaForCausalLM")
    cls = None
    if arch[0].isupper():  # a class name: LlamaForCausalLM
        cls = getattr(tr, arch, None)
        make = getattr(cls, "config_class", None)
        if cls is None or not isinstance(cls, type) or make is None:
            names = [n for n in dir(tr) if n.endswith(("Model", "LMHeadModel")) or "For" in n]
            near = closest(arch, names)
            if arch.lower() in tr.CONFIG_MAPPING:  # hf:Bert: the model type, capitalised
                near = [arch.lower(), *near][:3]
            raise InspectError(f"unknown transformers model class {arch!r}",
                               hint=f"did you mean {', '.join(PREFIX + n for n in near)}?" if near
                               else "name a model type (hf:llama) or class (hf:LlamaForCausalLM)")
    else:
        if arch not in tr.CONFIG_MAPPING:
            near = closest(arch, list(tr.CONFIG_MAPPING.keys()))
            raise InspectError(f"unknown transformers model type {arch!r}",
                               hint=f"did you mean {', '.join(PREFIX + n for n in near)}?" if near
                               else "model types are config.json's model_type values (bert, llama, ...)")
        def for_model(**kw: Any) -> Any:
            return tr.AutoConfig.for_model(arch, **kw)
        make = for_model
    _apply(make(), kwargs, PREFIX + arch)  # unknown keys: an error naming the close ones
    # built again with the values, so derived attributes follow them (llama's head_dim =
    # hidden_size // num_attention_heads is computed in __init__)
    return make(**kwargs), cls


def model_class(config: Any) -> Any:
    """The class named in ``config.architectures`` (transformers' own), else None (AutoModel)."""
    tr = import_transformers()
    for name in getattr(config, "architectures", None) or []:
        cls = getattr(tr, name, None)
        if isinstance(cls, type):
            return cls
    return None


def builder(config: Any, cls: Any, name: str) -> Callable[[str], Any]:
    """build(device) for this config (random init; meta allocates nothing)."""

    def build(device: str) -> Any:
        tr = import_transformers()
        import torch

        with warnings.catch_warnings(), torch.device(device):
            warnings.simplefilter("ignore")
            try:
                if cls is not None:
                    return cls._from_config(config)
                return tr.AutoModel.from_config(config)
            except InspectError:
                raise
            except ValueError as exc:
                raise InspectError(f"{name}: transformers cannot build a model from this config "
                                   f"({first_line(exc, limit=160)})",
                                   hint="name a model class: hf:ClassName, or a folder whose "
                                   "config.json lists architectures") from None

    return build


def _image_size(config: Any) -> tuple[int, int]:
    for cfg in (config, getattr(config, "vision_config", None)):
        size = getattr(cfg, "image_size", None) if cfg is not None else None
        if isinstance(size, int):
            return size, size
        if isinstance(size, (list, tuple)) and len(size) == 2:
            return int(size[0]), int(size[1])
    return 224, 224


def _channels(config: Any) -> int:
    for cfg in (config, getattr(config, "vision_config", None)):
        c = getattr(cfg, "num_channels", None) if cfg is not None else None
        if isinstance(c, int):
            return c
    return 3


def _vocab(config: Any) -> int | None:
    for cfg in (config, getattr(config, "text_config", None), getattr(config, "decoder", None)):
        v = getattr(cfg, "vocab_size", None) if cfg is not None else None
        if isinstance(v, int) and v > 0:
            return v
    return None


def _text_length(config: Any) -> int:
    """128 tokens, or fewer when the model has fewer positions (CLIP's text tower: 77)."""
    limits = []
    for cfg in (config, getattr(config, "text_config", None)):
        for attr in ("max_position_embeddings", "n_positions"):
            v = getattr(cfg, attr, None) if cfg is not None else None
            if isinstance(v, int) and v > 0:
                limits.append(v)
    return min([TEXT_LENGTH, *limits])


def default_example(model: Any, config: Any) -> ExampleInputs:
    """The keyword inputs a user of this model would pass (see the module docstring)."""
    import inspect as pyinspect

    main = getattr(model, "main_input_name", "input_ids")
    params: Mapping[str, pyinspect.Parameter]
    try:
        params = pyinspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        params = {}
    vocab = _vocab(config)
    ids = TensorSpec((1, _text_length(config)), "int64", None, vocab)
    kwargs: dict[str, Any] = {}
    if main == "pixel_values":
        h, w = _image_size(config)
        kwargs["pixel_values"] = TensorSpec((1, _channels(config), h, w))
    elif main == "input_features":
        mels = getattr(config, "num_mel_bins", None) or getattr(config, "feature_size", 80)
        kwargs["input_features"] = TensorSpec((1, int(mels or 80), 3000))
    elif main == "input_values":
        kwargs["input_values"] = TensorSpec((1, 16000))
    else:
        kwargs[main] = ids
        if "pixel_values" in params and getattr(config, "vision_config", None) is not None:
            h, w = _image_size(config)
            kwargs["pixel_values"] = TensorSpec((1, _channels(config), h, w))
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in params:
        dec_len = min(TEXT_LENGTH, int(getattr(config, "max_target_positions", TEXT_LENGTH)))
        kwargs["decoder_input_ids"] = TensorSpec((1, dec_len), "int64", None, vocab)
    return ExampleInputs((), kwargs)


def folder_weights(path: Path) -> Any:
    """The io Layout of a model folder's weights (one file, or shards + index), or None
    when it holds none."""
    try:
        layout = resolve_layout(path)
    except InspectError:
        return None
    return layout if layout.kind in ("file", "hf_sharded") else None


def folder_notes(path: Path, model: Any, *, trust_pickle: bool = False) -> list[str]:
    """Whether the folder's weights fit the model built from its config.json: keys, shapes
    and dtypes from the weights' headers (safetensors) or zip records (.bin), no tensor data.
    """
    layout = folder_weights(path)
    if layout is None:
        return ["built from config.json (random init; the folder holds no weights file)"]
    try:
        weights = checkpoint_side(path, trust_pickle=trust_pickle)
    except InspectError as exc:
        return [f"built from config.json; the folder's weights could not be read: {exc.message}"]
    where = layout.path.name
    if layout.kind == "hf_sharded":
        where = f"{len(set(read_hf_index(layout.path).values()))} shards"
    dtypes = sorted({t.dtype for t in weights.tensors.values() if t.kind == "tensor"})
    saved = f"{len(weights.tensors)} tensors in {where}, {'/'.join(dtypes) or '-'}"
    result = match_keys(model_side("config", model.state_dict(), tied=tied_groups(model)),
                              weights)
    head = f"built from config.json (random init); the folder's weights ({saved}; headers read, data not loaded)"
    if result.loads and not result.unexpected:
        tail = " match it: every key and shape"
        if result.tied_fill:
            tail += f" ({len(result.tied_fill)} tied key(s) not saved get their value through the tie)"
        return [head + tail]
    if result.loads:
        return [head + f" load into it with strict=False only: {len(result.unexpected)} saved "
                f"key(s) are not in the model (e.g. {result.unexpected[0]!r}); "
                f"`inspect diff {path}` lists every key"]
    parts = []
    if result.missing:
        parts.append(f"{len(result.missing)} missing (e.g. {result.missing[0]!r})")
    if result.unexpected:
        parts.append(f"{len(result.unexpected)} unexpected (e.g. {result.unexpected[0]!r})")
    if result.shape_mismatches:
        m = result.shape_mismatches[0]
        parts.append(f"{len(result.shape_mismatches)} shape mismatch(es) (e.g. {m.key}: "
                     f"{tuple(m.a.shape)} in the model, {tuple(m.b.shape)} saved)")
    return [head + f" do NOT match it: {', '.join(parts) or 'no key matches'}; "
            f"`inspect diff {path}` lists every key"]
