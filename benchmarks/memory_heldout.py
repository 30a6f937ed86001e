"""`inspect memory` on a development set and a held-out validation set, per phase.

The development set is what the predictor was tuned on (issue 22's models and the misses
that issue 32 names); the validation set was chosen before looking at any result and is
never tuned on. Each model runs three modes: inference (fp32, eval, inference_mode); AdamW
fp32; AdamW with bf16 autocast (fp32 master weights); loss = sum of the first floating
output, two steps.

    # on the GPU: each model in a fresh process: the real peaks (verify.measure), then the
    # calibrated prediction (cuDNN workspaces measured op by op on that GPU)
    PYTHONPATH=src python benchmarks/memory_heldout.py measure --set all --out DIR --jobs 4
    # the margins of a prediction without a GPU: the development sets' calibrated errors
    # (this one's and memory_validation.py's LSTM-projection models)
    PYTHONPATH=src python benchmarks/memory_validation.py margins
    # on a CPU-only machine: the prediction without a GPU (shipped table, range); the logs
    # kept to replay them: cross-validated development set (own table problems and own
    # calibrated errors left out), or against a new table without a fake run
    HELDOUT_LOGS=LOGS PYTHONPATH=src python benchmarks/memory_heldout.py predict --set all \
        --out benchmarks/results/memory-heldout-predicted
    PYTHONPATH=src python benchmarks/memory_heldout.py replay LOGS \
        --cv benchmarks/results/memory-heldout-h100 --out benchmarks/results/memory-heldout-predicted-cv
    # the tables, printed (RESULTS-memory.md and the summary in docs/concepts/memory.md are
    # rendered by benchmarks/pages_memory.py: make bench-report)
    PYTHONPATH=src python benchmarks/memory_heldout.py report \
        benchmarks/results/memory-heldout-h100 benchmarks/results/memory-heldout-predicted \
        --cv benchmarks/results/memory-heldout-predicted-cv
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

MODES = {
    "inference": {"train": False},
    "adamw-fp32": {"train": True, "optimizer": "adamw"},
    "adamw-bf16amp": {"train": True, "optimizer": "adamw", "amp": "bf16"},
}
# --checkpointing, checked where a model has the block (not part of the accuracy summary)
CHECKPOINTED = {"resnet50": ("adamw-bf16amp-ckpt", "Bottleneck"),
                "resnet152-b12": ("adamw-bf16amp-ckpt", "Bottleneck")}


def _tv(name: str, size: int, batch: int, **kw: Any) -> Callable[[], Any]:
    def build() -> Any:
        from torchinspect.sources.case import ModelOptions, make_case

        if kw:
            from dataclasses import replace

            import torchvision

            from torchinspect.inputs import ExampleInputs, TensorSpec

            model = torchvision.models.get_model(name, weights=None, **kw)
            return replace(make_case(model, ExampleInputs((TensorSpec((batch, 3, size, size)),))),
                           name=name)
        return make_case(name, options=ModelOptions(inputs=[f"3,{size},{size}"], batch=batch))
    return build


def _module(factory: Callable[[], Any], *specs: tuple[tuple[int, ...], str]) -> Callable[[], Any]:
    def build() -> Any:
        from torchinspect.inputs import ExampleInputs, TensorSpec
        from torchinspect.sources.case import make_case

        return make_case(factory(), ExampleInputs(tuple(
            TensorSpec(shape, dtype, None, 1000 if dtype == "int64" else None)
            for shape, dtype in specs)))
    return build


# -- models defined here (no downloads)

def unet(width: int = 32, depth: int = 3, transposed: bool = False) -> Any:
    """An encoder-decoder with skip connections (conv-BN-ReLU blocks, max-pool down;
    nearest upsampling or transposed convolutions up)."""
    import torch
    from torch import nn

    def block(cin: int, cout: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU())

    class UNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            chans = [width * 2**i for i in range(depth + 1)]
            self.downs = nn.ModuleList([block(3 if i == 0 else chans[i - 1], chans[i])
                                        for i in range(depth)])
            self.mid = block(chans[depth - 1], chans[depth])
            self.ups = nn.ModuleList([
                nn.ConvTranspose2d(chans[i + 1], chans[i], 2, stride=2) if transposed
                else nn.Sequential(nn.Upsample(scale_factor=2), nn.Conv2d(chans[i + 1], chans[i], 1))
                for i in reversed(range(depth))])
            self.decs = nn.ModuleList([block(2 * chans[i], chans[i]) for i in reversed(range(depth))])
            self.head = nn.Conv2d(chans[0], 2, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            skips = []
            for down in self.downs:
                x = down(x)
                skips.append(x)
                x = nn.functional.max_pool2d(x, 2)
            x = self.mid(x)
            for up, dec in zip(self.ups, self.decs, strict=True):
                x = dec(torch.cat([up(x), skips.pop()], 1))
            return self.head(x)

    return UNet()


def rnn_net(kind: str, size: int, hidden: int, layers: int, bidir: bool, batch_first: bool,
            dropout: float = 0.0) -> Any:
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            cls = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}[kind]
            self.rnn = cls(size, hidden, num_layers=layers, bidirectional=bidir,
                           batch_first=batch_first, dropout=dropout)
            self.head = nn.Linear(hidden * (2 if bidir else 1), 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.rnn(x)[0])

    return Net()


def tcn() -> Any:
    """Dilated 1-D convolutions (a temporal convolutional network)."""
    from torch import nn

    layers: list[nn.Module] = [nn.Conv1d(64, 128, 3, padding=1)]
    for d in (1, 2, 4, 8, 16):
        layers += [nn.Conv1d(128, 128, 3, padding=d, dilation=d), nn.ReLU()]
    return nn.Sequential(*layers, nn.Conv1d(128, 16, 1))


def encoder(d: int, heads: int, layers: int, batch_first: bool = True) -> Any:
    from torch import nn

    layer = nn.TransformerEncoderLayer(d, heads, 4 * d, batch_first=batch_first)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


def seq2seq() -> Any:
    import torch
    from torch import nn

    class Seq2Seq(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.t = nn.Transformer(256, 8, 3, 3, 1024, batch_first=True)

        def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
            return self.t(src, tgt)

    return Seq2Seq()


def hf_decoder() -> Any:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return Qwen2ForCausalLM(Qwen2Config(
        hidden_size=512, intermediate_size=1408, num_hidden_layers=6, num_attention_heads=8,
        num_key_value_heads=2, vocab_size=16000, attn_implementation="sdpa"))


def video() -> Any:
    import torchvision

    return torchvision.models.video.r3d_18(weights=None)


def _accuracy(name: str) -> Callable[[], Any]:
    def build() -> Any:
        sys.path.insert(0, str(Path(__file__).parent))
        from memory_accuracy import build_case

        return build_case(name)
    return build


DEV: dict[str, Callable[[], Any]] = {
    **{n: _accuracy(n) for n in ("resnet50", "vit_b_16", "convnext_tiny", "efficientnet_b0",
                                 "mobilenet_v3_large", "swin_t", "fcn_resnet50", "bert-base",
                                 "gpt2", "llama-scaled", "lstm", "loop100")},
    "vgg16": _tv("vgg16", 224, 32),
    "deeplabv3_resnet50": _tv("deeplabv3_resnet50", 224, 8, aux_loss=False,
                              weights_backbone=None),
    "unet-small": _module(lambda: unet(32, 3), ((8, 3, 256, 256), "float32")),
    "bigru": _module(lambda: rnn_net("gru", 256, 512, 2, True, False), ((200, 16, 256), "float32")),
    "transformer-encoder": _module(lambda: encoder(512, 8, 6), ((16, 256, 512), "float32")),
}

VAL: dict[str, Callable[[], Any]] = {
    "alexnet-b24": _tv("alexnet", 224, 24),
    "resnet152-b12": _tv("resnet152", 192, 12),
    "densenet169-b16": _tv("densenet169", 224, 16),
    "resnext101_32x8d-b6": _tv("resnext101_32x8d", 224, 6),
    "regnet_y_1_6gf-b20": _tv("regnet_y_1_6gf", 224, 20),
    "mobilenet_v2-b40-160": _tv("mobilenet_v2", 160, 40),
    "efficientnet_b2-b12-260": _tv("efficientnet_b2", 260, 12),
    "lraspp_mobilenet_v3-b6-320": _tv("lraspp_mobilenet_v3_large", 320, 6,
                                      weights_backbone=None),
    "tcn-dilated": _module(tcn, ((16, 64, 4096), "float32")),
    "r3d_18-b4": _module(video, ((4, 3, 16, 112, 112), "float32")),
    "unet-transposed": _module(lambda: unet(24, 4, transposed=True), ((6, 3, 192, 192), "float32")),
    "lstm-bi3-bf": _module(lambda: rnn_net("lstm", 128, 384, 3, True, True, 0.1),
                           ((20, 150, 128), "float32")),
    "gru-1": _module(lambda: rnn_net("gru", 300, 768, 1, False, False), ((100, 48, 300), "float32")),
    "rnn-tanh-2": _module(lambda: rnn_net("rnn", 64, 512, 2, False, True), ((16, 400, 64), "float32")),
    "encoder-384": _module(lambda: encoder(384, 6, 4), ((24, 200, 384), "float32")),
    "transformer-seq2seq": _module(seq2seq, ((12, 128, 256), "float32"), ((12, 96, 256), "float32")),
    "qwen2-decoder": _module(hf_decoder, ((4, 512), "int64")),
}
SETS = {"dev": DEV, "val": VAL}


def find(name: str) -> Callable[[], Any]:
    for models in SETS.values():
        if name in models:
            return models[name]
    raise SystemExit(f"unknown model {name}")


def _cfg(mode: str, checkpointing: str | None = None) -> Any:
    from torchinspect.memory.step import StepConfig

    kw = MODES[mode.removesuffix("-ckpt")]
    return StepConfig(train=kw["train"], optimizer=kw.get("optimizer", "adamw"), amp=kw.get("amp"),
                      checkpointing=checkpointing)


def _modes(name: str) -> dict[str, str | None]:
    """mode -> the module type checkpointed in it (None: no checkpointing)."""
    out: dict[str, str | None] = dict.fromkeys(MODES)
    if name in CHECKPOINTED:
        out[CHECKPOINTED[name][0]] = CHECKPOINTED[name][1]
    return out


def _predicted(case: Any, mode: str, target: Any, checkpointing: str | None = None) -> dict[str, Any]:
    """One mode predicted: the point, the range (``peak_low``-``peak_high``: without a GPU
    widened by the shipped margins, as `inspect memory` shows it) and the range of the cuDNN
    workspaces alone (``ws_low``-``ws_high``: a page widens it with the margins of the day)."""
    from torchinspect.memory import margins
    from torchinspect.memory.predict import predict_case

    t0 = time.perf_counter()
    cfg = _cfg(mode, checkpointing)
    shipped, original = margins.shipped_margins(), margins.shipped_margins
    margins.shipped_margins = lambda: {}  # type: ignore[assignment]  # the range before margins
    try:
        r = predict_case(case, cfg, target, inference=not cfg.train)
    finally:
        margins.shipped_margins = original  # type: ignore[assignment]
    run = r.training if cfg.train else r.inference
    assert run is not None
    out = {"peak": run.peak, "peak_low": run.peak_low, "peak_high": run.peak_high,
           "ws_low": run.peak_low, "ws_high": run.peak_high,
           "high_at": run.high_at, "where": run.where, "seconds": round(time.perf_counter() - t0, 2),
           "phases": {f"{p.phase}:{p.step}": p.peak for p in run.phases},
           "notes": [n for n in r.notes if "cuDNN" in n or "calibration" in n]}
    kind = KIND[mode.removesuffix("-ckpt")]
    if target.device == "cuda" and not target.calibrate and kind in shipped:
        low, high = run.peak_low or run.peak, run.peak_high or run.peak
        out["peak_low"], out["peak_high"] = shipped[kind].widen(low, high)
        out["margins"] = {"kind": kind, "low": shipped[kind].low, "high": shipped[kind].high}
    return out


def measure_one(name: str, out: Path) -> None:
    """On the GPU, in this (fresh) process: the three modes measured, then predicted with
    calibration (cuDNN workspaces measured op by op, cache in $XDG_CACHE_HOME)."""
    import torch

    from torchinspect.memory.calibrate import machine
    from torchinspect.memory.faking import make_target
    from torchinspect.memory.predict import example_at
    from torchinspect.memory.verify import measure

    case = find(name)()
    row: dict[str, Any] = {"model": name, "set": "dev" if name in DEV else "val", **machine()}
    modes = _modes(name)
    for mode, ckpt in modes.items():
        cfg = _cfg(mode, ckpt)
        try:
            measured = measure(case, example_at(case, None), cfg,
                               "training" if cfg.train else "inference")
            row[mode] = {"measured": measured}
        except Exception as exc:  # out of memory, or a model the step cannot run
            row[mode] = {"error": f"measure: {type(exc).__name__}: {exc}"[:300]}
        torch.cuda.empty_cache()
    for mode, ckpt in modes.items():
        try:
            row[mode]["calibrated"] = _predicted(case, mode, make_target("cuda", calibrate=True),
                                                 ckpt)
        except Exception as exc:  # one failing mode is a row's note, not a lost model
            row[mode]["calibrated-error"] = f"{type(exc).__name__}: {exc}"[:300]
    (out / f"{name}.json").write_text(json.dumps(row, indent=1))


def _keep_logs(folder: Path, name: str) -> None:
    """Pickle each run's allocation log (``replay`` step: new workspace bytes, no fake run)."""
    import pickle

    from torchinspect.memory import predict

    original = predict.replay_ranged
    count = [0]

    def keep(log: Any, end: int, mode: str, target: Any, root: str, top: int, ws: Any) -> Any:
        count[0] += 1
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{name}.{count[0]}.pkl"
        path.write_bytes(pickle.dumps((log, end, mode, target, root)))
        return original(log, end, mode, target, root, top, ws)

    predict.replay_ranged = keep  # type: ignore[assignment]


