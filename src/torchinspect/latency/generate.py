"""The latency of text generation on a named GPU, from a CPU: time to first token, the time
per new token of eager ``generate``, and of a static-cache decode step under a CUDA graph.

Each figure prices the ops of one traced call (``trace/generation.py``, on meta) through the
latency predictor's own pricing (``record_call``, ``price_trace``), so it improves when the
kernel pricing does:

* **prefill** (time to first token): the prompt through the model with generate's cache and
  generate's own work on the first token; eager: the larger of GPU time and the host's
  dispatch time (`HostModel`), whichever binds.
* **decode, eager** (``generate`` as transformers runs it): one decode step traced at the
  first and at the last cache length of the call (the attention reads the whole cache: its
  bytes grow with every token, priced as the memory-bound op it is), averaged; each step is
  a forward plus generate's per-step work (``prepare_inputs_for_generation``, the logits
  copy, the processors, ``argmax``, the cache and mask growth), and generate reads the
  stopping flag on the host every step, so a step costs the larger of its host and GPU time.
* **decode under a CUDA graph** (a serving engine's floor): one step with a ``StaticCache``
  (preallocated at prompt + new tokens, its attention reading the whole of it, masked)
  priced as graph replay: kernels only, no host. Where a CUDA graph cannot capture the step
  for the real model (a device value read on the host, a host-to-device copy:
  ``CaptureCheck``), it is not predicted and the reason is said.

The host side of the eager figures is the latency predictor's `HostModel` (dispatched ops and
module calls x this CPU's cost x the host factor) times one scale for generation,
``data/generate-host.json``: a decoder's forward dispatches many cheap ops (views, small
element-wise ops), so the factor fitted on whole models over-prices them. The scale is the
median of measured over predicted eager decode on the development set of
``benchmarks/generate_measure.py``, fitted by ``benchmarks/generate_predict.py --fit-host``
(never on the validation set).
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import torch

from torchinspect.dtypes import RUN, SHORT
from torchinspect.errors import InspectError, first_line
from torchinspect.latency.calibrated import LatencyGpu, latency_gpu
from torchinspect.latency.eager import HostModel, host_model
from torchinspect.latency.host import HostCost
from torchinspect.latency.ops import OpTrace, record_call
from torchinspect.latency.predict import BatchPrediction, price_trace
from torchinspect.trace.engine import forward_mode
from torchinspect.trace.generation import (
    CacheKind,
    CaptureCheck,
    Decoder,
    DecoderKind,
    Generation,
    HostRead,
    check_context,
    find_decoder,
    meta_state,
    token_input,
    with_weights,
)

HOST_TABLE = "generate-host.json"


@dataclass(frozen=True)
class HostScale:
    """The scale on the host model's time for a generate call, and where it comes from."""

    scale: float
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"scale": self.scale, "source": self.source}


def host_scale() -> HostScale:
    """The packaged scale (1 with a note-worthy source where the table is missing or bad)."""
    try:
        data = json.loads(resources.files("torchinspect.latency").joinpath(
            "data", HOST_TABLE).read_text(encoding="utf-8"))
        scale = float(data["host_scale"])
        if not 0.05 <= scale <= 20:
            raise ValueError(scale)
        return HostScale(scale, f"data/{HOST_TABLE}: {data.get('fitted_on', '')}".strip())
    except (OSError, ValueError, KeyError, TypeError):
        return HostScale(1.0, f"no valid data/{HOST_TABLE}: the host model unscaled")


@dataclass
class Phase:
    """One priced call: its GPU time (graph replay), host time, and what binds eagerly."""

    gpu_ms: float
    host_ms: float
    kernels: int
    dispatched: int
    flops: float
    bytes: float

    @property
    def eager_ms(self) -> float:
        return max(self.gpu_ms, self.host_ms)

    @property
    def binds(self) -> str:
        return "host" if self.host_ms > self.gpu_ms else "gpu"

    @classmethod
    def of(cls, p: BatchPrediction) -> Phase:
        return cls(p.gpu_ms, p.host_ms, p.kernels, p.dispatched, p.flops, p.bytes)

    @classmethod
    def mean(cls, phases: list[Phase]) -> Phase:
        n = len(phases)
        return cls(sum(p.gpu_ms for p in phases) / n, sum(p.host_ms for p in phases) / n,
                    round(sum(p.kernels for p in phases) / n),
                    round(sum(p.dispatched for p in phases) / n),
                    sum(p.flops for p in phases) / n, sum(p.bytes for p in phases) / n)

    def to_dict(self) -> dict[str, Any]:
        return {"gpu_ms": self.gpu_ms, "host_ms": self.host_ms, "eager_ms": self.eager_ms,
                "binds": self.binds, "kernels": self.kernels, "dispatched_ops": self.dispatched,
                "flops": self.flops, "bytes": self.bytes}


