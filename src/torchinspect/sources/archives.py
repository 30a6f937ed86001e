"""Files that are models themselves: TorchScript, torch.export .pt2, full pickles (trusted).

A plain weights file without an architecture is refused with a hint to pass --arch.
"""

from __future__ import annotations

import warnings
from typing import Any

from torchinspect import device as devices
from torchinspect.errors import InspectError, first_line
from torchinspect.inputs import ExampleInputs, TensorSpec
from torchinspect.io.checkpoint import (
    CheckpointFormat,
    detect_format,
    extract_state_dict,
    read_checkpoint,
)
from torchinspect.io.pt2 import load_exported_program
from torchinspect.io.torchscript import torchscript_refusal
from torchinspect.sources.base import LoadedModel, SourceKind
from torchinspect.sources.pt2 import check_pt2


def load_file(spec: str, *, key: str | None, trust_pickle: bool, device: str) -> LoadedModel:
    import torch

    fmt = detect_format(spec)
    real = devices.real_device(device)
    notes: list[str] = []
    if fmt == CheckpointFormat.torchscript:
        if not trust_pickle:  # torch.jit.load runs the archive's __setstate__ code
            raise torchscript_refusal(spec)

        def build(dev: str) -> Any:
            try:
                with warnings.catch_warnings():  # torch's own deprecation of TorchScript:
                    warnings.filterwarnings(  # noise under every summary of a .ts.pt file
                        "ignore", message=r".*torch\.jit\.load.* is deprecated", category=FutureWarning)
                    return torch.jit.load(spec, map_location=dev)
            except RuntimeError as exc:
                raise InspectError(f"{spec}: not a loadable TorchScript archive ({first_line(exc)})",
                                   hint="re-export it with torch.jit.save") from None

        model = build(real)
        notes.append("TorchScript archive: traced on a real device (meta is not supported)")
        return LoadedModel(model, spec, SourceKind.torchscript, None, real, notes, build)
    if fmt == CheckpointFormat.export_pt2:
        check_pt2(spec, trust_pickle)

        def load_ep() -> Any:
            if not trust_pickle:  # never torch.export.load on an untrusted file
                return load_exported_program(spec)
            try:
                return torch.export.load(spec)
            except Exception as exc:
                raise InspectError(f"{spec}: not a loadable torch.export program ({type(exc).__name__})",
                                   hint="save it with torch.export.save(torch.export.export(model, args), path)") from None

        def build_ep(dev: str) -> Any:
            module = load_ep().module()
            return module.to(dev) if dev != "cpu" else module

        ep = load_ep()
        model = ep.module()
        example = _example_from_export(ep)
        notes.append("torch.export program: traced on CPU through ExportedProgram.module()")
        return LoadedModel(model, spec, SourceKind.export, example, "cpu", notes, build_ep)

    ckpt = read_checkpoint(spec, trust_pickle=trust_pickle)
    if isinstance(ckpt.obj, torch.nn.Module):
        model = ckpt.obj
        notes.append("full pickled nn.Module loaded with --trust-pickle")
        return LoadedModel(model, spec, SourceKind.pickle, None, devices.model_device(model), notes, None)
    state, _ = extract_state_dict(ckpt.obj, key=key, source=spec)
    raise InspectError(
        f"{spec} holds weights ({len(state)} tensors) but no architecture",
        hint=f"name the architecture: inspect summary {spec} --arch resnet18 (or zoo:NAME, file.py:Name); "
        f"`inspect diff {spec} ARCH` compares it without loading",
    )


def _example_from_export(ep: Any) -> ExampleInputs | None:
    """The example shapes a .pt2 program was exported with (its placeholder metadata)."""
    specs = []
    user_inputs = set(ep.graph_signature.user_inputs)
    for node in ep.graph.nodes:
        if node.op == "placeholder" and node.name in user_inputs:
            val = node.meta.get("val")
            if val is None or not hasattr(val, "shape"):
                return None
            try:
                shape = tuple(int(d) for d in val.shape)
            except TypeError:
                return None
            specs.append(TensorSpec(shape, str(val.dtype).removeprefix("torch.")))
    return ExampleInputs(tuple(specs)) if specs else None
