"""Trace policy: which device the forward runs on, and when and why it falls back.

``trace_model`` runs on meta by default (no memory for weights or activations). When the
meta forward cannot run (data-dependent ops, ``.item()``, tensors kept as plain
attributes, quantized kernels) and ``fallback`` is true, it runs for real on CPU — on
``rebuild("cpu")`` when the model's own weights are on meta — and ``Trace.fallback_reason``
says why. The mechanism (hooks, counting, functional_call) is in engine.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from torchinspect import device as devices
from torchinspect.errors import InspectError
from torchinspect.inputs import ExampleInputs
from torchinspect.shapes import shape_tree, tensor_bytes
from torchinspect.sources.case import ModelCase, materialize
from torchinspect.trace.counting import sdpa_notes
from torchinspect.trace.engine import is_quantized, meta_state, run_forward
from torchinspect.trace.records import Trace
from torchinspect.trace.static import collect_static


def trace_case(case: ModelCase, *, train: bool = False) -> Trace:
    """Trace a model case on the device it asked for (auto: meta with a CPU fallback)."""
    return trace_model(case.model, case.require_example(), device=case.requested, train=train,
                       rebuild=case.rebuild, fallback=case.requested != "meta")


def _first_line(exc: BaseException) -> str:
    """``Type: first sentence`` of an exception, short enough for one output line."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    sentence = re.split(r"(?<=[.!?])\s", line, maxsplit=1)[0]
    out = f"{type(exc).__name__}: {sentence}"
    return out if len(out) <= 160 else out[:157] + "..."


def _start_device(model: nn.Module, device: str) -> tuple[str, str | None]:
    """The device the first attempt runs on, and why it is not meta when meta was asked."""
    want = devices.build_device(devices.parse_device(device))
    if want != "meta":
        devices.check_available(want)
        return want, None
    if is_quantized(model) or isinstance(model, torch.jit.ScriptModule):
        reason = ("quantized kernels run on CPU only" if is_quantized(model)
                  else "TorchScript modules cannot run on meta")
        here = devices.model_device(model)
        return ("cpu" if here == "meta" else here), reason
    return "meta", None


def trace_model(
    model: nn.Module,
    inputs: ExampleInputs | Any,
    *,
    device: str = "meta",
    train: bool = False,
    rebuild: Callable[[str], nn.Module] | None = None,
    fallback: bool = True,
) -> Trace:
    """Run one instrumented forward of ``model`` on ``inputs`` and return its Trace.

    ``device``: "meta"/"auto" (default; no memory), or "cpu"/"cuda[:N]" to force a real run
    there (the model must already be there or be rebuildable).
    """
    if not isinstance(model, nn.Module):
        raise InspectError(f"expected a torch.nn.Module, got {type(model).__name__}",
                           hint="pass the model object (or a model name to the analysis API)")
    target, reason = _start_device(model, device)
    infos, stats = collect_static(model)
    result = None
    run_model = model
    if target == "meta":
        args, kwargs = materialize(inputs, "meta")
        try:
            result = run_forward(model, infos, args, kwargs, meta_state(model), train)
        except InspectError:
            raise
        except Exception as exc:  # the meta forward is impossible: go real
            if not fallback:
                raise InspectError(f"the forward cannot run on the meta device: {_first_line(exc)}",
                                   hint="use --device auto (falls back to CPU) or --device cpu") from None
            if not devices.looks_meta_related(exc) and not devices.fits_comfortably(
                    devices.weight_bytes(model)):
                raise _forward_error(exc, inputs) from None
            reason = f"meta forward failed ({_first_line(exc)})"
            target = "cpu"
    if result is None:
        run_model, target = _real_model(model, target, reason, rebuild)
        if run_model is not model:
            infos, stats = collect_static(run_model)
        args, kwargs = materialize(inputs, target)
        try:
            result = run_forward(run_model, infos, args, kwargs, None, train)
        except InspectError:
            raise
        except Exception as exc:
            raise _forward_error(exc, inputs) from None
    return _assemble(model, inputs, target, train, infos, stats, result, reason)


def _real_model(model: nn.Module, target: str, reason: str | None,
                rebuild: Callable[[str], nn.Module] | None) -> tuple[nn.Module, str]:
    """The module to run for real on ``target`` (never moves the user's model)."""
    if devices.has_meta_tensors(model):
        if rebuild is None:
            raise InspectError(
                "the model's weights are on meta and its forward needs real tensors "
                f"({reason or 'a real run was requested'})",
                hint="load it through torchinspect.sources.load_model (it can rebuild it), "
                "or pass rebuild=")
        return rebuild(target), target
    here = devices.model_device(model)
    if reason is None and here.split(":")[0] != target.split(":")[0]:  # a forced real run elsewhere
        raise InspectError(f"the model's weights are on {here}, not {target}",
                           hint=f"use --device {here.split(':')[0]} or the default meta device")
    return model, here


def _assemble(model: nn.Module, inputs: Any, target: str, train: bool, infos: Any, stats: Any,
              result: Any, reason: str | None) -> Trace:
    rec, counter, out = result
    if rec.outside and rec.calls:
        for op, n in rec.outside.items():
            rec.calls[0].macs[op] = rec.calls[0].macs.get(op, 0) + n
    for call in reversed(rec.calls):
        call.total_macs = call.own_macs + sum(rec.calls[i].total_macs for i in call.children)
    if isinstance(inputs, ExampleInputs):
        args, kwargs = inputs.materialize("meta")
        in_tree = shape_tree(args if not kwargs else (*args, kwargs))
        in_bytes = inputs.nbytes
    else:
        in_tree, in_bytes = shape_tree(inputs), tensor_bytes(inputs)
    return Trace(
        model_type=type(model).__name__,
        device=target,
        train=train,
        inputs=in_tree,
        input_bytes=in_bytes,
        outputs=shape_tree(out),
        modules=infos,
        calls=rec.calls,
        params=stats,
        uncounted=dict(sorted(counter.uncounted.items(), key=lambda kv: (-kv[1], kv[0]))),
        op_calls=dict(counter.op_calls),
        notes=list(sdpa_notes(counter.notes)),
        fallback_reason=reason,
    )


def _forward_error(exc: BaseException, inputs: Any) -> InspectError:
    shown = inputs.describe() if isinstance(inputs, ExampleInputs) else "the given inputs"
    return InspectError(
        f"the model's forward failed for input {shown}: {_first_line(exc)}",
        hint="check --input (shape, dtype, how many inputs) against what the model's forward expects",
    )