@dataclass
class GenerateLatency:
    """``predicted.generate`` of ``inspect bench --generate N --predict GPU``."""

    model: str
    inputs: str
    gpu: str
    gpu_label: str
    source: str
    dtype: str
    batch: int
    prompt: int
    new_tokens: int
    decoder: str
    host: HostCost
    host_factor: float
    host_scale: HostScale
    prefill: Phase
    decode: Phase  # per step, averaged over the call's cache lengths
    graph: Phase | None  # a static-cache step under a CUDA graph (None: not capturable)
    graph_reason: str = ""  # why a CUDA graph cannot capture the step
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def prefill_ms(self) -> float:
        return self.prefill.eager_ms

    @property
    def decode_ms_per_token(self) -> float:
        return self.decode.eager_ms

    @property
    def decode_graph_ms_per_token(self) -> float | None:
        return self.graph.gpu_ms if self.graph is not None else None

    @property
    def tokens_per_s(self) -> float:
        """New tokens a second across the batch while decoding (eager)."""
        return self.batch * 1e3 / self.decode_ms_per_token if self.decode_ms_per_token else 0.0

    @property
    def graph_tokens_per_s(self) -> float | None:
        ms = self.decode_graph_ms_per_token
        return self.batch * 1e3 / ms if ms else None

    @property
    def total_ms(self) -> float:
        """The whole generate call: the prefill, then one step per token after the first."""
        return self.prefill_ms + (self.new_tokens - 1) * self.decode_ms_per_token

    def to_dict(self) -> dict[str, Any]:
        return {"predicted": True, "model": self.model, "inputs": self.inputs, "gpu": self.gpu,
                "gpu_label": self.gpu_label, "table": self.source, "dtype": self.dtype,
                "host": self.host.to_dict(), "host_factor": self.host_factor,
                "host_scale": self.host_scale.to_dict(), "generate": {
                    "batch": self.batch, "prompt": self.prompt, "new_tokens": self.new_tokens,
                    "decoder": self.decoder,
                    "prefill_ms": self.prefill_ms, "prefill_binds": self.prefill.binds,
                    "decode_ms_per_token": self.decode_ms_per_token,
                    "decode_binds": self.decode.binds,
                    "decode_graph_ms_per_token": self.decode_graph_ms_per_token,
                    "graph_capturable": self.graph is not None,
                    "graph_reason": self.graph_reason,
                    "tokens_per_s": self.tokens_per_s,
                    "graph_tokens_per_s": self.graph_tokens_per_s,
                    "total_ms": self.total_ms,
                    "prefill": self.prefill.to_dict(), "decode": self.decode.to_dict(),
                    "graph": self.graph.to_dict() if self.graph is not None else None},
                "notes": list(self.notes), "seconds": round(self.seconds, 3)}


@dataclass(frozen=True)
class LatencyConfig:
    """What one generate prediction prices (the CLI's --generate --dtype --cache ...)."""

    new_tokens: int
    dtype: str = "bf16"
    cache: CacheKind = CacheKind.dynamic
    cache_arg: str | None = None
    recompute: bool = False
    prefill: str = "generate"  # "forward": a plain forward over the prompt (see below)
    tf32: bool | None = None


def predict_generate_latency(model: Any, gpu: str, inputs: Any = None, *, new_tokens: int,
                             dtype: str = "bf16", cache: str = "dynamic",
                             cache_arg: str | None = None, recompute: bool = False,
                             host: HostCost | None = None,
                             options: Any = None) -> GenerateLatency:
    """Predict ``generate`` of ``new_tokens`` tokens after the model's token input (``inputs``,
    e.g. ``"long:8,2048"``: 8 prompts of 2,048 tokens) on GPU ``gpu`` (a name of the GPU
    catalogue) in ``dtype``: time to first token, per new token eager and under a CUDA
    graph. ``host``: the CPU's dispatch cost (default: this one's, probed)."""
    from torchinspect.sources.case import make_case

    case = make_case(model, inputs, options=options, device="meta")
    cfg = LatencyConfig(new_tokens, dtype, CacheKind(cache), cache_arg, recompute)
    return predict_case(case, cfg, latency_gpu(gpu), host_model(host))