def predict_one(name: str, out: Path) -> None:
    """Without a GPU: the point, low and high peaks from the shipped table."""
    from torchinspect.memory.faking import make_target

    if os.environ.get("HELDOUT_LOGS"):
        _keep_logs(Path(os.environ["HELDOUT_LOGS"]), name)
    case = find(name)()
    from memory_validation import model_hash

    row: dict[str, Any] = {"model": name, "set": "dev" if name in DEV else "val",
                           "machine": "CPU only (no CUDA device)", "model_hash": model_hash()}
    for mode, ckpt in _modes(name).items():
        try:
            row[mode] = _predicted(case, mode, make_target("cuda", "h100", calibrate=False), ckpt)
        except Exception as exc:
            row[mode] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    (out / f"{name}.json").write_text(json.dumps(row, indent=1))


KIND = {"inference": "inference", "adamw-fp32": "training", "adamw-bf16amp": "training-amp"}
MARGINS = Path(__file__).resolve().parents[1] / "src/torchinspect/memory/data/peak_margins.json"


def calibrated_errors(measured_dir: Path, leave_out: str | None = None) -> dict[str, list[float]]:
    """Per kind of run: the calibrated error (predicted / measured - 1) of each development
    model's peak (``leave_out``: without that model, for its cross-validated range)."""
    errors: dict[str, list[float]] = {k: [] for k in KIND.values()}
    for name in DEV:
        path = measured_dir / f"{name}.json"
        if name == leave_out or not path.exists():
            continue
        row = json.loads(path.read_text())
        for mode, kind in KIND.items():
            real = row.get(mode, {}).get("measured", {}).get("peak")
            cal = row.get(mode, {}).get("calibrated", {}).get("peak")
            if real and cal:
                errors[kind].append(cal / real - 1)
    return errors


