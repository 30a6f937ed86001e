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
    return out + _specs_2() + _specs_3() + _specs_floors()


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


def _specs_3() -> list[dict[str, Any]]:
    """Sweep 3 (issue 40): op kinds no earlier sweep had, in generic shapes (the layers of
    their families, no model's exact list): transposed convolutions (2-D: DCGAN-style k4 s2
    and U-Net-style k2 s2; 1-D: vocoder upsampling), 1-D convolutions (wide kernels,
    dilation, depthwise, strided feature encoders, pointwise), grouped 2-D convolutions
    across batch sizes, ``nn.TransformerDecoderLayer`` (causal self-attention plus
    cross-attention with a memory padding mask), ``nn.MultiheadAttention`` with a causal
    or padding mask, and cuDNN LSTM (with and without ``proj_size``) and GRU in eval."""
    out: list[dict[str, Any]] = []
    tconv2d = [  # (cin, hw, cout, k, stride, padding, output_padding)
        (128, 1, 512, 4, 1, 0, 0), (512, 4, 256, 4, 2, 1, 0), (256, 8, 128, 4, 2, 1, 0),
        (128, 16, 64, 4, 2, 1, 0), (64, 32, 3, 4, 2, 1, 0), (32, 64, 16, 4, 2, 1, 0),
        (512, 14, 256, 2, 2, 0, 0), (256, 16, 128, 2, 2, 0, 0), (128, 32, 64, 2, 2, 0, 0),
        (64, 64, 32, 2, 2, 0, 0), (64, 56, 64, 3, 2, 1, 1)]
    for n in (1, 16):
        for cin, hw, cout, k, st, pad, opad in tconv2d:
            out.append({"kind": "conv_transpose2d", "n": n, "cin": cin, "hw": hw, "cout": cout,
                        "k": k, "stride": st, "padding": pad, "output_padding": opad,
                        "sweep": 3})
    tconv1d = [(512, 32, 256, 16, 8, 4), (256, 256, 128, 16, 8, 4), (128, 2048, 64, 4, 2, 1),
               (64, 4096, 32, 4, 2, 1), (256, 100, 256, 4, 2, 1), (80, 200, 80, 2, 2, 0)]
    for n in (1, 16):
        for cin, length, cout, k, st, pad in tconv1d:
            out.append({"kind": "conv_transpose1d", "n": n, "cin": cin, "len": length,
                        "cout": cout, "k": k, "stride": st, "padding": pad, "sweep": 3})
    conv1d = [  # (cin, len, cout, k, stride, dilation, groups)
        (80, 1000, 256, 11, 1, 1, 1), (256, 500, 256, 15, 1, 1, 1), (1, 16000, 64, 15, 1, 1, 1),
        (512, 400, 512, 5, 1, 1, 1), (256, 500, 256, 33, 1, 1, 256),
        (512, 500, 512, 63, 1, 1, 512), (512, 500, 512, 87, 1, 2, 512),
        (64, 8000, 128, 2, 1, 16, 1), (128, 4096, 128, 3, 1, 1, 1), (128, 4096, 128, 3, 1, 8, 1),
        (128, 4096, 128, 3, 1, 64, 1), (256, 1024, 256, 3, 1, 4, 1), (64, 16000, 64, 7, 1, 3, 1),
        (256, 2048, 512, 1, 1, 1, 1), (64, 8000, 128, 1, 1, 1, 1), (1, 16000, 512, 10, 5, 1, 1),
        (512, 3199, 512, 3, 2, 1, 1)]
    for n in (1, 16):
        for cin, length, cout, k, st, dil, g in conv1d:
            out.append({"kind": "conv1d", "n": n, "cin": cin, "len": length, "cout": cout,
                        "k": k, "stride": st, "dilation": dil, "groups": g, "sweep": 3})
    for n in (1, 4, 24, 64):
        for c, hw, g in [(128, 56, 32), (256, 28, 32), (512, 14, 32), (1024, 7, 32),
                         (256, 28, 8), (192, 28, 4)]:
            out.append({"kind": "conv2d", "n": n, "cin": c, "hw": hw, "cout": c, "k": 3,
                        "stride": 1, "groups": g, "bias": False, "sweep": 3})
    for b in (1, 32):
        for d, h, ff, s, sm, causal, pre in [(512, 8, 2048, 96, 64, True, True),
                                             (256, 4, 1024, 64, 128, True, False),
                                             (768, 12, 3072, 128, 128, True, False),
                                             (512, 8, 2048, 32, 256, False, False)]:
            out.append({"kind": "decoder_layer", "b": b, "d": d, "h": h, "ff": ff, "s": s,
                        "s_mem": sm, "causal": causal, "norm_first": pre, "sweep": 3})
        for d, h, sq, sk, mask in [(512, 8, 96, 96, "causal"), (512, 8, 96, 64, "padding"),
                                   (768, 12, 128, 128, "causal"), (256, 4, 64, 256, "padding")]:
            out.append({"kind": "mha_masked", "b": b, "d": d, "h": h, "s": sq, "s_kv": sk,
                        "mask": mask, "sweep": 3})
    rnns = [("lstm", 80, 1024, 3, 256, False, 200), ("lstm", 64, 512, 2, 128, True, 120),
            ("lstm", 256, 512, 1, 0, False, 100), ("lstm", 512, 1024, 2, 0, False, 50),
            ("lstm", 128, 768, 1, 256, False, 400), ("lstm", 40, 320, 4, 0, True, 300),
            ("gru", 256, 512, 2, 0, False, 64), ("gru", 80, 256, 1, 0, True, 500),
            ("gru", 512, 1024, 1, 0, False, 100)]
    for b in (1, 32):
        for cell, inp, hid, layers, proj, bidir, seq in rnns:
            out.append({"kind": "rnn", "cell": cell, "b": b, "input": inp, "hidden": hid,
                        "layers": layers, "proj": proj, "bidir": bidir, "seq": seq, "sweep": 3})
    return out