def predict_case(case: Any, cfg: LatencyConfig, gpu: LatencyGpu, host: HostModel, *,
                 batch: int | None = None, decoder: Decoder | None = None,
                 scale: HostScale | None = None) -> GenerateLatency:
    """The three figures for one case (``batch`` overrides its input's)."""
    started = time.perf_counter()
    if cfg.dtype not in RUN:
        raise InspectError(f"--dtype {cfg.dtype!r}: generation is predicted in "
                           f"{', '.join(RUN)}", hint="e.g. --dtype bf16")
    if isinstance(cfg.new_tokens, bool) or cfg.new_tokens < 1:
        raise InspectError(f"--generate {cfg.new_tokens!r}: expected a number of new tokens, 1 "
                           "or more", hint="e.g. --generate 128")
    decoder = decoder or find_decoder(case, cache_arg=cfg.cache_arg, recompute=cfg.recompute)
    b, prompt, _ = token_input(case.require_example(), case.name)
    batch = batch or b
    check_context(decoder, prompt, cfg.new_tokens)
    scale = scale if scale is not None else host_scale()
    pricer = _Pricer(decoder, cfg, gpu, host, batch, prompt, scale.scale)
    prefill = pricer.prefill()
    decode = pricer.decode()
    graph, reason = pricer.graph()
    notes = list(decoder.notes) + pricer.notes
    if not gpu.calibrated:
        notes.append(f"{gpu.spec.name} has no measured table: datasheet peaks with the H100's "
                     "measured efficiencies")
    notes.append("eager decode: each step's forward and generate's own per-step work, priced "
                 "as dispatched ops on this CPU; generate reads its stopping flag on the host "
                 "every step, so a step costs the larger of its host and GPU time")
    result = GenerateLatency(
        case.name, case.describe_inputs(), gpu.spec.name, gpu.spec.label, gpu.source, cfg.dtype,
        batch, prompt, cfg.new_tokens, str(decoder.kind), host.cost, host.factor, scale, prefill,
        decode, graph, reason, notes)
    result.seconds = time.perf_counter() - started
    return result