def write_margins(measured_dir: Path) -> None:
    """data/peak_margins.json: written by memory_validation.py margins (this development set
    and issue 40's LSTM-projection models; ``measured_dir`` is this set's GPU run)."""
    from memory_validation import write_margins as write

    if measured_dir.resolve() != (Path(__file__).parent / "results" / "memory-heldout-h100").resolve():
        raise SystemExit("margins come from results/memory-heldout-h100 and "
                         "memory_validation.py's files: run memory_validation.py margins")
    write()


def held_out_table(name: str, problems: list[Any]) -> Any:
    """The shipped table without what a sweep that never saw this model would lack: the
    problems of its torchvision model, and the RNN configurations it runs (any length,
    batch, training flag or layout), keeping the shipped envelopes."""
    import gzip

    from torchinspect.memory.workspace import WorkspaceTable, problem_from_key, shipped_table

    table = shipped_table()
    models = json.loads(gzip.decompress((Path(__file__).parent / "results" /
                                         "cudnn-workspace-models.json.gz").read_bytes()))
    base = name.split("-b")[0]
    drop = set(models.get(base, ()))
    shape = ("kind", "input", "hidden", "proj", "layers", "dirs", "dtype", "bias")
    mine = {tuple(p.params.get(k, 0) for k in shape) for p in problems if p.op.startswith("rnn")}
    for key in table.entries:
        if key.startswith("rnn") and tuple(problem_from_key(key).params.get(k, 0)
                                           for k in shape) in mine:
            drop.add(key)
    # no stored RNN model: it is refitted without the dropped configurations
    return WorkspaceTable(table.machine, {k: v for k, v in table.entries.items()
                                          if k not in drop}, table.envelopes, table.coverage)


