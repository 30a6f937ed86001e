"""Verification in onnxruntime: the written file run at batch 1 and 3 (or the example's
fixed size) against PyTorch on the same inputs, every output compared elementwise."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from torchinspect.errors import first_line, is_out_of_memory
from torchinspect.export.onnx.plan import ExportPlan, bound_arguments, export_leaves
from torchinspect.export.onnx.result import OutputDiff, VerifyRun
from torchinspect.guard import training_mode
from torchinspect.trace.engine import model_kept

VERIFY_BATCHES = (1, 3)


def verify_export(plan: ExportPlan) -> list[VerifyRun]:
    """One :class:`VerifyRun` per batch size; a file onnxruntime cannot load is one failed run."""
    t0 = time.perf_counter()
    leaves = export_leaves((plan.args, plan.kwargs))
    batch0 = int(leaves[0].shape[0]) if leaves and leaves[0].dim() else 1
    has_batch = any(0 in dims for dims in plan.marked.values())
    sizes = list(VERIFY_BATCHES) if has_batch else [batch0]
    import onnxruntime as ort

    try:
        session = _session(plan.target, ort)
    except Exception as exc:  # noqa: BLE001 - e.g. no CPU kernel for a bf16 Gemm
        shown = ", ".join(str(tuple(t.shape)) for t in leaves)
        runs = [VerifyRun(batch0, shown, error=(
            f"onnxruntime (CPU) cannot run the file: {first_line(exc)}; the file is "
            "written and passes the ONNX checker (--no-verify skips this step)"))]
    else:
        with model_kept(plan.model), training_mode(plan.model):
            # the last run also moves every --dynamic dim (the first keeps the example's)
            runs = [_verify_run(plan.model, session, plan.args, plan.kwargs, b, batch0,
                                plan.marked, plan.extra if b == sizes[-1] else [], plan.atol,
                                plan.rtol)
                    for b in sizes]
    plan.seconds["verify"] = time.perf_counter() - t0
    return runs


def _resized(t: Any, shape: list[int], gen: Any) -> Any:
    """A tensor like ``t`` at ``shape``: new random values within t's range."""
    import torch

    if list(t.shape) == shape:
        return t
    if t.is_floating_point():  # drawn on the CPU generator, then put where t lives
        return torch.randn(shape, generator=gen, dtype=torch.float32).to(t.device, t.dtype)
    if t.dtype == torch.bool:
        return (torch.zeros(shape, dtype=torch.bool) | bool(t.flatten()[:1].any())).to(t.device)
    lo, hi = (int(t.min()), int(t.max())) if t.numel() else (0, 0)
    return torch.randint(lo, hi + 1, shape, generator=gen, dtype=torch.int64).to(t.device, t.dtype)


def _inputs_at(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], batch: int, batch0: int,
               marked: dict[str, list[int]], extra: list[tuple[str, int]]) -> tuple[Any, Any]:
    import torch

    from torchinspect.privtorch import tree_map

    if batch == batch0 and not extra:
        return args, kwargs
    gen = torch.Generator().manual_seed(batch)
    bound = bound_arguments(model, args, kwargs) or {}
    by_id = {}
    for pname, value in bound.items():
        for t in export_leaves(value):
            by_id[id(t)] = pname

    def resize(v: Any) -> Any:
        if not isinstance(v, torch.Tensor):
            return v
        pname = by_id.get(id(v))
        dims = marked.get(pname, []) if pname else []
        shape = list(v.shape)
        if 0 in dims and shape and shape[0] == batch0:
            shape[0] = batch
        for name, d in extra:
            if name == pname:
                d %= v.dim()
                if d != 0:
                    shape[d] = shape[d] - 1 if shape[d] > 2 else shape[d] + 1
        return _resized(v, shape, gen)

    return tree_map(resize, (args, kwargs))