class _Pricer:
    """Traces one call of a generate at a time on meta weights of the priced dtype."""

    def __init__(self, decoder: Decoder, cfg: LatencyConfig, gpu: LatencyGpu, host: HostModel,
                 batch: int, prompt: int, scale: float = 1.0) -> None:
        self.decoder, self.cfg, self.gpu, self.host = decoder, cfg, gpu, host
        self.scale = scale
        self.batch, self.prompt = batch, prompt
        self.state = meta_state(decoder.model, getattr(torch, SHORT[cfg.dtype]))
        self.padding_mask = True
        self.notes: list[str] = []

    def _generation(self, prompt: int, **kw: Any) -> Generation:
        kw.setdefault("padding_mask", self.padding_mask)
        kw.setdefault("cache", self.cfg.cache)
        return Generation(self.decoder, self.batch, prompt, self.cfg.new_tokens, **kw)

    def _traced(self, make: Any, record: str, steps: int = 0) -> OpTrace:
        """Run a generation on meta and record one call: "prefill", "forward" (a plain
        forward over the prompt) or "step" (after the prefill and ``steps`` steps)."""
        out: list[OpTrace] = []

        def body() -> None:
            gen = make()
            if record in ("prefill", "forward"):
                out.append(record_call(gen.prefill if record == "prefill" else gen.forward))
                return
            gen.prefill()
            for _ in range(steps):
                gen.step()
            out.append(record_call(gen.step))

        self._run(body)
        return out[0]

    def _run(self, body: Any) -> None:
        model = self.decoder.model
        # no_grad, not inference_mode: composite ops (linear) then reach the recorder as the
        # kernels they run (mm), as in the forward predict_latency records
        with warnings.catch_warnings(), forward_mode(model, False), torch.no_grad():
            warnings.simplefilter("ignore")
            try:
                with_weights(model, self.state, body)
            except (InspectError, HostRead):
                raise
            except Exception as exc:
                raise InspectError(f"{self.decoder.name}: the generate trace on meta failed: "
                                   f"{type(exc).__name__}: {first_line(exc)}",
                                   hint="rerun with --debug for the traceback") from exc

    def _priced(self, trace: OpTrace) -> Phase:
        phase = Phase.of(price_trace(trace, self.gpu, self.cfg.dtype, self.batch, self.host,
                                     self.cfg.tf32))
        phase.host_ms *= self.scale
        return phase

    def _with_mask_fallback(self, fn: Any) -> Any:
        try:
            return fn()
        except HostRead:
            if not self.padding_mask:
                raise
            self.padding_mask = False
            self.notes.append("traced without the attention mask: the model reads a value of "
                              "it on the host that a trace without data does not know")
            return fn()

    def prefill(self) -> Phase:
        """Time to first token: generate's prefill (``cfg.prefill == "forward"``: a plain
        forward over the prompt with ``use_cache=True`` and every position's logits, as
        ``benchmarks/generate_measure.py`` times it)."""
        record = "forward" if self.cfg.prefill == "forward" else "prefill"
        return self._priced(self._with_mask_fallback(lambda: self._traced(
            lambda: self._generation(self.prompt), record)))

    def decode(self) -> Phase:
        """A decode step averaged over the call: priced at the first and the last cache
        length (GPU time grows with the cache it reads; host time does not). An
        encoder-decoder's decoder cache grows one position a step: its first two steps give
        the growth per position."""
        last = max(self.cfg.new_tokens - 2, 0)
        if self.decoder.kind is not DecoderKind.seq2seq or last < 2:
            return Phase.mean([self.step(at) for at in sorted({0, last})])
        first, second = self.step(0), self.step(1)
        grow = second.gpu_ms - first.gpu_ms
        return Phase(first.gpu_ms + grow * last / 2, (first.host_ms + second.host_ms) / 2,
                     second.kernels, second.dispatched, second.flops, second.bytes)

    def step(self, at: int) -> Phase:
        """The decode step that reads ``at`` more tokens than the prompt. A decoder-only
        model's cache of that length comes from a prefill that long (the same cache a grown
        one is); an encoder-decoder's decoder grows from one position, step by step."""
        if self.decoder.kind is DecoderKind.seq2seq:
            return self._priced(self._with_mask_fallback(lambda: self._traced(
                lambda: self._generation(self.prompt), "step", steps=at)))
        return self._priced(self._with_mask_fallback(lambda: self._traced(
            lambda: self._generation(self.prompt + at), "step")))

    def graph(self) -> tuple[Phase | None, str]:
        """A static-cache step under a CUDA graph; (None, why) where it cannot be captured.
        A decoder-only step is captured as engines do, without a padding mask; an
        encoder-decoder's takes the encoder's mask every step, as generate passes it."""
        if not self.decoder.hf:
            return self._custom_graph()
        checks: list[CaptureCheck] = []
        out: list[OpTrace] = []

        def body() -> None:
            gen = Generation(self.decoder, self.batch, self.prompt, self.cfg.new_tokens,
                             cache=CacheKind.static,
                             padding_mask=self.decoder.kind is DecoderKind.seq2seq)
            gen.prefill()
            check = CaptureCheck(gen)
            checks.append(check)
            with check:
                out.append(record_call(gen.step))

        try:
            self._run(body)
        except HostRead as exc:  # in the prefill: the static cache cannot even be set up
            return None, f"the static cache's setup reads a device value on the host ({exc.op})"
        if not checks or not checks[0].capturable or not out:
            return None, checks[0].reason() if checks else "not traced"
        return self._priced(out[0]), ""

    def _custom_graph(self) -> tuple[Phase | None, str]:
        """A decoder of one's own: its own cache, stepped as it is (a cache that grows by
        concatenation changes shape every step: not one CUDA graph)."""
        if not self.decoder.cached:
            return None, "no cache: every step is a forward of another length"
        checks: list[CaptureCheck] = []
        out: list[OpTrace] = []

        def body() -> None:
            gen = self._generation(self.prompt)
            gen.prefill()
            before = [tuple(t.shape) for t in gen.cache_tensors()]
            check = CaptureCheck(gen)
            checks.append(check)
            with check:
                out.append(record_call(gen.step))
            if before != [tuple(t.shape) for t in gen.cache_tensors()]:
                check.reasons.append("its cache changes shape every step (a CUDA graph "
                                     "replays fixed shapes: a preallocated cache would)")

        self._run(body)
        if not checks or not checks[0].capturable or not out:
            return None, checks[0].reason() if checks else "not traced"
        return self._priced(out[0]), ""
