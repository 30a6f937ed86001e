"""What cuDNN's RNN allocates on the GPU, per shape: the reserve space (saved for backward
in training) and the forward/backward workspaces, for nn.LSTM / nn.GRU / nn.RNN.

Each case in a clean allocator state: the reserve is read from the autograd node's saved
tensors (``CudnnRnnBackward0``: its size is exact), the workspace is the forward's (and
backward's) peak above what the call keeps. Results: one JSON line per case.

    PYTHONPATH=src:. python benchmarks/cudnn_rnn_memory.py > rnn.jsonl
"""

from __future__ import annotations

import itertools
import json
import sys

import torch
from torch import nn

KINDS = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def saved_tensors(fn) -> dict[str, int]:
    out = {}
    for name in dir(fn):
        if name.startswith("_saved_"):
            try:
                v = getattr(fn, name)
            except Exception:  # noqa: BLE001 - released or not a tensor
                continue
            if isinstance(v, torch.Tensor):
                out[name] = v.numel() * v.element_size()
            elif isinstance(v, (list, tuple)):
                out[name] = sum(t.numel() * t.element_size() for t in v if isinstance(t, torch.Tensor))
    return out


def rnn_node(fn):
    """The cuDNN RNN's autograd node (the output may pass through a transpose first)."""
    todo, seen = [fn], set()
    while todo:
        f = todo.pop(0)
        if f is None or id(f) in seen:
            continue
        seen.add(id(f))
        if "rnn" in type(f).__name__.lower():
            return f
        todo += [g for g, _ in f.next_functions]
    return None


def one(kind: str, layers: int, inp: int, hidden: int, seq: int, batch: int, dtype: str,
        bidir: bool, train: bool, proj: int = 0) -> dict:
    kw = {"proj_size": proj} if proj else {}
    m = KINDS[kind](inp, hidden, layers, batch_first=True, bidirectional=bidir, **kw)
    m = m.to("cuda", DTYPES[dtype])
    x = torch.randn(batch, seq, inp, device="cuda", dtype=DTYPES[dtype])
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    rec = {"kind": kind, "layers": layers, "input": inp, "hidden": hidden, "seq": seq,
           "batch": batch, "dtype": dtype, "bidir": bidir, "train": train, "proj": proj}
    if train:
        m.train()
        out = m(x)
    else:
        m.eval()
        with torch.inference_mode():
            out = m(x)
    torch.cuda.synchronize()
    rec["fwd_peak"] = torch.cuda.max_memory_allocated() - base
    rec["fwd_kept"] = torch.cuda.memory_allocated() - base
    y = out[0]
    hs = out[1] if isinstance(out[1], tuple) else (out[1],)
    rec["outputs"] = sum(t.numel() * t.element_size() for t in (y, *hs))
    if train:
        node = rnn_node(y.grad_fn)
        rec["grad_fn"] = type(node).__name__ if node is not None else None
        rec["saved"] = saved_tensors(node) if node is not None else {}
        loss = y.float().sum()
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        loss.backward()
        torch.cuda.synchronize()
        rec["bwd_peak"] = torch.cuda.max_memory_allocated() - before
        rec["bwd_after"] = torch.cuda.memory_allocated() - before
    del out, y, hs, m, x
    torch.cuda.empty_cache()
    return rec


def main() -> None:
    grid = []
    for kind, layers, hidden, seq, batch in itertools.product(
            ("lstm", "gru", "rnn"), (1, 2), (256, 1024), (64, 256), (8, 32)):
        grid.append((kind, layers, 512, hidden, seq, batch, "fp32", False))
    for kind in ("lstm", "gru"):
        grid += [(kind, 3, 512, 1024, 256, 32, "fp32", False), (kind, 2, 512, 1024, 256, 32, "bf16", False),
                 (kind, 2, 512, 1024, 256, 32, "fp32", True), (kind, 1, 300, 500, 100, 7, "fp32", False),
                 (kind, 2, 512, 1024, 1024, 4, "fp32", False), (kind, 2, 128, 2048, 128, 16, "fp32", False)]
    for case in grid:
        for train in (True, False):
            try:
                print(json.dumps(one(*case, train=train)), flush=True)
            except Exception as exc:  # noqa: BLE001 - keep measuring the rest
                print(json.dumps({"case": case, "train": train, "error": repr(exc)}), flush=True)
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                      "cudnn": torch.backends.cudnn.version()}), file=sys.stderr)


if __name__ == "__main__":
    main()