def _verify_run(model: Any, sess: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                batch: int, batch0: int, marked: dict[str, list[int]],
                extra: list[tuple[str, int]], atol: float, rtol: float) -> VerifyRun:
    import numpy as np
    import torch

    a, k = _inputs_at(model, args, kwargs, batch, batch0, marked, extra)
    leaves = export_leaves((a, k))
    shown = ", ".join("(" + ", ".join(str(d) for d in t.shape) + ")" for t in leaves)
    run = VerifyRun(batch, shown)
    try:
        from torchinspect.privtorch import tree_map_only

        # copies: a forward that edits its input in place must not change onnxruntime's feed
        ca, ck = tree_map_only(torch.Tensor, torch.clone, (tuple(a), dict(k)))
        with torch.no_grad():
            expected = [t.detach().cpu() for t in export_leaves(model(*ca, **ck))]
    except Exception as exc:  # noqa: BLE001 - the model's own forward at the moved sizes
        if is_out_of_memory(exc):
            run.error = (f"PyTorch ran out of memory running the model at these sizes "
                         f"({first_line(exc)}); the file is written: verify it on a machine "
                         "with more memory, or pass --no-verify")
        else:
            run.error = (f"PyTorch itself fails at these sizes ({first_line(exc)}): a "
                         "dimension made dynamic is not free in this model; drop it from "
                         "--dynamic or pass --static")
        return run
    try:
        feeds_spec = sess.get_inputs()
        if len(feeds_spec) != len(leaves):
            run.error = (f"the ONNX file takes {len(feeds_spec)} inputs, the model "
                         f"{len(leaves)} tensors")
            return run
        feeds = {i.name: t.detach().cpu().numpy() for i, t in zip(feeds_spec, leaves, strict=True)}
        got = sess.run(None, feeds)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
        run.error = f"onnxruntime: {first_line(exc)}"
        return run
    if len(got) != len(expected):
        run.error = f"onnxruntime returned {len(got)} outputs, PyTorch {len(expected)}"
        return run
    names = [o.name for o in sess.get_outputs()]
    for name, g, e in zip(names, got, expected, strict=True):
        ref = e.to(torch.float64).numpy() if e.is_floating_point() else e.numpy()
        out = np.asarray(g)
        if out.shape != ref.shape:
            run.error = f"{name}: shape {list(out.shape)} from onnxruntime, {list(ref.shape)} from PyTorch"
            return run
        run.outputs.append(compare_arrays(name, out, ref, atol, rtol))
    return run


def compare_arrays(name: str, out: Any, ref: Any, atol: float, rtol: float) -> OutputDiff:
    """onnxruntime's ``out`` against PyTorch's ``ref`` as torch.allclose judges it: ok when
    every element is within ``atol + rtol * |ref|``; ``tolerance_used`` is the worst
    element's share of its own tolerance (ok <=> <= 1)."""
    import numpy as np

    o64, r64 = np.asarray(out).astype(np.float64), np.asarray(ref).astype(np.float64)
    # NaN where both give NaN, and the same infinity on both, agree (np.isclose's equal_nan)
    same = (np.isnan(o64) & np.isnan(r64)) | (np.isinf(o64) & (o64 == r64))
    diff = np.where(same, 0.0, np.abs(o64 - r64))
    scale = np.where(same, 0.0, np.abs(r64))
    if not diff.size:
        return OutputDiff(name, list(r64.shape), 0.0, 0.0, True, 0.0)
    tol = atol + rtol * scale

    def worst(denominator: Any) -> float:  # max of diff / denominator, 0/0 = 0, x/0 = inf
        ratio = np.divide(diff, denominator, out=np.full_like(diff, np.inf),
                          where=denominator > 0)
        return float(np.where(diff == 0, 0.0, ratio).max())

    return OutputDiff(name, list(r64.shape), float(diff.max()), worst(np.maximum(scale, atol)),
                      bool(np.all(diff <= tol)), worst(tol))


def _session(target: Path, ort: Any) -> Any:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(str(target), opts, providers=["CPUExecutionProvider"])
