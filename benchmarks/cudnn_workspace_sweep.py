"""The shipped cuDNN workspace table (src/torchinspect/memory/data/cudnn_workspace.json.gz).

Three steps, the middle one on a GPU (about 5-20 minutes of GPU time, by coverage):

    # 1. the problems: convolutions of the torchvision models below (forward, and the backward
    #    with the output mask training uses) at batch 1, 8, 32 in fp32, bf16 and fp16, and a
    #    grid of cuDNN RNN problems (any machine, meta tensors, seconds)
    PYTHONPATH=src python benchmarks/cudnn_workspace_sweep.py problems problems.json
    # 2. measure each one alone on the GPU (calibrate.measure_problem); appends JSON lines,
    #    stops cleanly at --deadline seconds
    PYTHONPATH=src python benchmarks/cudnn_workspace_sweep.py measure problems.json out.jsonl
    # 3. the table: every measured problem (and the RNN forwards of results/cudnn-rnn-h100.jsonl),
    #    and each op's envelope from leave-one-model-out cross-validation (workspace.build_table;
    #    the models of each problem: results/cudnn-workspace-models.json.gz, written by step 1)
    PYTHONPATH=src python benchmarks/cudnn_workspace_sweep.py build benchmarks/results/cudnn-workspace-h100.jsonl.gz

    # 1b. generic 1-D, 3-D and transposed convolutions (none in the table before issue 40),
    #     measured the same way (about 5 minutes of GPU time; --dry-run checks the list)
    PYTHONPATH=src python benchmarks/cudnn_workspace_sweep.py problems-nd nd.json
    PYTHONPATH=src python benchmarks/cudnn_workspace_sweep.py measure nd.json \
        benchmarks/results/cudnn-workspace-nd-h100.jsonl --deadline 420 [--dry-run]
    #     then build from both: ... build benchmarks/results/cudnn-workspace-h100.jsonl.gz \
    #     benchmarks/results/cudnn-workspace-nd-h100.jsonl

    # 4. how close the point lands and how often the range holds the measurement (the same
    #    cross-validation, the envelope itself cross-validated too)
    PYTHONPATH=src python benchmarks/cudnn_workspace_sweep.py check benchmarks/results/cudnn-workspace-h100.jsonl.gz
    # 5. the same for the RNN calls of the shipped table, the RNN workspace model against the
    #    nearest measured problem (raw data of RESULTS-memory.md)
    PYTHONPATH=src python benchmarks/cudnn_workspace_sweep.py rnn-check cudnn-rnn-workspace-cv

Raw data: benchmarks/results/cudnn-workspace-h100.jsonl.gz (one line per problem, machine named).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path
from typing import Any

TABLE_MODELS = (
    "alexnet", "vgg16", "vgg11_bn", "resnet18", "resnet34", "resnet50", "resnet101",
    "resnext50_32x4d", "wide_resnet50_2", "densenet121", "mobilenet_v2", "mobilenet_v3_large",
    "mobilenet_v3_small", "efficientnet_b0", "efficientnet_v2_s", "convnext_tiny",
    "regnet_y_400mf", "regnet_x_1_6gf", "shufflenet_v2_x1_0", "squeezenet1_0", "mnasnet1_0",
    "googlenet", "inception_v3", "fcn_resnet50", "deeplabv3_resnet50", "vit_b_16", "swin_t",
)
SIZES = {"inception_v3": 299}
BATCHES = (32, 8, 1)
DTYPES = ("fp32", "bf16", "fp16")
TABLE = Path(__file__).resolve().parents[1] / "src/torchinspect/memory/data/cudnn_workspace.json.gz"
RESULTS = Path(__file__).resolve().parent / "results"
OWNERS = RESULTS / "cudnn-workspace-models.json.gz"  # model -> its problem keys (step 1)
RNN_RUN = RESULTS / "cudnn-rnn-h100.jsonl"  # cudnn_rnn_memory.py: RNN forwards, other shapes
PROJ_RUN = RESULTS / "cudnn-rnn-proj-h100.jsonl"  # cudnn_rnn_memory.py --proj: LSTM proj_size


def conv_problems(model: Any, shape: tuple[int, ...]) -> list[Any]:
    """Forward convolution problems of one forward on meta tensors (weights requiring grad),
    with the backward each implies (input gradient when the input requires one)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from torchinspect.memory.workspace import Problem, conv_problem

    found: list[Any] = []

    class Collect(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kw: Any = None) -> Any:
            if func.overloadpacket.__name__ == "convolution":
                fwd = conv_problem("convolution", args)
                if fwd is not None:
                    spec = dict(fwd.spec)
                    spec["mask"] = [bool(args[0].requires_grad), True, args[2] is not None]
                    found.append(fwd)
                    found.append(Problem("conv_bwd", tuple(sorted(spec.items()))))
            return func(*args, **(kw or {}))

    model = model.to("meta").train()
    x = torch.empty(shape, device="meta")
    with Collect():
        model(x)
    return list(dict.fromkeys(found))


