"""The op shapes the latency tables are measured on (benchmarks/latency_measure.py runs them
on a GPU; benchmarks/latency_tables.py replays them on meta to get their FLOPs and bytes).

Each spec is a plain dict (JSON-ready); ``build(spec, device, dtype)`` returns a
zero-argument callable that runs the op once on tensors made on ``device``. Shapes cover
what CNNs, vision and language transformers run (see the comments), not one model's.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _specs() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    # linear layers (addmm): tokens or batch x (K -> N)
    kn = [(256, 256), (768, 768), (768, 3072), (3072, 768), (1024, 4096), (4096, 4096),
          (2048, 1000), (512, 128), (4096, 11008), (1280, 1000)]
    for m in (1, 8, 32, 128, 512, 2048, 8192, 32768):
        for k, n in kn:
            if m * k * n <= 1 << 36:
                out.append({"kind": "linear", "m": m, "k": k, "n": n})
    # batched matmuls (attention written out, window attention)
    for b, m, k, n in [(12, 197, 64, 197), (384, 197, 64, 197), (12, 197, 197, 64),
                       (384, 197, 197, 64), (96, 49, 32, 49), (3072, 49, 32, 49),
                       (64, 128, 64, 128), (384, 128, 128, 64), (8, 1024, 64, 1024),
                       (256, 64, 64, 64), (1, 512, 512, 512)]:
        out.append({"kind": "bmm", "b": b, "m": m, "k": k, "n": n})
    # convolutions: (cin, hw, cout, k, stride, groups); padding k // 2
    convs = [
        (3, 224, 64, 7, 2, 1), (3, 224, 32, 3, 2, 1), (3, 224, 96, 4, 4, 1),
        (3, 224, 768, 16, 16, 1), (3, 224, 768, 32, 32, 1), (3, 224, 64, 11, 4, 1),
        (64, 56, 64, 3, 1, 1), (128, 28, 128, 3, 1, 1), (256, 14, 256, 3, 1, 1),
        (512, 7, 512, 3, 1, 1), (64, 224, 64, 3, 1, 1), (128, 56, 128, 3, 2, 1),
        (256, 28, 256, 3, 2, 1), (64, 56, 256, 1, 1, 1), (256, 56, 64, 1, 1, 1),
        (512, 28, 128, 1, 1, 1), (1024, 14, 256, 1, 1, 1), (2048, 7, 512, 1, 1, 1),
        (256, 56, 512, 1, 2, 1), (1280, 7, 1280, 1, 1, 1), (16, 112, 96, 1, 1, 1),
        (32, 112, 32, 3, 1, 32), (144, 56, 144, 3, 1, 144), (384, 14, 384, 3, 1, 384),
        (960, 7, 960, 3, 1, 960), (96, 112, 96, 3, 2, 96), (240, 28, 240, 5, 1, 240),
        (672, 14, 672, 5, 1, 672), (96, 56, 96, 7, 1, 96), (384, 14, 384, 7, 1, 384),
        (128, 56, 128, 3, 1, 32), (256, 28, 256, 3, 1, 16), (448, 14, 448, 3, 1, 56),
        (96, 28, 96, 5, 1, 1), (192, 28, 64, 5, 1, 1),
    ]
    for n in (1, 32):
        for cin, hw, cout, k, s, g in convs:
            out.append({"kind": "conv2d", "n": n, "cin": cin, "hw": hw, "cout": cout, "k": k,
                        "stride": s, "groups": g})
    conv3d = [(3, 16, 112, 64, (3, 7, 7), (1, 2, 2)), (64, 16, 56, 64, (3, 3, 3), (1, 1, 1)),
              (128, 8, 28, 128, (3, 3, 3), (1, 1, 1)), (256, 4, 14, 256, (3, 3, 3), (1, 1, 1)),
              (128, 8, 28, 256, (3, 3, 3), (2, 2, 2))]
    for n in (1, 32):
        for cin, t, hw, cout, k, s in conv3d:
            out.append({"kind": "conv3d", "n": n, "cin": cin, "t": t, "hw": hw, "cout": cout,
                        "k": list(k), "stride": list(s)})
    # fused attention
    for b, h, s, d, causal in [(1, 12, 197, 64, False), (32, 12, 197, 64, False),
                               (1, 12, 128, 64, True), (32, 12, 128, 64, True),
                               (1, 32, 512, 128, True), (8, 32, 1024, 128, True),
                               (32, 12, 50, 64, False), (1, 12, 1024, 64, False),
                               (32, 16, 256, 64, False), (4, 8, 2048, 64, True)]:
        out.append({"kind": "sdpa", "b": b, "h": h, "s": s, "d": d, "causal": causal})
    # normalization
    for rows, c in [(197, 768), (6304, 768), (128, 4096), (4096, 4096), (50176, 96),
                    (12544, 384), (32, 1024)]:
        out.append({"kind": "layer_norm", "rows": rows, "c": c})
        out.append({"kind": "rms_norm", "rows": rows, "c": c})
    for n, c, hw in [(1, 64, 112), (32, 64, 112), (32, 256, 56), (1, 512, 7), (32, 2048, 7),
                     (1, 256, 56), (32, 32, 112)]:
        out.append({"kind": "batch_norm", "n": n, "c": c, "hw": hw})
    for n, c, hw in [(1, 256, 28), (32, 256, 28), (8, 512, 64)]:
        out.append({"kind": "group_norm", "n": n, "c": c, "hw": hw})
    # elementwise, reductions, copies over sizes
    for e in (10, 14, 17, 20, 22, 24, 26):
        numel = 1 << e
        for op in ("relu", "gelu", "add", "mul_bcast", "sigmoid", "hardswish"):
            out.append({"kind": "eltwise", "op": op, "numel": numel})
        for op in ("contiguous", "cat", "clone"):
            out.append({"kind": "copy", "op": op, "numel": numel})
    for rows, cols in [(1, 1000), (32, 1000), (2304, 197), (73728, 197), (147456, 49),
                       (1536, 128), (49152, 128), (32, 50257), (4096, 1024)]:
        out.append({"kind": "softmax", "rows": rows, "cols": cols})
        out.append({"kind": "sum", "rows": rows, "cols": cols})
    for n, c, hw in [(1, 2048, 7), (32, 2048, 7), (32, 256, 56), (1, 1280, 7), (32, 96, 56)]:
        out.append({"kind": "avgpool", "n": n, "c": c, "hw": hw})
    for n, c, hw in [(1, 64, 112), (32, 64, 112), (32, 192, 56)]:
        out.append({"kind": "maxpool", "n": n, "c": c, "hw": hw})
    for tokens, vocab, dim in [(128, 50257, 768), (4096, 50257, 768), (32, 30522, 768)]:
        out.append({"kind": "embedding", "tokens": tokens, "vocab": vocab, "dim": dim})
    return out + _specs_2()


def _specs_2() -> list[dict[str, Any]]:
    """Sweep 2 (session 7): op kinds the first sweep missed, in generic shapes (no model's
    exact layers): 3D convolutions by kernel shape and stride, without a bias (the
    convolution-then-norm of video CNNs); attention by kernel (flash, memory-efficient, math;
    with and without a mask); ``nn.TransformerEncoderLayer`` and ``nn.MultiheadAttention``
    in eval, fast path on and off; small 2D convolutions without a bias (batch-1 floors)."""
    out: list[dict[str, Any]] = []
    conv3d = [  # (cin, t, hw, cout, k, stride)
        (3, 8, 128, 48, (3, 7, 7), (1, 2, 2)), (3, 8, 128, 32, (1, 7, 7), (1, 2, 2)),
        (48, 8, 64, 48, (1, 3, 3), (1, 1, 1)), (96, 8, 32, 96, (1, 3, 3), (1, 1, 1)),
        (192, 4, 16, 192, (1, 3, 3), (1, 2, 2)), (48, 8, 64, 48, (3, 1, 1), (1, 1, 1)),
        (144, 8, 32, 96, (3, 1, 1), (1, 1, 1)), (288, 4, 16, 192, (3, 1, 1), (2, 1, 1)),
        (96, 8, 32, 96, (3, 3, 3), (1, 1, 1)), (192, 4, 16, 192, (3, 3, 3), (1, 1, 1)),
        (96, 8, 32, 192, (3, 3, 3), (2, 2, 2)), (384, 2, 8, 384, (3, 3, 3), (1, 1, 1)),
        (96, 8, 32, 192, (1, 1, 1), (2, 2, 2)), (192, 4, 16, 48, (1, 1, 1), (1, 1, 1)),
    ]
    for n in (1, 8):
        for cin, t, hw, cout, k, st in conv3d:
            out.append({"kind": "conv3d", "n": n, "cin": cin, "t": t, "hw": hw, "cout": cout,
                        "k": list(k), "stride": list(st), "bias": False, "sweep": 2})
    for n in (1, 16):
        for cin, hw, cout, k, st, g in [(48, 64, 48, 3, 1, 1), (96, 32, 96, 3, 1, 1),
                                        (192, 16, 192, 3, 1, 1), (384, 8, 384, 3, 1, 1),
                                        (96, 32, 384, 1, 1, 1), (384, 8, 96, 1, 1, 1),
                                        (192, 16, 192, 3, 1, 192)]:
            out.append({"kind": "conv2d", "n": n, "cin": cin, "hw": hw, "cout": cout, "k": k,
                        "stride": st, "groups": g, "bias": False, "sweep": 2})
    attn = [(1, 8, 64, 64), (16, 8, 64, 64), (1, 16, 256, 64), (16, 16, 256, 64),
            (4, 6, 384, 64), (1, 4, 1024, 64), (64, 4, 64, 32), (8, 12, 96, 64)]
    for b, h, s, d in attn:
        for backend in ("flash", "efficient", "math"):
            for mask in (False, True):
                if backend == "flash" and mask:
                    continue  # flash takes no mask
                out.append({"kind": "sdpa", "b": b, "h": h, "s": s, "d": d, "causal": False,
                            "backend": backend, "mask": mask, "sweep": 2})
        out.append({"kind": "sdpa", "b": b, "h": h, "s": s, "d": d, "causal": False,
                    "mask": True, "sweep": 2})  # the default choice, with a padding mask
    layers = [(256, 4, 1024, 64), (384, 6, 1536, 197), (768, 12, 3072, 64),
              (1024, 16, 4096, 32), (256, 8, 512, 256)]
    for b in (1, 16):
        for d, h, ff, s in layers:
            for fast in (True, False):
                out.append({"kind": "encoder_layer", "b": b, "d": d, "h": h, "ff": ff, "s": s,
                            "act": "gelu" if d % 3 == 0 else "relu", "fast": fast, "sweep": 2})
                out.append({"kind": "mha", "b": b, "d": d, "h": h, "s": s, "fast": fast,
                            "sweep": 2})
    return out


SPECS = _specs()


def build(spec: dict[str, Any], device: str, dtype: str) -> Any:  # noqa: C901 - one table
    """A zero-argument callable running ``spec`` once on ``device`` in ``dtype``."""
    dt = DTYPES[dtype]
    kw = {"device": device, "dtype": dt}
    kind = spec["kind"]

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, **kw) if device != "meta" else torch.empty(*shape, **kw)

    if kind == "linear":
        x, w, b = rnd(spec["m"], spec["k"]), rnd(spec["n"], spec["k"]), rnd(spec["n"])
        return lambda: F.linear(x, w, b)
    if kind == "bmm":
        a, c = rnd(spec["b"], spec["m"], spec["k"]), rnd(spec["b"], spec["k"], spec["n"])
        return lambda: torch.bmm(a, c)
    if kind in ("conv2d", "conv3d"):
        k = spec["k"]
        if kind == "conv2d":
            x = rnd(spec["n"], spec["cin"], spec["hw"], spec["hw"])
            w = rnd(spec["cout"], spec["cin"] // spec["groups"], k, k)
            pad = k // 2 if k % 2 else 0
            if not spec.get("bias", True):
                return lambda: F.conv2d(x, w, None, spec["stride"], pad, 1, spec["groups"])
            return lambda: F.conv2d(x, w, rnd(spec["cout"]), spec["stride"], pad, 1,
                                    spec["groups"])
        x = rnd(spec["n"], spec["cin"], spec["t"], spec["hw"], spec["hw"])
        w = rnd(spec["cout"], spec["cin"], *k)
        pad = [d // 2 for d in k]
        bias = rnd(spec["cout"]) if spec.get("bias", True) else None
        return lambda: F.conv3d(x, w, bias, spec["stride"], pad)
    if kind == "sdpa":
        q, kk, v = (rnd(spec["b"], spec["h"], spec["s"], spec["d"]) for _ in range(3))
        mask = None
        if spec.get("mask"):  # a padding mask as HF encoders pass it: (b, 1, 1, s), additive
            mask = torch.zeros(spec["b"], 1, 1, spec["s"], **kw)
        backend = spec.get("backend")
        if backend is None or device == "meta":
            return lambda: F.scaled_dot_product_attention(q, kk, v, attn_mask=mask,
                                                          is_causal=spec["causal"])
        from torch.nn.attention import SDPBackend, sdpa_kernel

        chosen = {"flash": SDPBackend.FLASH_ATTENTION, "math": SDPBackend.MATH,
                  "efficient": SDPBackend.EFFICIENT_ATTENTION}[backend]

        def run() -> torch.Tensor:
            with sdpa_kernel(chosen):
                return F.scaled_dot_product_attention(q, kk, v, attn_mask=mask,
                                                      is_causal=spec["causal"])
        return run
    if kind in ("encoder_layer", "mha"):
        return _transformer(spec, device, dt, rnd)
    if kind in ("layer_norm", "rms_norm"):
        x, w, b = rnd(spec["rows"], spec["c"]), rnd(spec["c"]), rnd(spec["c"])
        if kind == "layer_norm":
            return lambda: F.layer_norm(x, (spec["c"],), w, b)
        return lambda: F.rms_norm(x, (spec["c"],), w)
    if kind == "batch_norm":
        x = rnd(spec["n"], spec["c"], spec["hw"], spec["hw"])
        m, var, w, b = rnd(spec["c"]), rnd(spec["c"]).abs(), rnd(spec["c"]), rnd(spec["c"])
        return lambda: F.batch_norm(x, m, var, w, b, False)
    if kind == "group_norm":
        x = rnd(spec["n"], spec["c"], spec["hw"], spec["hw"])
        return lambda: F.group_norm(x, 32)
    if kind == "eltwise":
        n, op = spec["numel"], spec["op"]
        x = rnd(n)
        if op == "add":
            y = rnd(n)
            return lambda: x + y
        if op == "mul_bcast":
            x4, s = rnd(max(n // 4096, 1), 64, 8, 8), rnd(max(n // 4096, 1), 64, 1, 1)
            return lambda: x4 * s
        fn = {"relu": F.relu, "gelu": F.gelu, "sigmoid": torch.sigmoid,
              "hardswish": F.hardswish}[op]
        return lambda: fn(x)
    if kind == "copy":
        n, op = spec["numel"], spec["op"]
        if op == "contiguous":
            x = rnd(max(n // 4096, 1), 64, 64).transpose(1, 2)
            return lambda: x.contiguous()
        if op == "cat":
            a, c = rnd(n // 2), rnd(n // 2)
            return lambda: torch.cat([a, c])
        x = rnd(n)
        return lambda: x.clone()
    if kind in ("softmax", "sum"):
        x = rnd(spec["rows"], spec["cols"])
        return (lambda: torch.softmax(x, -1)) if kind == "softmax" else (lambda: x.sum(-1))
    if kind == "avgpool":
        x = rnd(spec["n"], spec["c"], spec["hw"], spec["hw"])
        return lambda: F.adaptive_avg_pool2d(x, 1)
    if kind == "maxpool":
        x = rnd(spec["n"], spec["c"], spec["hw"], spec["hw"])
        return lambda: F.max_pool2d(x, 3, 2, 1)
    if kind == "embedding":
        ids = torch.zeros(spec["tokens"], dtype=torch.long, device=device)
        table = rnd(spec["vocab"], spec["dim"])
        return lambda: F.embedding(ids, table)
    raise ValueError(f"unknown op kind {kind!r}")


def _transformer(spec: dict[str, Any], device: str, dt: torch.dtype, rnd: Any) -> Any:
    """An eval ``TransformerEncoderLayer`` or self-attention ``MultiheadAttention`` call,
    with PyTorch's fast path (``_transformer_encoder_layer_fwd``,
    ``_native_multi_head_attention``) on or off for the call."""
    from torch import nn

    if spec["kind"] == "encoder_layer":
        module: Any = nn.TransformerEncoderLayer(spec["d"], spec["h"], spec["ff"], dropout=0.0,
                                                 activation=spec["act"], batch_first=True)
    else:
        module = nn.MultiheadAttention(spec["d"], spec["h"], dropout=0.0, batch_first=True)
    module = module.to(device=device, dtype=dt).eval()
    x = rnd(spec["b"], spec["s"], spec["d"])
    if spec["kind"] == "encoder_layer":
        def call() -> Any:
            return module(x)
    else:
        def call() -> Any:
            return module(x, x, x, need_weights=False)[0]
    if spec["fast"]:
        return call

    def slow() -> Any:
        torch.backends.mha.set_fastpath_enabled(False)
        try:
            return call()
        finally:
            torch.backends.mha.set_fastpath_enabled(True)
    return slow


def dtypes_for(spec: dict[str, Any]) -> tuple[str, ...]:
    """fp16 only where it runs other kernels than bf16 (matmuls, convolutions, attention)."""
    if spec.get("sweep") == 2:
        return ("bf16", "fp32")
    if spec["kind"] in ("linear", "bmm", "conv2d", "conv3d", "sdpa"):
        return ("bf16", "fp16", "fp32")
    return ("bf16", "fp32")
