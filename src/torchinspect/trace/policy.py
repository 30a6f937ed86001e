"""Trace policy: which device the forward runs on, and when and why it falls back.

``trace_model`` runs on meta by default (no memory for weights or activations). When the
meta forward cannot run (data-dependent ops, ``.item()``, tensors kept as plain
attributes, quantized kernels) and ``fallback`` is true, it runs for real on CPU — on
``rebuild("cpu")`` when the model's own weights are on meta — and ``Trace.fallback_reason``
says why. The mechanism (hooks, counting, functional_call) is in engine.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from torchinspect import device as devices
from torchinspect.errors import InspectError, first_line, is_out_of_memory
from torchinspect.guard import contained, too_deep
from torchinspect.inputs import ExampleInputs
from torchinspect.shapes import shape_tree, tensor_bytes
from torchinspect.sources.case import ModelCase, describe_inputs, materialize
from torchinspect.sources.materialize import has_lazy, lazy_copy, lazy_names, real_copy, size_lazy
from torchinspect.trace.counting import sdpa_notes
from torchinspect.trace.engine import (
    ForwardWatch,
    fake_forward_inputs,
    is_quantized,
    meta_state,
    run_forward,
)
from torchinspect.trace.moe import moe_notes
from torchinspect.trace.records import Trace
from torchinspect.trace.static import collect_static


def trace_case(case: ModelCase, *, train: bool = False, watch: ForwardWatch | None = None) -> Trace:
    """Trace a model case on the device it asked for (auto: meta with a CPU fallback);
    ``watch`` shares the meta forward (see :func:`trace_model`)."""
    rebuild = None if case.kind == "module" else case.rebuild  # a caller's module: a copy
    return trace_model(case.model, case.require_example(), device=case.requested, train=train,
                       rebuild=rebuild, fallback=case.requested != "meta", watch=watch)


def _why(exc: BaseException) -> str:
    """``Type: first sentence`` of an exception, short enough for one output line."""
    return first_line(exc, limit=240, typed=True, sentence=True)  # torch's dtype errors fit


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


@contained
def trace_model(
    model: nn.Module,
    inputs: ExampleInputs | Any,
    *,
    device: str = "meta",
    train: bool = False,
    rebuild: Callable[[str], nn.Module] | None = None,
    fallback: bool = True,
    watch: ForwardWatch | None = None,
) -> Trace:
    """Run one instrumented forward of ``model`` on ``inputs`` and return its Trace.

    ``device``: "meta"/"auto" (default; no memory), or "cpu"/"cuda[:N]" to force a real run
    there (the model must already be there or be rebuildable). The model's code runs
    contained (``torchinspect.guard.contained``): torch's switches it sets are put back.
    ``watch``: another reader of the meta forward (summary's memory line); it sees the
    forward only when that runs on meta, as given (no lazy copy), and its failure only
    costs a second forward without it: the Trace is the same either way.
    """
    if not isinstance(model, nn.Module):
        raise InspectError(f"expected a torch.nn.Module, got {type(model).__name__}",
                           hint="pass the model object (or a model name to the analysis API)")
    notes: list[str] = []
    subject = model
    if has_lazy(model):  # the caller's lazy modules stay lazy: a copy is materialized
        subject = materialized_lazy(model, inputs, train, notes)
    target, reason = _start_device(subject, device)
    infos, stats = collect_static(subject)
    result = None
    if target == "meta":
        args, kwargs = materialize(inputs, "meta")
        try:
            result = _meta_forward(subject, infos, args, kwargs, train,
                                   watch if subject is model else None)
        except InspectError:
            raise
        except Exception as exc:  # the meta forward is impossible: fake tensors, else go real
            result = _fake_attempt(subject, infos, args, kwargs, train, exc, notes)
            if result is None:
                if not fallback:
                    raise InspectError(f"the forward cannot run on the meta device: {_why(exc)}",
                                       hint="use --device auto (falls back to CPU) or --device cpu") from None
                if not devices.looks_meta_related(exc) and not devices.fits_comfortably(
                        devices.weight_bytes(subject)):
                    raise forward_error(exc, inputs) from None
                reason = f"meta forward failed ({_why(exc)})"
                target = "cpu"
                notes.append(_bound_real_fallback(subject, inputs, reason))
    if result is None:
        run_model, target = _real_model(subject, target, reason, rebuild, notes)
        if run_model is not subject and run_model is not model and has_lazy(run_model):
            # a rebuild of a lazy spec: sized like the meta copy was
            run_model = size_lazy(run_model, *materialize(inputs, target),
                                  name=type(model).__name__, inputs=describe_inputs(inputs))
        if run_model is not subject:
            infos, stats = collect_static(run_model)
        args, kwargs = materialize(inputs, target)
        try:
            result = run_forward(run_model, infos, args, kwargs, None, train)
        except InspectError:
            raise
        except Exception as exc:
            raise forward_error(exc, inputs) from None
        subject = run_model
    trace = _assemble(model, inputs, target, train, infos, stats, result, reason)
    trace.notes[:0] = notes
    trace.notes.extend(moe_notes(subject, infos))
    return trace


def _meta_forward(model: nn.Module, infos: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                  train: bool, watch: ForwardWatch | None) -> Any:
    """The meta forward, shared with ``watch`` where it applies; a shared forward that fails
    runs again on the trace's own stand-ins (the failure may be the watch's)."""
    if watch is not None and not train and watch.applies(model):
        state, watched_args, watched_kwargs = watch.prepare(model, args, kwargs)
        try:
            return run_forward(model, infos, watched_args, watched_kwargs, state, train,
                               watch=watch)
        except Exception:  # noqa: BLE001 - the trace's own forward decides what the error is
            watch.failed()
    return run_forward(model, infos, args, kwargs, meta_state(model), train)


#: The CPU fallback is refused when its example inputs alone take more than this: a real
#: forward allocates the inputs, the weights and every activation (several times the inputs).
REAL_FALLBACK_INPUT_BYTES = 64_000_000


def _bound_real_fallback(model: nn.Module, inputs: Any, reason: str) -> str:
    """What the real CPU run is about to allocate (the note that says so), or an error when
    its inputs alone are over :data:`REAL_FALLBACK_INPUT_BYTES`."""
    in_bytes = inputs.nbytes if isinstance(inputs, ExampleInputs) else tensor_bytes(inputs)
    w_bytes = devices.weight_bytes(model)
    need = f"weights {devices.fmt_size(w_bytes)} + inputs {devices.fmt_size(in_bytes)} + activations"
    if in_bytes > REAL_FALLBACK_INPUT_BYTES:  # (weights that do not fit: _real_model refuses)
        raise InspectError(
            f"{reason}; running the forward for real on the CPU instead would allocate {need} "
            f"(inputs over the {devices.fmt_size(REAL_FALLBACK_INPUT_BYTES)} limit of that "
            "fallback): refused",
            hint="check --input (a smaller shape traces on meta the same way), or pass "
            "--device cpu to run it for real anyway")
    return f"{reason}: ran for real on the CPU instead, allocating {need}"


def _fake_attempt(model: nn.Module, infos: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                  train: bool, exc: BaseException, notes: list[str]) -> Any:
    """The forward under FakeTensorMode when the meta one asked for a value (``.item()``).

    Hugging Face transformers skips its value checks (padding warnings, causal-mask
    shortcuts) on fake tensors, so BART or DeBERTa-v2 trace without weights; anything
    else that needs a value raises under fake tensors too, and the CPU fallback runs.
    Shapes and counts are exact either way: fake tensors carry no values."""
    if "item()" not in str(exc) and "data-dependent" not in str(exc).lower():
        return None
    try:
        mode, state, fargs, fkwargs = fake_forward_inputs(model, args, kwargs)
        result = run_forward(model, infos, fargs, fkwargs, state, train, fake_mode=mode)
    except Exception:  # noqa: BLE001 - the forward needs real values: the CPU fallback decides
        return None
    notes.append(f"traced with fake tensors (no memory): the meta forward needed a value "
                 f"({_why(exc)}) and the model skips that check under FakeTensorMode")
    return result


def materialized_lazy(model: nn.Module, inputs: Any, train: bool, notes: list[str]) -> nn.Module:
    """A copy of ``model`` whose lazy modules took their shapes from a forward on ``inputs``."""
    names = lazy_names(model)
    copy = lazy_copy(model)
    size_lazy(copy, *materialize(inputs, "meta"), name=None, inputs=describe_inputs(inputs),
              train=train)
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    notes.append(f"lazy parameters ({shown}) took their shapes from a forward on the example "
                 "input (on a copy; the model passed in stays lazy)")
    return copy


def _real_model(model: nn.Module, target: str, reason: str | None,
                rebuild: Callable[[str], nn.Module] | None,
                notes: list[str]) -> tuple[nn.Module, str]:
    """The module to run for real on ``target`` (never moves the user's model)."""
    if devices.has_meta_tensors(model):
        if rebuild is not None:
            return rebuild(target), target
        devices.check_available(target)
        copy = real_copy(model, target)
        notes.append(f"the model's weights are on meta: the {target} run used a copy with "
                     f"initialized weights ({devices.fmt_size(devices.weight_bytes(model))}); "
                     "shapes and counts are the model's, values are not")
        return copy, target
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
    notes = list(sdpa_notes(counter.notes))
    if counter.data_dependent:
        ops = ", ".join(f"{op} ×{n}" for op, n in sorted(counter.data_dependent.items()))
        given = ("random values, seed 0" if isinstance(inputs, ExampleInputs)
                 else "the tensors passed in")
        notes.append(f"input-dependent count: the forward ran value-dependent ops ({ops}); these "
                     f"MACs are for input {describe_inputs(inputs)} ({given}); other values "
                     "give other counts")
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
        notes=notes,
        fallback_reason=reason,
        param_reads=dict(rec.reads),
    )


def forward_error(exc: BaseException, inputs: Any) -> InspectError:
    """The model's forward failed on ``inputs``: a user error naming them, or running out of
    memory (not the input's fault: the hint says how to need less)."""
    shown = describe_inputs(inputs)  # shapes and dtypes only, never tensor values
    deep = too_deep(exc)  # the model's nesting, not the input: exit 70 naming the model's code
    if deep is not None:
        return deep
    if is_out_of_memory(exc):
        return InspectError(
            f"ran out of memory running the model's forward for input {shown}: {_why(exc)}",
            hint="use the default --device meta (no memory for weights or activations), a "
            "smaller --input or --batch, or a device with more memory")
    return InspectError(
        f"the model's forward failed for input {shown}: {_why(exc)}",
        hint=("token ids need an integer dtype: --input long:... (e.g. long:1,128)"
              if _wants_integers(exc) else
              "check --input (shape, dtype, how many inputs) against what the model's forward expects"),
    )


def _wants_integers(exc: BaseException) -> bool:
    """An embedding (or gather) given floats: the input was token ids written as floats."""
    text = str(exc)
    return "'indices'" in text and ("Long" in text or "Int" in text)