def _geometric(lo: int, hi: int, factor: float) -> list[int]:
    out, v = [], float(lo)
    while v <= hi:
        if not out or int(round(v)) != out[-1]:
            out.append(int(round(v)))
        v *= factor
    return out


def _specs_floors() -> list[dict[str, Any]]:
    """Sweep 4, the small-kernel floors (issue 40 item 1): per op kind, sizes from one
    thread block to a few waves of the GPU's SMs, bf16 (``dtypes_for``), each profiled for
    its kernels' durations, launch shapes and the gaps between them in graph replay."""
    out: list[dict[str, Any]] = []
    for numel in _geometric(1 << 6, 1 << 26, 2 ** 0.5):
        for op in ("relu", "add"):
            out.append({"kind": "eltwise", "op": op, "numel": numel, "sweep": 4})
    for numel in _geometric(1 << 8, 1 << 24, 4):
        out.append({"kind": "copy", "op": "cat", "numel": numel, "sweep": 4})
        out.append({"kind": "copy", "op": "contiguous", "numel": max(numel, 4096), "sweep": 4})
    for rows in _geometric(1, 1 << 16, 4):
        out.append({"kind": "layer_norm", "rows": rows, "c": 768, "sweep": 4})
        out.append({"kind": "softmax", "rows": rows, "cols": 256, "sweep": 4})
        out.append({"kind": "sum", "rows": rows, "cols": 1024, "sweep": 4})
    for m in _geometric(1, 8192, 2):
        out.append({"kind": "linear", "m": m, "k": 1024, "n": 1024, "sweep": 4})
    for n in _geometric(128, 16384, 2):
        out.append({"kind": "linear", "m": 256, "k": 1024, "n": n, "sweep": 4})
    for n in (1, 4, 16, 64):
        for hw in (7, 14, 28, 56):
            out.append({"kind": "conv2d", "n": n, "cin": 64, "hw": hw, "cout": 64, "k": 3,
                        "stride": 1, "groups": 1, "bias": False, "sweep": 4})
            out.append({"kind": "conv2d", "n": n, "cin": 256, "hw": hw, "cout": 256, "k": 1,
                        "stride": 1, "groups": 1, "bias": False, "sweep": 4})
            out.append({"kind": "batch_norm", "n": n, "c": 64, "hw": hw, "sweep": 4})
            out.append({"kind": "maxpool", "n": n, "c": 64, "hw": 2 * hw, "sweep": 4})
    for bh in _geometric(1, 1024, 4):
        out.append({"kind": "sdpa", "b": 1, "h": bh, "s": 128, "d": 64, "causal": False,
                    "sweep": 4})
    for tokens in _geometric(1, 16384, 8):
        out.append({"kind": "embedding", "tokens": tokens, "vocab": 32000, "dim": 768,
                    "sweep": 4})
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
    if kind in ("conv_transpose2d", "conv_transpose1d", "conv1d"):
        return _conv_new(spec, rnd)
    if kind in ("decoder_layer", "mha_masked", "rnn"):
        return _module_op(spec, device, dt, rnd)
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


