"""GPU peaks for issue 40's memory work: LSTMs with projections, and a new validation set.

Two sets, chosen and committed before any of them was measured:

* ``rnnproj`` (development, issue 40 item 5): four models around an ``nn.LSTM`` with
  ``proj_size`` (uni- and bidirectional, batch-first and not, with dropout) - the cuDNN
  projection path to model (nn.GRU has no ``proj_size``);
* ``val`` (validation, never tuned on; benchmarks/memory_heldout.py's validation set has
  been seen): 15 models no memory set used, incl. 1-D convolutions (dilated, depthwise,
  transposed), 2-D and 3-D transposed convolutions, a 3-D CNN, RNNs with and without
  projections, transformers (a causal ``nn.TransformerDecoder``, Hugging Face GPT-NeoX and
  T5 from configs, a ViT) and a CNN.

Method of benchmarks/memory_heldout.py (``torchinspect.memory.verify.measure``: the peak
``max_memory_allocated`` per phase, weights resident, in three modes: inference (fp32,
eval, inference_mode); AdamW fp32; AdamW with bf16 autocast (fp32 master weights); loss =
sum of the first floating output; two steps), but each (model, mode) in a fresh process.
One JSON line per (model, mode), appended by the parent as each child ends, with the run
header (machine.run_header); a rerun measures only what the file lacks.

Predictions, each (model, mode) once, appended the same way (a rerun adds what is missing):

* ``predict``: without a GPU (the shipped workspace table; any machine): the point, the
  range of the unmeasured cuDNN workspaces (``ws_low``-``ws_high``) and that range widened by
  the shipped margins (``low``-``high``); the page widens ``ws_low``-``ws_high`` again with the
  margins of the day, so margins regenerated later need no new prediction;
* ``calibrate``: on the GPU, every cuDNN workspace measured op by op (``calibrate=True``),
  also for set ``heldout-rnn`` (the RNN models of memory_heldout.py, measured there);
* ``margins``: data/peak_margins.json from the development sets' calibrated errors only
  (memory_heldout.py's development set, GPU run 6, and this file's ``rnnproj`` with
  ``heldout-rnn``'s development models where a calibrated run of today's code exists).

Every prediction line names the memory model it was made with (``model``: a hash of
src/torchinspect/memory/, code and data), so predictions of different code are never mixed
unnoticed. ``benchmarks/pages_memory.py`` renders the RESULTS page from these files.

    PYTHONPATH=src python benchmarks/memory_validation.py measure OUT.jsonl \
        [--sets rnnproj,val] [--only NAME ...] [--jobs 4] [--budget S]
    PYTHONPATH=src python benchmarks/memory_validation.py measure OUT.jsonl --dry-run
        # on the CPU: every case built and run once per mode at its example size
    PYTHONPATH=src python benchmarks/memory_validation.py predict \
        benchmarks/results/memory-validation-predicted.jsonl --sets rnnproj,val --jobs 2
    PYTHONPATH=src python benchmarks/memory_validation.py calibrate \
        benchmarks/results/memory-validation-calibrated-h100.jsonl \
        --sets rnnproj,val,heldout-rnn --jobs 4 [--dry-run]
    PYTHONPATH=src python benchmarks/memory_validation.py margins

A model's case: ``case(name)`` here (a Python user gets the same model and inputs).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import memory_heldout  # noqa: E402 - stdlib-only at import
from memory_heldout import _cfg, _module, _tv, rnn_net  # noqa: E402

MODES = ("inference", "adamw-fp32", "adamw-bf16amp")


def _zoo(name: str, *specs: tuple[tuple[int, ...], str]) -> Callable[[], Any]:
    def factory() -> Any:
        import latency_zoo

        return getattr(latency_zoo, name)()
    return _built(factory, *specs)


def _built(factory: Callable[[], Any], *specs: tuple[tuple[int, ...], str]) -> Callable[[], Any]:
    return _module(factory, *specs)


def lstm(inp: int, hidden: int, layers: int, proj: int, bidir: bool, batch_first: bool,
         dropout: float = 0.0, out: int = 32) -> Any:
    """An ``nn.LSTM`` (``proj`` 0: no projection) and a linear head over its outputs."""
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            kw = {"proj_size": proj} if proj else {}
            self.rnn = nn.LSTM(inp, hidden, layers, batch_first=batch_first,
                               bidirectional=bidir, dropout=dropout, **kw)
            self.head = nn.Linear((proj or hidden) * (2 if bidir else 1), out)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.rnn(x)[0])

    return Net()


def gru(inp: int, hidden: int, layers: int, bidir: bool) -> Any:
    return rnn_net("gru", inp, hidden, layers, bidir, True)


def conv3d_net() -> Any:
    """A C3D-like video CNN: Conv3d k3 + BN + ReLU, max-pooling, 32..256 channels."""
    from torch import nn

    def block(cin: int, cout: int) -> list[nn.Module]:
        return [nn.Conv3d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm3d(cout), nn.ReLU()]

    return nn.Sequential(*block(3, 32), nn.MaxPool3d((1, 2, 2)), *block(32, 64), nn.MaxPool3d(2),
                         *block(64, 128), *block(128, 128), nn.MaxPool3d(2), *block(128, 256),
                         nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(256, 101))


def unet3d(width: int = 16) -> Any:
    """A 3-level 3-D U-Net (medical volumes): Conv3d blocks, max-pooling down,
    ``ConvTranspose3d`` (k2 s2) up, skip connections."""
    import torch
    from torch import nn

    def block(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv3d(cin, cout, 3, padding=1), nn.BatchNorm3d(cout), nn.ReLU(),
                             nn.Conv3d(cout, cout, 3, padding=1), nn.BatchNorm3d(cout), nn.ReLU())

    class UNet3d(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            c = [width, 2 * width, 4 * width, 8 * width]
            self.downs = nn.ModuleList([block(1, c[0]), block(c[0], c[1]), block(c[1], c[2])])
            self.mid = block(c[2], c[3])
            self.ups = nn.ModuleList([nn.ConvTranspose3d(c[i + 1], c[i], 2, stride=2)
                                      for i in (2, 1, 0)])
            self.decs = nn.ModuleList([block(2 * c[i], c[i]) for i in (2, 1, 0)])
            self.head = nn.Conv3d(c[0], 3, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            skips = []
            for down in self.downs:
                x = down(x)
                skips.append(x)
                x = nn.functional.max_pool3d(x, 2)
            x = self.mid(x)
            for up, dec in zip(self.ups, self.decs, strict=True):
                x = dec(torch.cat([up(x), skips.pop()], 1))
            return self.head(x)

    return UNet3d()


def hf_lm(kind: str) -> Any:
    """Hugging Face models from configs (random weights), returning logits only."""
    import torch
    from torch import nn

    from torchinspect.sources.hf import import_transformers

    tr = import_transformers()
    if kind == "gptneox":
        inner = tr.GPTNeoXForCausalLM(tr.GPTNeoXConfig(
            hidden_size=768, intermediate_size=3072, num_hidden_layers=8,
            num_attention_heads=12, vocab_size=50304, max_position_embeddings=2048))
    else:
        inner = tr.T5ForConditionalGeneration(tr.T5Config(
            d_model=512, d_ff=2048, d_kv=64, num_layers=6, num_decoder_layers=6, num_heads=8,
            vocab_size=32128))

    class LM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, ids: torch.Tensor, dec: torch.Tensor | None = None) -> torch.Tensor:
            if dec is None:
                return self.inner(input_ids=ids).logits
            return self.inner(input_ids=ids, decoder_input_ids=dec).logits

    return LM()


def vit_small() -> Any:
    import torchvision

    return torchvision.models.VisionTransformer(image_size=224, patch_size=16, num_layers=12,
                                                num_heads=6, hidden_dim=384, mlp_dim=1536)


F32, I64 = "float32", "int64"
RNNPROJ: dict[str, Callable[[], Any]] = {
    "lstmp-3l": _built(lambda: lstm(80, 1024, 3, 256, False, True), ((16, 200, 80), F32)),
    "lstmp-bi-2l": _built(lambda: lstm(64, 512, 2, 128, True, True), ((32, 120, 64), F32)),
    "lstmp-seqfirst": _built(lambda: lstm(300, 768, 1, 256, False, False), ((100, 24, 300), F32)),
    "lstmp-2l-dropout": _built(lambda: lstm(512, 2048, 2, 512, False, True, dropout=0.1),
                               ((8, 256, 512), F32)),
}
VAL: dict[str, Callable[[], Any]] = {
    "wavenet-b4": _zoo("DilatedConv1dStack", ((4, 1, 16000), F32)),
    "quartznet-b16": _zoo("SeparableConv1dNet", ((16, 80, 1600), F32)),
    "vocoder-b8": _zoo("Vocoder1d", ((8, 80, 128), F32)),
    "dcgan-b128": _zoo("DCGANGenerator", ((128, 128, 1, 1), F32)),
    "conv3d-net-b4": _built(conv3d_net, ((4, 3, 16, 112, 112), F32)),
    "unet3d-b2": _built(unet3d, ((2, 1, 64, 64, 64), F32)),
    "lstm-2l-seqfirst": _built(lambda: lstm(128, 512, 2, 0, False, False), ((150, 32, 128), F32)),
    "lstmp-bi-val": _built(lambda: lstm(128, 640, 2, 160, True, True), ((24, 300, 128), F32)),
    "lstmp-wide-val": _built(lambda: lstm(40, 1536, 1, 384, False, True), ((8, 500, 40), F32)),
    "gru-bi-2l": _built(lambda: gru(256, 384, 2, True), ((16, 200, 256), F32)),
    "causal-decoder-b16": _zoo("CausalDecoder", ((16, 256, 512), F32), ((16, 128, 512), F32)),
    "gptneox-8l-b4": _built(lambda: hf_lm("gptneox"), ((4, 512), I64)),
    "t5-small-b8": _built(lambda: hf_lm("t5"), ((8, 256), I64), ((8, 128), I64)),
    "regnet_x_3_2gf-b16": _tv("regnet_x_3_2gf", 224, 16),
    "vit-s16-b32": _built(vit_small, ((32, 3, 224, 224), F32)),
}
# memory_heldout.py's RNN models (measured there): calibrated again with today's RNN model
HELDOUT_RNN_DEV = ("lstm", "bigru")
HELDOUT_RNN: dict[str, Callable[[], Any]] = {
    n: memory_heldout.find(n) for n in (*HELDOUT_RNN_DEV, "lstm-bi3-bf", "gru-1", "rnn-tanh-2")}
SETS = {"rnnproj": RNNPROJ, "val": VAL, "heldout-rnn": HELDOUT_RNN}
RESULTS = HERE / "results"
MEASURED = RESULTS / "memory-validation-h100.jsonl"
PREDICTED = RESULTS / "memory-validation-predicted.jsonl"
CALIBRATED = RESULTS / "memory-validation-calibrated-h100.jsonl"
MARGINS = HERE.parent / "src/torchinspect/memory/data/peak_margins.json"
KIND = {"inference": "inference", "adamw-fp32": "training", "adamw-bf16amp": "training-amp"}


def case(name: str) -> Any:
    for models in SETS.values():
        if name in models:
            return models[name]()
    raise SystemExit(f"unknown model {name}")


def model_hash() -> str:
    """A short hash of the memory model: src/torchinspect/memory/ (code and data; not the
    margins, which predictions store apart: ``ws_low``/``ws_high``)."""
    import hashlib

    root = HERE.parent / "src" / "torchinspect" / "memory"
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".json", ".gz") and path.name != \
                MARGINS.name:
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def _set_of(name: str) -> str:
    return next(s for s, models in SETS.items() if name in models)


def measure_one(name: str, mode: str) -> dict[str, Any]:
    """In this (fresh) process: the peak of one mode (verify.measure), per phase."""
    import torch

    from torchinspect.memory.predict import example_at
    from torchinspect.memory.verify import measure

    c = case(name)
    cfg = _cfg(mode)
    params = sum(p.numel() for p in c.model.parameters())
    measured = measure(c, example_at(c, None), cfg, "training" if cfg.train else "inference")
    return {"measured": measured, "params": params, "gpu": torch.cuda.get_device_name(),
            "cudnn": torch.backends.cudnn.version()}


def dry_one(name: str, mode: str) -> dict[str, Any]:
    """On the CPU: the case built and one step of the mode run at batch 1."""
    import torch

    from torchinspect.memory.predict import example_at
    from torchinspect.sources.case import materialize

    c = case(name)
    model = c.real_model("cpu")
    args, kwargs = materialize(example_at(c, 1), "cpu")
    if mode == "inference":
        with torch.inference_mode():
            model.eval()(*args, **kwargs)
    else:
        from torchinspect.memory.step import first_floating

        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode.endswith("amp")):
            loss = first_floating(model.train()(*args, **kwargs), name).float().sum()
        loss.backward()
        torch.optim.AdamW(model.parameters()).step()
    return {"dry_run": True, "params": sum(p.numel() for p in model.parameters())}


def predict_one(name: str, mode: str, calibrate: bool) -> dict[str, Any]:
    """In this (fresh) process: one mode predicted for an H100, without a GPU (the shipped
    table; the workspace range ``ws_low``-``ws_high``, and ``low``-``high`` widened by the
    shipped margins) or calibrated on the GPU here (memory_heldout._predicted)."""
    from torchinspect.memory.faking import make_target

    target = make_target("cuda", None if calibrate else "h100", calibrate=calibrate)
    out = memory_heldout._predicted(case(name), mode, target)
    out["low"], out["high"] = out.pop("peak_low"), out.pop("peak_high")
    out["model_hash"], out["gpu"] = model_hash(), target.gpu
    if calibrate:
        import torch

        out["device"] = torch.cuda.get_device_name()
        out["cudnn"] = torch.backends.cudnn.version()
    return out


def _done(out: Path) -> set[tuple[str, str]]:
    if not out.exists():
        return set()
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return {(r["model"], r["mode"]) for r in rows
            if "model" in r and "error" not in r and not r.get("dry_run")}


def measure_all(out: Path, names: list[str], jobs: int, budget: float, dry_run: bool,
                timeout: float, step: str = "one") -> None:
    """Each (model, mode) the file lacks in a child process (``step``: one, i.e. measure,
    or predict/calibrate), one JSON line appended as each child ends."""
    from machine import run_header

    header = run_header("transformers")
    deadline = time.monotonic() + budget
    done = _done(out)
    todo = [(n, m) for n in names for m in MODES if (n, m) not in done]

    def one(item: tuple[str, str]) -> None:
        name, mode = item
        if time.monotonic() > deadline:
            return
        row: dict[str, Any] = {"run": header, "set": _set_of(name), "model": name, "mode": mode}
        t0 = time.monotonic()
        cmd = [sys.executable, __file__, step, name, mode] + ["--dry-run"] * dry_run
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                  env=os.environ.copy())
            if proc.returncode == 0:
                row.update(json.loads(proc.stdout.strip().splitlines()[-1]))
            else:
                row["error"] = (proc.stderr.strip().splitlines() or ["?"])[-1][:400]
        except subprocess.TimeoutExpired:
            row["error"] = f"timed out after {timeout} s"
        row["seconds"] = round(time.monotonic() - t0, 2)
        with out.open("a", encoding="utf-8") as fh:  # one write per line: no interleaving
            fh.write(json.dumps(row) + "\n")
        peak = (row.get("measured") or row.get("predicted") or {}).get("peak")
        print(f"{name} {mode}: {peak if peak is not None else row.get('error', 'dry run')} "
              f"({row['seconds']} s)", flush=True)

    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, todo))


# -- the margins of a prediction without a GPU: development sets only


def development_errors() -> dict[str, list[tuple[str, float]]]:
    """Per kind of run: (model, calibrated peak / measured peak - 1) of every development
    model: memory_heldout.py's development set (its GPU run), each RNN model of it and each
    ``rnnproj`` model from the calibrated run of today's model where there is one."""
    errors: dict[str, list[tuple[str, float]]] = {k: [] for k in KIND.values()}
    calibrated = {(r["model"], r["mode"]): r["predicted"]["peak"] for r in _lines(CALIBRATED)
                  if "predicted" in r and r["predicted"].get("model_hash") == model_hash()}
    measured = {(r["model"], r["mode"]): r["measured"]["peak"] for r in _lines(MEASURED)
                if "measured" in r}
    for name in memory_heldout.DEV:
        path = RESULTS / "memory-heldout-h100" / f"{name}.json"
        row = json.loads(path.read_text()) if path.exists() else {}
        for mode, kind in KIND.items():
            real = row.get(mode, {}).get("measured", {}).get("peak")
            cal = calibrated.get((name, mode), row.get(mode, {}).get("calibrated", {}).get("peak"))
            if real and cal:
                errors[kind].append((name, cal / real - 1))
    for name in RNNPROJ:
        for mode, kind in KIND.items():
            real, cal = measured.get((name, mode)), calibrated.get((name, mode))
            if real and cal:
                errors[kind].append((name, cal / real - 1))
    return errors