def replay_logs(logs: Path, out: Path, cache: Path | None, cv: Path | None = None) -> None:
    """Predictions again from pickled logs (``HELDOUT_LOGS``) with the current workspace
    table and margins (or a calibration cache file: the calibrated prediction), no fake
    run. ``cv``: the measured folder; each development model then gets the table without
    its own problems and the margins without its own errors (cross-validated)."""
    import pickle

    from torchinspect.memory import margins
    from torchinspect.memory.predict import replay_ranged
    from torchinspect.memory.workspace import Workspaces, shipped_table

    out.mkdir(parents=True, exist_ok=True)
    entries = json.loads(cache.read_text())["entries"] if cache else None
    names = list(DEV) if cv else [n for models in SETS.values() for n in models]
    for name in names:
        from memory_validation import model_hash

        row: dict[str, Any] = {"model": name, "set": "dev" if name in DEV else "val",
                               "model_hash": model_hash(),
                               "machine": "replayed logs of a CPU-only machine" + (
                                   f", workspaces of {cache.name}" if cache else "") + (
                                   ", leave-one-model-out" if cv else "")}
        logged = [(mode, logs / f"{name}.{i}.pkl") for i, mode in enumerate(_modes(name), 1)]
        loaded = {mode: pickle.loads(path.read_bytes()) for mode, path in logged if path.exists()}
        table, found = shipped_table(), None
        if cv:
            problems = [a.problem for log, *_ in loaded.values() for a in log.allocs.values()
                        if a.kind == "cudnn"]
            table = held_out_table(name, problems)
            found = margins.margins_from(calibrated_errors(cv, leave_out=name))
        for mode, (log, end, run_mode, target, root) in loaded.items():
            ws = Workspaces(table, True, calibrated=entries)
            run = replay_ranged(log, end, run_mode, target, root, 10, ws)
            ws_low, ws_high = run.peak_low, run.peak_high
            if cache is None:
                margins.widen(run, KIND[mode.removesuffix("-ckpt")], found)
            row[mode] = {"peak": run.peak, "peak_low": run.peak_low, "peak_high": run.peak_high,
                         "ws_low": ws_low, "ws_high": ws_high,
                         "high_at": run.high_at, "where": run.where,
                         "phases": {f"{p.phase}:{p.step}": p.peak for p in run.phases}}
        (out / f"{name}.json").write_text(json.dumps(row, indent=1))