def _conv_new(spec: dict[str, Any], rnd: Any) -> Any:
    """Sweep 3's transposed and 1-D convolutions (with a bias, as nn.Conv*d has)."""
    kind, k = spec["kind"], spec["k"]
    bias = rnd(spec["cout"])
    if kind == "conv_transpose2d":
        x = rnd(spec["n"], spec["cin"], spec["hw"], spec["hw"])
        w = rnd(spec["cin"], spec["cout"], k, k)
        return lambda: F.conv_transpose2d(x, w, bias, spec["stride"], spec["padding"],
                                          spec["output_padding"])
    x = rnd(spec["n"], spec["cin"], spec["len"])
    if kind == "conv_transpose1d":
        w = rnd(spec["cin"], spec["cout"], k)
        return lambda: F.conv_transpose1d(x, w, bias, spec["stride"], spec["padding"])
    g, dil = spec["groups"], spec["dilation"]
    w = rnd(spec["cout"], spec["cin"] // g, k)
    pad = dil * (k - 1) // 2
    return lambda: F.conv1d(x, w, bias, spec["stride"], pad, dil, g)


def _module_op(spec: dict[str, Any], device: str, dt: torch.dtype, rnd: Any) -> Any:
    """Sweep 3's modules in eval: a decoder layer, masked attention, a cuDNN RNN."""
    from torch import nn

    kind = spec["kind"]
    if kind == "rnn":
        cls = nn.LSTM if spec["cell"] == "lstm" else nn.GRU
        kw = {"proj_size": spec["proj"]} if spec["proj"] else {}
        rnn = cls(spec["input"], spec["hidden"], spec["layers"], batch_first=True,
                  bidirectional=spec["bidir"], **kw).to(device=device, dtype=dt).eval()
        xs = rnd(spec["b"], spec["seq"], spec["input"])
        return lambda: rnn(xs)[0]
    b, d, s = spec["b"], spec["d"], spec["s"]
    causal = nn.Transformer.generate_square_subsequent_mask(s, device=device, dtype=dt)
    if kind == "decoder_layer":
        layer = nn.TransformerDecoderLayer(d, spec["h"], spec["ff"], dropout=0.0,
                                           batch_first=True, norm_first=spec["norm_first"])
        layer = layer.to(device=device, dtype=dt).eval()
        tgt, mem = rnd(b, s, d), rnd(b, spec["s_mem"], d)
        pad = torch.zeros(b, spec["s_mem"], dtype=torch.bool, device=device)
        if spec["causal"]:
            return lambda: layer(tgt, mem, tgt_mask=causal, memory_key_padding_mask=pad,
                                 tgt_is_causal=True)
        return lambda: layer(tgt, mem, memory_key_padding_mask=pad)
    mha = nn.MultiheadAttention(d, spec["h"], dropout=0.0, batch_first=True)
    mha = mha.to(device=device, dtype=dt).eval()
    q, kv = rnd(b, s, d), rnd(b, spec["s_kv"], d)
    if spec["mask"] == "causal":
        return lambda: mha(q, q, q, attn_mask=causal, is_causal=True, need_weights=False)[0]
    pad = torch.zeros(b, spec["s_kv"], dtype=torch.bool, device=device)
    return lambda: mha(q, kv, kv, key_padding_mask=pad, need_weights=False)[0]


def dtypes_for(spec: dict[str, Any]) -> tuple[str, ...]:
    """fp16 only where it runs other kernels than bf16 (matmuls, convolutions, attention);
    sweep 3 in bf16, fp32 and (convolutions) fp16; the floors (sweep 4) in bf16."""
    if spec.get("sweep") == 4:
        return ("bf16",)
    if spec.get("sweep") == 3:
        if spec["kind"] in ("conv_transpose2d", "conv_transpose1d", "conv1d", "conv2d"):
            return ("bf16", "fp32", "fp16")
        return ("bf16", "fp32")
    if spec.get("sweep") == 2:
        return ("bf16", "fp32")
    if spec["kind"] in ("linear", "bmm", "conv2d", "conv3d", "sdpa"):
        return ("bf16", "fp16", "fp32")
    return ("bf16", "fp32")