def with_batch_dtype(problem: Any, batch: int, dtype: str) -> Any:
    from torchinspect.memory.workspace import Problem

    spec = dict(problem.spec)
    spec["x"] = [batch, *spec["x"][1:]]
    spec["dtype"] = dtype
    return Problem(problem.op, tuple(sorted(spec.items())))


def rnn_grid() -> list[Any]:
    from torchinspect.memory.workspace import rnn_problem

    out = []
    for kind in ("lstm", "gru", "rnn_tanh"):
        for hidden in (256, 1024):
            for layers in (1, 2):
                for dirs in (1, 2):
                    for batch in (8, 32):
                        for dtype in ("fp32", "bf16"):
                            for train in (True, False):
                                common = dict(kind=kind, input_size=hidden, hidden=hidden,
                                              layers=layers, dirs=dirs, seq=128, batch=batch,
                                              dtype=dtype, train=train, bias=True,
                                              batch_first=False)
                                out.append(rnn_problem(backward=False, **common))
                                if train:
                                    out.append(rnn_problem(backward=True, **common))
    return out


def problems(path: str) -> None:
    import torch
    import torchvision

    keys: list[str] = []
    bases = {}
    for name in TABLE_MODELS:
        size = SIZES.get(name, 224)
        kw: dict[str, Any] = {"aux_loss": False, "weights_backbone": None} if name.startswith(
            ("fcn", "deeplab")) else {}
        if name in ("googlenet", "inception_v3"):
            kw = {"aux_logits": False, "init_weights": False}
        try:
            with torch.device("meta"):  # seconds faster: no weight initialisation
                model = torchvision.models.get_model(name, weights=None, **kw)
        except NotImplementedError:  # a constructor that computes on tensors (regnet)
            model = torchvision.models.get_model(name, weights=None, **kw)
        bases[name] = conv_problems(model, (2, 3, size, size))  # BatchNorm trains on 2+
        print(f"{name}: {len(bases[name])} problems", file=sys.stderr)
    # order: every model at batch 32 fp32 first, so a deadline still leaves a useful table
    for i, (batch, dtype) in enumerate((b, d) for d in DTYPES for b in BATCHES):
        for base in bases.values():
            keys += [with_batch_dtype(p, batch, dtype).key for p in base]
        if i == 0:
            keys += [p.key for p in rnn_grid()]
    unique = list(dict.fromkeys(keys))
    Path(path).write_text(json.dumps(unique))
    print(f"{len(unique)} problems -> {path}", file=sys.stderr)
    # which models each convolution problem belongs to: build's leave-one-model-out
    models = {name: sorted({with_batch_dtype(p, b, d).key for p in base for b in BATCHES
                            for d in DTYPES}) for name, base in bases.items()}
    OWNERS.write_bytes(gzip.compress(json.dumps(models).encode(), mtime=0))
    print(f"models of each problem -> {OWNERS}", file=sys.stderr)


ND_OWNERS = RESULTS / "cudnn-workspace-nd-models.json"  # problems-nd: configuration -> keys