def fan_out(step: str, names: list[str], out: Path, jobs: int, timeout: float = 600) -> None:
    out.mkdir(parents=True, exist_ok=True)

    def one(name: str) -> None:
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, __file__, step, "--one", name, "--out",
                                   str(out)], capture_output=True, text=True,
                                  env=os.environ.copy(), timeout=timeout)
        except subprocess.TimeoutExpired:
            print(f"{name}: timed out after {timeout} s", file=sys.stderr, flush=True)
            return
        tail = proc.stderr.strip().splitlines()[-3:] if proc.returncode else []
        print(f"{name}: rc {proc.returncode} in {time.perf_counter() - t0:.0f} s {tail}",
              file=sys.stderr, flush=True)

    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, names))


# -- the report


def _err(pred: int, real: int) -> float:
    return (pred - real) / real


def _rows(measured_dir: Path, predicted_dir: Path) -> list[dict[str, Any]]:
    rows = []
    for set_name, models in SETS.items():
        for name in models:
            m = measured_dir / f"{name}.json"
            p = predicted_dir / f"{name}.json"
            if not m.exists() or not p.exists():
                continue
            mrow, prow = json.loads(m.read_text()), json.loads(p.read_text())
            for mode in MODES:  # the --checkpointing rows are a check of their own
                real = mrow.get(mode, {}).get("measured", {}).get("peak")
                cal = mrow.get(mode, {}).get("calibrated", {})
                pr = prow.get(mode, {})
                if not real or "peak" not in pr:
                    continue
                rows.append({"set": set_name, "model": name, "mode": mode, "real": real,
                             "cal": cal.get("peak"), "point": pr["peak"], "low": pr["peak_low"],
                             "high": pr["peak_high"], "where": pr.get("high_at") or pr["where"],
                             "gpu": mrow["gpu"]})
    return rows


