"""What cuDNN's RNN allocates on the GPU, per shape: the reserve space (saved for backward
in training) and the forward/backward workspaces, for nn.LSTM / nn.GRU / nn.RNN.

Each case in a clean allocator state: the reserve is read from the autograd node's saved
tensors (``CudnnRnnBackward0``: its size is exact), the workspace is the forward's (and
backward's) peak above what the call keeps. Results: one JSON line per case.

``--proj OUT.jsonl`` (issue 40 item 5) measures LSTMs with ``proj_size`` instead, beside the
same LSTMs without it: the same reserve and workspace figures, and the weight layout
(``weights``: every flat weight's name and shape, the bytes of the parameters, the bytes of
the storages they live in after ``flatten_parameters`` (cuDNN's one flat buffer, when it is
one) and whether they share one). nn.GRU and nn.RNN have no ``proj_size`` (PyTorch refuses
it); one line records that refusal. Each line carries the run header (machine.run_header);
a rerun appends only the cases the file lacks. ``--dry-run`` builds every case's module on
the CPU (no memory figures).

    PYTHONPATH=src:. python benchmarks/cudnn_rnn_memory.py > rnn.jsonl
    PYTHONPATH=src:. python benchmarks/cudnn_rnn_memory.py --proj OUT.jsonl [--dry-run]

Without a GPU, `replay_case` runs a measured case through the memory model (the module on
fake tensors under the tracker, CUDA's kernels, the caching allocator's replay) and
`figures` gives the same quantities as the measurement: the forward's peak and what it
keeps, the backward's peak and what is left after it. ``tests/test_memory_rnn.py`` compares
them with every measured case, and `backward_workspace` finds the backward workspace the
measured backward peak implies (the shipped workspace table takes it: the measurement
records the peak of the whole backward, not the workspace alone).
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
    rec["output_shapes"] = [list(t.shape) for t in (y, *hs)]
    rec["weights"] = weight_layout(m)
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


def weight_layout(m: nn.Module) -> dict:
    """The module's flat weights after ``flatten_parameters``: names, shapes, bytes, storages."""
    flat = [w for w in m._flat_weights if isinstance(w, torch.Tensor)]
    storages = {}
    for w in flat:
        st = w.untyped_storage()
        storages[st.data_ptr()] = st.nbytes()
    return {"names": list(m._flat_weights_names),
            "shapes": [list(w.shape) for w in flat],
            "param_bytes": sum(w.numel() * w.element_size() for w in flat),
            "storage_bytes": sum(storages.values()), "storages": len(storages),
            "one_buffer": len(storages) == 1}


PROJ_GRID = [  # (layers, input, hidden, proj, seq, batch, dtype, bidir); proj 0: the baseline
    *[(layers, 256, hidden, proj, 100, batch, "fp32", bidir)
      for layers in (1, 3) for hidden in (512, 1024) for proj in (0, 128, 256)
      for batch in (8, 32) for bidir in (False, True)],
    *[(2, 512, 1024, proj, 100, 32, "bf16", bidir) for proj in (0, 256) for bidir in (False, True)],
    (2, 80, 1536, 384, 400, 4, "fp32", False), (2, 80, 1536, 0, 400, 4, "fp32", False),
    (1, 40, 2048, 512, 50, 64, "fp32", False), (1, 40, 2048, 0, 50, 64, "fp32", False),
    (4, 64, 640, 160, 300, 16, "fp32", True), (4, 64, 640, 0, 300, 16, "fp32", True),
    (1, 300, 700, 100, 75, 7, "fp32", False), (2, 128, 1000, 250, 128, 12, "bf16", False),
]


def proj_main(out_path: str, dry_run: bool) -> None:
    """LSTMs with and without ``proj_size`` (see the module docstring), appended to a file."""
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from machine import run_header

    out = Path(out_path)
    done = set()
    if out.exists():
        for line in out.read_text().splitlines():
            r = json.loads(line) if line.strip() else {}
            if "case" in r and "error" not in r:
                done.add(json.dumps(r["case"]))
    header = run_header()
    header["device"] = "cpu (dry run)" if dry_run else torch.cuda.get_device_name()
    header["cudnn"] = torch.backends.cudnn.version()

    def write(row: dict) -> None:
        with out.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"run": header, **row}) + "\n")

    try:
        nn.GRU(8, 16, proj_size=4)
        write({"kind": "gru", "proj_size": "accepted"})
    except ValueError as exc:
        write({"kind": "gru", "proj_size": f"refused: {exc}"})
    for layers, inp, hidden, proj, seq, batch, dtype, bidir in PROJ_GRID:
        for train in (True, False):
            case = {"kind": "lstm", "layers": layers, "input": inp, "hidden": hidden,
                    "proj": proj, "seq": seq, "batch": batch, "dtype": dtype, "bidir": bidir,
                    "train": train}
            if json.dumps(case) in done:
                continue
            try:
                if dry_run:
                    kw = {"proj_size": proj} if proj else {}
                    m = nn.LSTM(inp, hidden, layers, batch_first=True, bidirectional=bidir, **kw)
                    row = {"case": case, "weights": weight_layout(m)}
                else:
                    row = {"case": case, **one("lstm", layers, inp, hidden, seq, batch, dtype,
                                               bidir, train, proj)}
                write(row)
            except Exception as exc:  # noqa: BLE001 - keep measuring the rest
                write({"case": case, "error": repr(exc)[:300]})


# -- the same cases through the memory model (no GPU)

CASE_KEYS = ("kind", "layers", "input", "hidden", "seq", "batch", "dtype", "bidir", "train")