def nd_grid() -> dict[str, tuple[Any, tuple[int, ...]]]:
    """Generic 1-D, 3-D and transposed convolutions (issue 40: the table held none), each a
    configuration named by its shape without the batch: (module, input shape at batch 1).
    Shapes of common kinds (audio front-ends, dilated stacks, depthwise-separable stacks,
    upsampling by transposed convolutions, video and volume CNNs), not any one model's."""
    from torch import nn

    grid: dict[str, tuple[Any, tuple[int, ...]]] = {}
    for c in (64, 256, 512):
        for length in (2048, 16000):
            for k, d in ((3, 1), (3, 2), (3, 8), (3, 32), (5, 1), (11, 1)):
                grid[f"conv1d c{c} L{length} k{k} d{d}"] = (
                    nn.Conv1d(c, c, k, padding=d * (k - 1) // 2, dilation=d), (1, c, length))
    for c in (128, 256, 512):
        for length in (2048, 16000):
            for k in (3, 11, 33):
                grid[f"conv1d depthwise c{c} L{length} k{k}"] = (
                    nn.Conv1d(c, c, k, padding=k // 2, groups=c), (1, c, length))
    for cin, cout in ((512, 256), (256, 128)):
        for length in (128, 1024):
            for stride in (2, 4, 8):
                grid[f"conv_transpose1d {cin}->{cout} L{length} s{stride}"] = (
                    nn.ConvTranspose1d(cin, cout, 2 * stride, stride, stride // 2),
                    (1, cin, length))
    for cin, cout in ((512, 256), (256, 128), (128, 64)):
        for size in (8, 32, 64):
            for name, kw in (("k4s2", dict(kernel_size=4, stride=2, padding=1)),
                             ("k2s2", dict(kernel_size=2, stride=2)),
                             ("k3s2", dict(kernel_size=3, stride=2, padding=1,
                                           output_padding=1))):
                grid[f"conv_transpose2d {cin}->{cout} {size}px {name}"] = (
                    nn.ConvTranspose2d(cin, cout, **kw), (1, cin, size, size))
    for c in (32, 64, 128):
        for vol in ((8, 56, 56), (16, 28, 28), (32, 64, 64)):
            grid[f"conv3d c{c} {'x'.join(map(str, vol))} k3"] = (
                nn.Conv3d(c, c, 3, padding=1), (1, c, *vol))
    for cin, cout in ((128, 64), (64, 32)):
        for vol in ((8, 16, 16), (16, 32, 32)):
            grid[f"conv_transpose3d {cin}->{cout} {'x'.join(map(str, vol))} k2s2"] = (
                nn.ConvTranspose3d(cin, cout, 2, 2), (1, cin, *vol))
    return grid


ND_BATCHES = (1, 4, 16)
ND_DTYPES = ("fp32", "bf16")


def problems_nd(path: str) -> None:
    """The problems of `nd_grid` at batch 1, 4, 16 in fp32 and bf16 (forward, and the
    backward training asks for), written as keys; `ND_OWNERS` maps each configuration to its
    keys (build's leave-one-configuration-out)."""
    owners: dict[str, list[str]] = {}
    keys: list[str] = []
    for name, (module, shape) in nd_grid().items():
        base = conv_problems(module, shape)
        mine = [with_batch_dtype(p, b, d).key for d in ND_DTYPES for b in ND_BATCHES
                for p in base]
        owners[name] = sorted(set(mine))
        keys += mine
    unique = list(dict.fromkeys(keys))
    Path(path).write_text(json.dumps(unique))
    ND_OWNERS.write_text(json.dumps(owners, indent=0, sort_keys=True) + "\n")
    print(f"{len(unique)} problems of {len(owners)} configurations -> {path}; owners -> "
          f"{ND_OWNERS}", file=sys.stderr)


def measure(path: str, out: str, deadline: float, dry_run: bool = False) -> None:
    if dry_run:  # on any machine: every key parses and names a problem calibrate can run
        from torchinspect.memory.workspace import problem_from_key

        keys = json.loads(Path(path).read_text())
        kinds: dict[str, int] = {}
        for key in keys:
            fam = problem_from_key(key).family
            kinds[fam] = kinds.get(fam, 0) + 1
        done = 0
        if Path(out).exists():
            done = len({json.loads(line)["key"] for line in Path(out).read_text().splitlines()
                        if line} & set(keys))
        print(f"{len(keys)} problems ({done} already in {out}): "
              + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())), file=sys.stderr)
        return

    import torch

    from torchinspect.memory.calibrate import machine, measure_problem
    from torchinspect.memory.workspace import problem_from_key

    keys = json.loads(Path(path).read_text())
    done = set()
    if Path(out).exists():
        done = {json.loads(line)["key"] for line in Path(out).read_text().splitlines() if line}
    info = machine()
    start = time.monotonic()
    with open(out, "a") as f:
        for i, key in enumerate(keys):
            if key in done:
                continue
            if time.monotonic() - start > deadline:
                print(f"deadline: {i} of {len(keys)} measured", file=sys.stderr)
                break
            t0 = time.perf_counter()
            nbytes = measure_problem(problem_from_key(key))
            f.write(json.dumps({"key": key, "workspace": nbytes, "ms": round(
                1000 * (time.perf_counter() - t0), 1), **info}) + "\n")
            f.flush()
    print(f"measured in {time.monotonic() - start:.0f} s on {torch.cuda.get_device_name()}",
          file=sys.stderr)


def build(paths: list[str]) -> None:
    """The table: every measured problem, and the envelopes of its leave-one-model-out
    cross-validation (workspace.build_table)."""
    from torchinspect.memory.workspace import build_table

    measured, info = _rows(paths), _machine(paths)
    rnn = rnn_run_rows(info)
    measured.update(rnn)
    coverage = (f"{len(measured)} problems: the convolutions of {len(TABLE_MODELS)} torchvision "
                f"models at batch {', '.join(map(str, sorted(BATCHES)))} in "
                f"{', '.join(DTYPES)} (forward and backward), a grid of cuDNN RNN problems and "
                f"{len(rnn)} RNN calls of {RNN_RUN.name} and {PROJ_RUN.name}")
    table = build_table(measured, info, coverage, owners(measured))
    TABLE.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(table.to_dict(), separators=(",", ":")).encode()
    TABLE.write_bytes(gzip.compress(data, mtime=0))
    print(f"{TABLE}: {len(measured)} entries, envelopes of {', '.join(table.envelopes)}, "
          f"{TABLE.stat().st_size // 1024} KiB", file=sys.stderr)


def rnn_run_rows(info: dict[str, Any]) -> dict[str, int]:
    """The RNN workspaces of `cudnn_rnn_memory.py`'s runs (same H100, torch and cuDNN; LSTMs
    with and without ``proj_size`` in the second): each forward's peak minus what it keeps,
    as `calibrate.measure_problem` measures, and in training the backward workspace its
    measured backward peak implies (`cudnn_rnn_memory.workspace_rows`). Only runs measured
    on the table's GPU, cuDNN and torch count (the first run's rows carry no header)."""
    from cudnn_rnn_memory import workspace_rows

    out: dict[str, int] = {}
    for path in (RNN_RUN, PROJ_RUN):
        if path.exists() and _same_machine(_header(path), info):
            out.update(workspace_rows(path))
    return out


def _header(path: Path) -> dict[str, Any] | None:
    for line in path.read_text().splitlines():
        row = json.loads(line) if line.strip() else {}
        if "fwd_peak" in row:
            return row.get("run")
    return None


def _same_machine(header: dict[str, Any] | None, info: dict[str, Any]) -> bool:
    """Whether a run header names the table's GPU, cuDNN and torch (no header: the first
    RNN run, made on the table's machine by the same session)."""
    if header is None or not info:
        return True
    torch_version = str(info.get("torch", "")).split("+")[0]
    return (header.get("device") == info.get("gpu") and header.get("cudnn") == info.get("cudnn")
            and str(header.get("versions", {}).get("torch", "")) == torch_version)


def owners(measured: dict[str, int]) -> dict[str, set[str]]:
    """Who each problem was measured for: convolutions, their torchvision models (the
    `problems` step's file); RNN problems, their configuration without sequence, batch and
    training flag (every length and batch of one RNN held out together)."""
    from torchinspect.memory.workspace import problem_from_key

    found: dict[str, set[str]] = {}
    models = json.loads(gzip.decompress(OWNERS.read_bytes())) if OWNERS.exists() else {}
    if ND_OWNERS.exists():  # the generic 1-D, 3-D and transposed configurations
        models.update(json.loads(ND_OWNERS.read_text()))
    for name, keys in models.items():
        for key in keys:
            found.setdefault(key, set()).add(name)
    for key in measured:
        if key.startswith("rnn"):
            p = problem_from_key(key).params
            found[key] = {"rnn " + " ".join(f"{k}={p.get(k, 0)}" for k in (
                "kind", "input", "hidden", "proj", "layers", "dirs", "dtype", "bias", "bf"))}
    return found


def check(paths: list[str]) -> None:
    """The leave-one-model-out cross-validation behind the envelopes: how close the
    nearest-neighbour point lands, how wide the range is, and how often the range holds the
    measurement when the envelope itself is built without the model's own errors (each
    torchvision model's, each RNN configuration's: cross-validation of the envelope)."""
    import statistics

    from torchinspect.memory.workspace import envelope, held_out_errors, problem_from_key

    measured = _rows(paths)
    fwd = [w for k, w in measured.items() if k.startswith("conv_fwd")]
    bwd = [(problem_from_key(k).size, w) for k, w in measured.items() if k.startswith("conv_bwd")]
    ratios = sorted(w / s for s, w in bwd if w)
    print(f"forward convolutions with no workspace: {sum(w == 0 for w in fwd)}/{len(fwd)}; "
          f"backward with one: {len(ratios)}/{len(bwd)}, workspace/problem bytes median "
          f"{statistics.median(ratios):.2f}, 90th percentile "
          f"{ratios[int(0.9 * len(ratios))]:.2f}; largest workspace "
          f"{max(w for _, w in bwd) / 2**20:.0f} MiB")
    measured.update(rnn_run_rows(_machine(paths)))
    who = owners(measured)
    errors = held_out_errors(measured, who)
    mib = 2**20
    for op, rows in sorted(errors.items()):
        env = envelope([(s, w - p) for _, s, w, p in rows])
        groups = sorted({g for key, *_ in rows for g in who.get(key, {key})})
        inside = 0
        for g in groups:  # the envelope without this group's errors, on this group's
            mine = [r for r in rows if g in who.get(r[0], {r[0]})]
            # a problem shared by several models counts once: with its first model
            mine = [r for r in mine if min(who.get(r[0], {r[0]})) == g]
            other = envelope([(s, w - p) for key, s, w, p in rows
                              if g not in who.get(key, {key})])
            inside += sum(p - other.at(s)[1] <= w <= p + other.at(s)[0] for _, s, w, p in mine)
        miss = sorted(abs(w - p) for _, s, w, p in rows)
        rel = sorted(abs(w - p) / w for _, s, w, p in rows if w >= mib)
        width = sorted((env.at(s)[0] + min(p, env.at(s)[1])) for _, s, w, p in rows)
        print(f"{op}: {len(rows)} held out; point off by median {miss[len(miss) // 2] / mib:.2f} "
              f"MiB, mean {statistics.mean(miss) / mib:.2f} MiB; within 10% (workspaces of 1 "
              f"MiB or more): {sum(r <= 0.1 for r in rel)}/{len(rel)}; range width median "
              f"{width[len(width) // 2] / mib:.1f} MiB, 90th percentile "
              f"{width[int(0.9 * len(width))] / mib:.1f} MiB; inside a range whose envelope "
              f"left the model out too: {inside}/{len(rows)} ({100 * inside / len(rows):.1f}%)")


def rnn_check() -> dict[str, Any]:
    """The RNN workspace estimates of the shipped table, cross-validated: each RNN
    configuration left out (every length, batch and mode of it), its problems estimated by the
    RNN workspace model refitted without it and, for comparison, by the nearest measured
    problem scaled by size (the estimate before it); the range with the envelope built
    without that configuration's errors too. Per envelope key (op and cell)."""
    import statistics

    from torchinspect.memory.workspace import (
        WorkspaceTable,
        envelope,
        held_out_errors,
        shipped_table,
    )

    table = shipped_table()
    measured = {k: v for k, v in table.entries.items() if k.startswith("rnn")}
    who = owners(measured)
    model = held_out_errors(measured, who)
    nearest = {}
    for key, rows in _held_out_nearest(measured, who).items():
        nearest[key] = rows

    def stats(rows: list[tuple[str, int, int, int]]) -> dict[str, Any]:
        rel = sorted(abs(p - w) / w for _, _, w, p in rows if w)
        return {"n": len(rel), "median": round(statistics.median(rel), 4),
                "p90": round(rel[int(0.9 * (len(rel) - 1))], 4),
                "within_5pct": sum(r <= 0.05 for r in rel),
                "within_10pct": sum(r <= 0.10 for r in rel), "worst": round(rel[-1], 4)}

    out: dict[str, Any] = {"table": table.machine, "entries": len(measured), "by": {}}
    for key, rows in sorted(model.items()):
        groups = sorted({g for k, *_ in rows for g in who.get(k, {k})})
        inside = 0
        for g in groups:
            mine = [r for r in rows if min(who.get(r[0], {r[0]})) == g]
            other = envelope([(s, w - p) for k, s, w, p in rows if g not in who.get(k, {k})])
            inside += sum(p - other.at(s)[1] <= w <= p + other.at(s)[0] for _, s, w, p in mine)
        out["by"][key] = {"model": stats(rows), "nearest": stats(nearest.get(key, [])),
                          "configurations": len(groups), "inside_cv_envelope": inside}
    out["model"] = WorkspaceTable({}, measured).rnn_fit()
    return out


def _held_out_nearest(measured: dict[str, int], who: dict[str, set[str]]) -> dict[
        str, list[tuple[str, int, int, int]]]:
    """`held_out_errors` with the nearest-neighbour estimate for RNN calls too."""
    import functools

    from torchinspect.memory.workspace import (
        WorkspaceTable,
        envelope_key,
        owned_by,
        problem_from_key,
    )

    table = WorkspaceTable({}, dict(measured), rnn_model={})
    out: dict[str, list[tuple[str, int, int, int]]] = {}
    for key in sorted(measured):
        problem = problem_from_key(key)
        point = table.nearest(problem, functools.partial(owned_by, who, who.get(key, {key})))
        if point is not None:
            out.setdefault(envelope_key(problem), []).append(
                (key, problem.size, measured[key], point))
    return out


def _machine(paths: list[str]) -> dict[str, Any]:
    for path in paths:
        raw = Path(path).read_bytes()
        text = gzip.decompress(raw).decode() if path.endswith(".gz") else raw.decode()
        for line in text.splitlines():
            row = json.loads(line)
            return {k: row[k] for k in ("gpu", "cudnn", "torch")}
    return {}


def _rows(paths: list[str]) -> dict[str, int]:
    measured: dict[str, int] = {}
    for path in paths:
        raw = Path(path).read_bytes()
        text = gzip.decompress(raw).decode() if path.endswith(".gz") else raw.decode()
        for line in text.splitlines():
            row = json.loads(line)
            if row["workspace"] is not None:
                measured[row["key"]] = row["workspace"]
    return measured


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="step", required=True)
    sub.add_parser("problems").add_argument("path")
    m = sub.add_parser("measure")
    m.add_argument("problems")
    m.add_argument("out")
    m.add_argument("--deadline", type=float, default=1200)
    m.add_argument("--dry-run", action="store_true", help="check the problem list, no GPU")
    sub.add_parser("problems-nd").add_argument("path")
    sub.add_parser("build").add_argument("paths", nargs="+")
    sub.add_parser("check").add_argument("paths", nargs="+")
    sub.add_parser("rnn-check").add_argument("out", help="the JSON to write")
    a = ap.parse_args()
    if a.step == "problems":
        problems(a.path)
    elif a.step == "measure":
        measure(a.problems, a.out, a.deadline, a.dry_run)
    elif a.step == "problems-nd":
        problems_nd(a.path)
    elif a.step == "check":
        check(a.paths)
    elif a.step == "rnn-check":
        from machine import save

        save(Path(a.out).stem, rnn_check())
    else:
        build(a.paths)


if __name__ == "__main__":
    main()