def _no_gpu(sel: list[dict[str, Any]]) -> str:
    inside = sum(r["low"] <= r["real"] <= r["high"] for r in sel)
    point5 = sum(abs(_err(r["point"], r["real"])) <= 0.05 for r in sel)
    widths = [(r["high"] - r["low"]) / r["real"] for r in sel]
    return (f"measurement inside [peak_low, peak_high]: {inside}/{len(sel)}; "
            f"point within 5%: {point5}/{len(sel)}; median |error| of the point "
            f"{100 * statistics.median(abs(_err(r['point'], r['real'])) for r in sel):.2f}%; "
            f"median range width {100 * statistics.median(widths):.1f}% of the peak "
            f"(widest {100 * max(widths):.0f}%)")


def report(measured_dir: Path, predicted_dir: Path, summary_only: bool = False,
           cv_dir: Path | None = None) -> str:
    lines: list[str] = []
    rows = _rows(measured_dir, predicted_dir)
    cv_rows = _rows(measured_dir, cv_dir) if cv_dir else []
    mib = 2**20
    for set_name in SETS:
        sel = [r for r in rows if r["set"] == set_name]
        if not sel:
            continue
        cal = [abs(_err(r["cal"], r["real"])) for r in sel if r["cal"]]
        cv = [r for r in cv_rows if r["set"] == set_name]
        lines += [f"### {'Development' if set_name == 'dev' else 'Validation (held out)'} set: "
                  f"{len({r['model'] for r in sel})} models, {len(sel)} peaks",
                  "",
                  f"- calibrated (GPU present): within 3%: "
                  f"{sum(e <= 0.03 for e in cal)}/{len(cal)}, median |error| "
                  f"{100 * statistics.median(cal):.2f}%, worst {100 * max(cal):.1f}%" if cal else
                  "- calibrated: no data",
                  f"- without a GPU: {_no_gpu(sel)}"]
        if cv:
            lines.append(f"- without a GPU, cross-validated (each model with its own problems "
                         f"left out of the workspace table and its own calibrated errors left "
                         f"out of the margins): {_no_gpu(cv)}")
        lines.append("")
        if summary_only:
            continue
        lines += ["| model | mode | measured MiB | calibrated | no GPU: point | range MiB | inside |"
                  " upper end set by |",
                  "|---|---|---:|---:|---:|---:|:-:|---|"]
        for r in sel:
            c = f"{100 * _err(r['cal'], r['real']):+.1f}%" if r["cal"] else "-"
            lines.append(
                f"| {r['model']} | {r['mode']} | {r['real'] / mib:,.0f} | {c} | "
                f"{100 * _err(r['point'], r['real']):+.1f}% | {r['low'] / mib:,.0f}-"
                f"{r['high'] / mib:,.0f} | {'yes' if r['low'] <= r['real'] <= r['high'] else 'NO'}"
                f" | {r['where']} |")
        lines.append("")
    gpus = sorted({r["gpu"] for r in rows})
    return "\n".join([f"Measured on {', '.join(gpus)} (torch 2.11, cuDNN 9.19); calibrated "
                      "predictions on that machine, predictions without a GPU on a CPU-only "
                      "machine (torch 2.14). Generated by `benchmarks/memory_heldout.py report` "
                      f"from `{measured_dir}` and `{predicted_dir}`"
                      + (f" (cross-validated: `{cv_dir}`)" if cv_dir else "") + ".", "", *lines])