def measured_rows(path) -> list[dict]:
    """The measured cases of a run (the proj run's header lines and errors left out), each
    with its case as one dict (``proj`` 0 where the run had none)."""
    from pathlib import Path

    rows = []
    for line in Path(path).read_text().splitlines():
        r = json.loads(line) if line.strip() else {}
        if "fwd_peak" not in r:
            continue
        rows.append({**r, "case": {**{k: r[k] for k in CASE_KEYS}, "proj": r.get("proj") or 0}})
    return rows


def replay_case(case: dict):
    """The memory model's log of one measured case (`one`'s steps on fake tensors: the module
    in the case's dtype, its weights in one flat buffer where PyTorch flattens them, the
    input batch-first; forward, then ``output.float().sum().backward()`` in training), with
    the marks `figures` reads."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.func import functional_call

    from torchinspect.memory.cudnn_rnn import FLATTENED
    from torchinspect.memory.kernels import cuda_kernels
    from torchinspect.memory.tracker import Event, StorageTracker

    kw = {"proj_size": case["proj"]} if case.get("proj") else {}
    dtype = DTYPES[case["dtype"]]
    with torch.device("meta"):
        module = KINDS[case["kind"]](case["input"], case["hidden"], case["layers"],
                                     batch_first=True, bidirectional=case["bidir"], **kw)
    tracker = StorageTracker(device_type="cpu", cudnn=True, gpu="h100")
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    with fake:
        shapes = {n: p.shape for n, p in module.named_parameters()}
        if dtype in FLATTENED:  # flatten_parameters: views of one buffer
            flat = torch.empty(sum(s.numel() for s in shapes.values()), dtype=dtype)
            state, start = {}, 0
            for name, shape in shapes.items():
                state[name] = flat[start:start + shape.numel()].view(shape)
                start += shape.numel()
        else:
            state = {name: torch.empty(shape, dtype=dtype) for name, shape in shapes.items()}
        state = {n: t.requires_grad_(case["train"]) for n, t in state.items()}
        x = torch.empty(case["batch"], case["seq"], case["input"], dtype=dtype)
    for t in state.values():
        tracker.register(t, "weights")
    tracker.register(x, "input")
    events = tracker.log.events
    with fake, tracker, cuda_kernels():
        events.append(Event(0, True, "forward"))
        module.train(case["train"])
        if case["train"]:
            out = functional_call(module, state, (x,))
        else:
            with torch.inference_mode():
                out = functional_call(module, state, (x,))
        events.append(Event(0, True, "kept"))
        if case["train"]:
            loss = out[0].float().sum()
            events.append(Event(0, True, "backward"))
            loss.backward()
            events.append(Event(0, True, "after"))
        del out
    return tracker.log


def figures(log, forward: int, backward: int = 0) -> dict:
    """The case's measured quantities as the model predicts them, with these forward and
    backward workspace bytes: ``fwd_peak``, ``fwd_kept`` (bytes above what existed before the
    forward), ``bwd_peak``, ``bwd_after`` (above what existed before the backward)."""
    from torchinspect.memory.allocator import CachingAllocator

    allocator = CachingAllocator()
    placed, level, peak, mark = {}, {}, {"": 0}, ""
    for ev in log.events:
        if ev.serial == 0:
            level[ev.op] = allocator.allocated
            mark = ev.op
            peak[mark] = allocator.allocated
            continue
        alloc = log.allocs[ev.serial]
        if ev.alloc:
            nbytes = alloc.nbytes
            if alloc.kind == "cudnn":
                nbytes = backward if alloc.problem.op == "rnn_bwd" else forward
            if nbytes:
                placed[ev.serial] = allocator.malloc(nbytes)
                peak[mark] = max(peak[mark], allocator.allocated)
        elif ev.serial in placed:
            allocator.free(placed.pop(ev.serial))
    out = {"fwd_peak": peak["forward"] - level["forward"],
           "fwd_kept": level["kept"] - level["forward"]}
    if "backward" in level:
        out["bwd_peak"] = peak["backward"] - level["backward"]
        out["bwd_after"] = level["after"] - level["backward"]
    return out


def backward_workspace(log, forward: int, measured_peak: int) -> int:
    """The smallest backward workspace (512-byte steps) at which the model's backward peak
    reaches the measured one (0 when the peak is reached without any)."""
    def peak(w: int) -> int:
        return figures(log, forward, w)["bwd_peak"]

    if peak(0) >= measured_peak:
        return 0
    low, high = 0, measured_peak
    while high - low > 512:
        mid = (low + high) // 1024 * 512
        low, high = (low, mid) if peak(mid) >= measured_peak else (mid, high)
    return high


def workspace_rows(path) -> dict[str, int]:
    """The RNN workspaces a run implies, by problem key: each case's forward (its peak minus
    what it keeps, as the calibration measures) and, in training, its backward
    (`backward_workspace`)."""
    from torchinspect.memory.workspace import rnn_problem

    out: dict[str, int] = {}
    for r in measured_rows(path):
        c = r["case"]
        spec = dict(kind={"rnn": "rnn_tanh"}.get(c["kind"], c["kind"]), input_size=c["input"],
                    hidden=c["hidden"], layers=c["layers"], dirs=2 if c["bidir"] else 1,
                    seq=c["seq"], batch=c["batch"], dtype=c["dtype"], train=c["train"],
                    bias=True, batch_first=True, proj=c["proj"])
        forward = max(0, r["fwd_peak"] - r["fwd_kept"])
        out[rnn_problem(backward=False, **spec).key] = forward
        if c["train"] and "bwd_peak" in r:
            log = replay_case(c)
            out[rnn_problem(backward=True, **spec).key] = backward_workspace(log, forward,
                                                                             r["bwd_peak"])
    return out


def main() -> None:
    if "--proj" in sys.argv:
        proj_main(sys.argv[sys.argv.index("--proj") + 1], "--dry-run" in sys.argv)
        return
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