def write_margins() -> None:
    """data/peak_margins.json from `development_errors`."""
    from torchinspect.memory.margins import margins_from

    errors = development_errors()
    found = margins_from({k: [e for _, e in v] for k, v in errors.items()})
    models = sorted({n for v in errors.values() for n, _ in v})
    MARGINS.write_text(json.dumps({
        "version": 1, "measured_on": "NVIDIA H100 80GB HBM3",
        "source": "benchmarks/results/memory-heldout-h100, "
                  "benchmarks/results/memory-validation-calibrated-h100.jsonl",
        "set": f"development ({len(models)} models: {', '.join(models)}), calibrated peak / "
               "measured peak - 1",
        "kinds": {k: {"low": round(m.low, 6), "high": round(m.high, 6), "n": m.n}
                  for k, m in found.items()}}, indent=1) + "\n")
    print(f"{MARGINS}: " + "; ".join(f"{k} {100 * m.low:+.2f}%..{100 * m.high:+.2f}% (n={m.n})"
                                     for k, m in found.items()), file=sys.stderr)


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=("measure", "one", "predict", "calibrate", "predict-one",
                                     "calibrate-one", "margins"))
    ap.add_argument("args", nargs="*")
    ap.add_argument("--sets", default="rnnproj,val")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--budget", type=float, default=1e9, help="seconds: no new child after")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per child")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    if a.step == "one":
        name, mode = a.args
        print(json.dumps((dry_one if a.dry_run else measure_one)(name, mode)))
        return
    if a.step in ("predict-one", "calibrate-one"):
        name, mode = a.args
        # --dry-run calibrate: the same child without a GPU (calibrate=False), to prove it
        calibrate = a.step == "calibrate-one" and not a.dry_run
        print(json.dumps({"predicted": predict_one(name, mode, calibrate),
                          **({"dry_run": True} if a.dry_run else {})}))
        return
    if a.step == "margins":
        write_margins()
        return
    names = [n for s in a.sets.split(",") for n in SETS[s] if not a.only or n in a.only]
    out = Path(a.args[0])
    out.parent.mkdir(parents=True, exist_ok=True)
    step = {"measure": "one", "predict": "predict-one", "calibrate": "calibrate-one"}[a.step]
    measure_all(out, names, a.jobs, a.budget, a.dry_run, a.timeout, step)


if __name__ == "__main__":
    main()