def write_block(path: Path, text: str, tag: str = "heldout") -> None:
    """Replace the text between ``<!-- TAG:begin -->`` and ``<!-- TAG:end -->`` (benchmarks/
    report.py renders the same blocks from the committed data and checks them)."""
    from pagetext import with_block

    path.write_text(with_block(path.read_text(), tag, text, where=str(path)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=("measure", "predict", "report", "replay", "margins"))
    ap.add_argument("--cache", help="replay: a calibration cache file (calibrated prediction)")
    ap.add_argument("--cv", help="replay: the measured folder; development models "
                    "cross-validated (own table problems and own errors left out); report: "
                    "the folder of such a replay, summarised beside the development set")
    ap.add_argument("dirs", nargs="*")
    ap.add_argument("--set", default="all", choices=("all", "dev", "val"))
    ap.add_argument("--one")
    ap.add_argument("--out", default="heldout")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=600, help="seconds per model")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--write", nargs="*", help="report: pages whose heldout block to replace "
                    "(the first gets the tables, the others the summary lines)")
    a = ap.parse_args()
    if a.step == "report":
        measured, predicted = Path(a.dirs[0]), Path(a.dirs[1])
        cv = Path(a.cv) if a.cv else None
        if a.write:
            write_block(Path(a.write[0]), report(measured, predicted, cv_dir=cv))
            for page in a.write[1:]:
                write_block(Path(page), report(measured, predicted, summary_only=True, cv_dir=cv))
        else:
            print(report(measured, predicted, cv_dir=cv))
        return
    if a.step == "replay":
        replay_logs(Path(a.dirs[0]), Path(a.out), Path(a.cache) if a.cache else None,
                    Path(a.cv) if a.cv else None)
        return
    if a.step == "margins":
        write_margins(Path(a.dirs[0]))
        return
    out = Path(a.out)
    if a.one:
        (measure_one if a.step == "measure" else predict_one)(a.one, out)
        return
    # the held-out set first: a deadline leaves its rows
    names = [n for s in ("val", "dev") if a.set in ("all", s) for n in SETS[s]]
    fan_out(a.step, [n for n in names if not a.only or n in a.only], out, a.jobs, a.timeout)


if __name__ == "__main__":
    main()
