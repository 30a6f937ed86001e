"""The memory of text generation: the peak of a whole ``generate`` call, without a GPU.

``inspect memory MODEL --input long:B,P --no-batch --generate N`` runs the generation trace
(``trace/generation.py``: the prefill, then one decode step per new token, with the model's own
cache classes) on meta tensors under the storage tracker, and replays the log through the CUDA
caching allocator's rules (``timeline.replay``), as ``inspect memory`` does for one forward:

* **weights** (and buffers, the prompt's ids and attention mask) are resident before it starts;
* **the KV cache** is what the cache object holds after each call (``Generation.cache_tensors``:
  the layout the model really uses: grouped- or multi-query heads, sliding windows, the
  cross-attention cache of an encoder-decoder, a static or FP8-quantized cache), marked
  ``kv cache``; a ``DynamicCache`` grows by concatenation, so each layer's old and new tensors
  meet for a moment and the allocator sees a new block per layer per step;
* **activations and transients**: the prefill's (attention, MLP, the logits generate keeps:
  the last position where the model takes ``logits_to_keep``) and each step's, plus
  generate's own per-step tensors (the fp32 copy of the logits, the processors, the ids).

Generating N tokens takes N - 1 decode steps after the prefill. A step's allocations repeat
from step to step, each a fixed size or growing by a fixed amount per token, so the first
`TRACED_STEPS` steps are traced (the first differs: it frees the prefill's cache), the
pattern and its growth are read from the last two, and the later steps are written out from
it; a second trace, two steps after a prefill just short of the last step's cache length,
checks the sizes there (a sliding window that fills inside the generated span breaks the
pattern: then every step is traced). An encoder-decoder's cache grows from one position, so
no shorter prefill reaches its last step: one more step is traced instead, and the growth
must repeat over three. The replay sees every step.
"""

from __future__ import annotations

import contextlib
import gc
import math
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from torchinspect.errors import InspectError
from torchinspect.memory.faking import Target, fake_state, make_target, mark_kind, run_error
from torchinspect.memory.kernels import cuda_kernels
from torchinspect.memory.modules import ForwardModules
from torchinspect.memory.step import DTYPES
from torchinspect.memory.timeline import replay
from torchinspect.memory.tracker import Alloc, Event, Log, Phase, StorageTracker
from torchinspect.trace.engine import forward_mode
from torchinspect.trace.generation import (
    CacheKind,
    Decoder,
    DecoderKind,
    GenerateLoop,
    Generation,
    HostRead,
    KvPerToken,
    check_context,
    find_decoder,
    kv_per_token,
    token_input,
    with_weights,
)

TRACED_STEPS = 3  # decode steps traced before the pattern is written out


@dataclass
class GeneratePhase:
    """The highest allocated total within one phase of a generate call, and its makeup."""

    phase: str  # resident (before generate), prefill, decode
    peak: int
    module: str
    breakdown: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "peak": self.peak, "module": self.module,
                "breakdown": dict(self.breakdown)}


@dataclass
class GenerateMemory:
    """The predicted memory of one ``generate`` call (``to_dict()["generate"]``)."""

    model: str
    input: str
    batch: int
    prompt: int
    new_tokens: int
    device: str
    gpu: str | None
    dtype: str | None
    cache: str
    decoder: str
    params: int
    weights_bytes: int
    buffer_bytes: int
    input_bytes: int
    workspace_bytes: int
    kv_cache_bytes: int  # at its largest (the end, or after the prefill: see _result)
    kv_bytes_per_token: int  # per sequence: what one token adds while every layer grows
    prefill_peak: int
    decode_peak: int
    phases: list[GeneratePhase]
    steps_traced: int = 0
    steps_written: int = 0
    kv_cache_end_bytes: int = 0  # after the last step: every position of every sequence
    budget: int | None = None  # --fit: bytes the card leaves to the allocator
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def peak(self) -> int:
        return max(self.prefill_peak, self.decode_peak)

    @property
    def resident(self) -> int:
        """What is allocated before generate starts: weights, buffers, the prompt."""
        return self.weights_bytes + self.buffer_bytes + self.input_bytes

    @property
    def where(self) -> str:
        phase = max(self.phases, key=lambda p: p.peak)
        return phase.phase + (f" at {phase.module}" if phase.module else "")

    def fits(self, reserve: float = 0.0) -> bool | None:
        if self.budget is None:
            return None
        return self.peak * (1 + reserve) <= self.budget

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "input": self.input, "device": self.device,
                "gpu": self.gpu, "dtype": self.dtype, "generate": {
                    "batch": self.batch, "prompt": self.prompt, "new_tokens": self.new_tokens,
                    "cache": self.cache, "decoder": self.decoder, "peak": self.peak,
                    "where": self.where, "weights_bytes": self.weights_bytes,
                    "buffer_bytes": self.buffer_bytes, "input_bytes": self.input_bytes,
                    "workspace_bytes": self.workspace_bytes,
                    "kv_cache_bytes": self.kv_cache_bytes,
                    "kv_cache_end_bytes": self.kv_cache_end_bytes,
                    "kv_bytes_per_token": self.kv_bytes_per_token,
                    "prefill_peak": self.prefill_peak, "decode_peak": self.decode_peak,
                    "phases": [p.to_dict() for p in self.phases],
                    "steps_traced": self.steps_traced, "steps_written": self.steps_written},
                "params": self.params, "budget": self.budget, "notes": list(self.notes),
                "seconds": round(self.seconds, 3)}


@dataclass(frozen=True)
class GenerateConfig:
    """What one generate prediction runs (the CLI's --generate --dtype --cache ...)."""

    new_tokens: int
    dtype: str | None = None
    cache: CacheKind = CacheKind.dynamic
    cache_arg: str | None = None
    recompute: bool = False
    logits: str = "generate"  # "all": the prefill computes every position's logits
    padding_mask: bool = True  # pass generate's attention mask (see trace/generation.py)


def predict_generate(model: Any, inputs: Any = None, *, new_tokens: int, dtype: str | None = None,
                     cache: str = "dynamic", cache_arg: str | None = None,
                     recompute: bool = False, device: str = "cuda", gpu: str | None = None,
                     options: Any = None) -> GenerateMemory:
    """The predicted peak memory of ``generate`` of ``new_tokens`` tokens on the model's
    token input (``--input long:B,P --no-batch``: B prompts of P tokens).

    ``model``: a ModelCase, an ``nn.Module`` or any MODEL text; ``dtype``: weights cast to
    it; ``cache``: dynamic (generate's default), static or quantized; ``cache_arg``: the
    keyword a module of one's own takes its cache by; ``recompute``: a model without a cache
    generates by running the whole sequence each step."""
    from torchinspect.sources.case import make_case

    case = make_case(model, inputs, options=options, device="meta")
    cfg = GenerateConfig(new_tokens, dtype, CacheKind(cache), cache_arg, recompute)
    return predict_case(case, cfg, make_target(device, gpu, fast=True))


@dataclass
class Shared:
    """What the predictions of one --fit search share: the decoder, its KV bytes per token,
    and (over batches at one prompt) whether the written-out steps were checked at the last
    step's cache length, which does not depend on the batch."""

    decoder: Decoder | None = None
    per_token: KvPerToken | None = None
    batches_only: bool = False
    checked: bool = False


def predict_case(case: Any, cfg: GenerateConfig, target: Target, *, batch: int | None = None,
                 prompt: int | None = None, shared: Shared | None = None) -> GenerateMemory:
    """The prediction for one case (``batch`` / ``prompt`` override its input's)."""
    started = time.perf_counter()
    check_new_tokens(cfg.new_tokens)
    shared = shared if shared is not None else Shared()
    decoder = shared.decoder = shared.decoder or find_decoder(
        case, cache_arg=cfg.cache_arg, recompute=cfg.recompute)
    b, p, _ = token_input(case.require_example(), case.name)
    batch, prompt = batch or b, prompt or p
    check_context(decoder, prompt, cfg.new_tokens)
    try:
        run = _Run(decoder, cfg, target, batch, prompt)
        log, steps = run.trace(cfg.new_tokens - 1)
    except HostRead:
        if not cfg.padding_mask:
            raise
        cfg = replace(cfg, padding_mask=False)
        run = _Run(decoder, cfg, target, batch, prompt)
        log, steps = run.trace(cfg.new_tokens - 1)
    traced, written = steps, 0
    if steps < cfg.new_tokens - 1:
        written = cfg.new_tokens - 1 - steps
        full = _written_out(run, log, written, check=not shared.checked)
        if full is not None:
            log = full
            shared.checked = shared.batches_only
        else:  # the pattern does not hold to the end: trace every step
            run = _Run(decoder, cfg, target, batch, prompt)
            log, traced = run.trace(cfg.new_tokens - 1, all_steps=True)
            written = 0
    if shared.per_token is None:
        shared.per_token = kv_per_token(case, DTYPES[cfg.dtype] if cfg.dtype else None,
                                        cfg.cache, decoder)
    result = _result(case, decoder, cfg, target, run, log, batch, prompt, traced, written,
                     shared.per_token)
    result.seconds = time.perf_counter() - started
    return result


def check_new_tokens(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InspectError(f"--generate {n!r}: expected a number of new tokens, 1 or more",
                           hint="e.g. --generate 128")


class _Run:
    """One traced generate: the log, where each step starts, the serials each step made."""

    def __init__(self, decoder: Decoder, cfg: GenerateConfig, target: Target, batch: int,
                 prompt: int) -> None:
        self.decoder, self.cfg, self.target = decoder, cfg, target
        self.batch, self.prompt = batch, prompt
        # always meta tensors (no data, no FakeTensorMode): a generate call of a large model
        # makes no tensor real, whichever allocator (cuda, cpu) the log is replayed through
        self.tracker = StorageTracker(workspace=target.workspace, device_type="meta",
                                      cudnn=target.device == "cuda",
                                      gpu=target.gpu if target.device == "cuda" else None)
        self.bounds: list[tuple[int, int]] = []  # per step: (first event, first serial)
        self.sizes: dict[str, int] = {}
        self.cache_sizes: list[int] = []  # bytes the cache holds after the prefill and each step

    def trace(self, steps: int, *, all_steps: bool = False) -> tuple[Log, int]:
        """Prefill and ``steps`` decode steps (at most `TRACED_STEPS` unless ``all_steps``)."""
        traced = TRACED_STEPS + (self.decoder.kind is DecoderKind.seq2seq)
        todo = steps if all_steps else min(steps, traced)
        model = self.decoder.model
        tracker = self.tracker
        with _no_warnings(), forward_mode(model, False):
            state, kinds = fake_state(model, "meta", self.cfg.dtype)
            for name, t in state.items():
                tracker.register(t, kinds[name])
            self.sizes = {k: sum(t.numel() * t.element_size() for n, t in state.items()
                                 if kinds[n] == k) for k in ("weights", "buffers")}
            self.sizes["params"] = sum(t.numel() for n, t in state.items()
                                       if kinds[n] == "weights")
            gen = Generation(self.decoder, self.batch, self.prompt, self.cfg.new_tokens,
                             device="meta", cache=self.cfg.cache,
                             logits=self.cfg.logits, padding_mask=self.cfg.padding_mask)
            for t in (gen.ids, gen.mask):
                if t is not None:
                    tracker.register(t, "input")
            self.sizes["input"] = sum(t.numel() * t.element_size() for t in (gen.ids, gen.mask)
                                      if t is not None)
            loop = GenerateLoop(model)
            modules = ForwardModules()
            modules.transparent(loop)
            kernels = cuda_kernels() if self.target.emulated else contextlib.nullcontext()

            def body() -> None:
                tracker.mark(Phase.prefill, 0)
                gen.prefill()
                self._cached(gen)
                tracker.mark(Phase.decode, 1)
                for _ in range(todo):
                    self._boundary()
                    with _gc_paused():
                        gen.step()
                    self._cached(gen)
                self._boundary()

            try:
                with tracker, modules, kernels, torch.inference_mode():
                    tracker.modules = modules
                    with _gc_paused():
                        with_weights(model, state, body, loop)
            except (InspectError, HostRead):
                raise
            except Exception as exc:
                raise run_error(self.decoder.name, "generate", exc) from exc
            log = Log(tracker.log.allocs, list(tracker.log.events), tracker.log.ops)
        return log, todo

    def _boundary(self) -> None:
        gc.collect()  # cyclic garbage of a step goes at its end, as a step-long GC would
        self.bounds.append((len(self.tracker.log.events), self.tracker._next))

    def _cached(self, gen: Generation) -> None:
        for t in gen.cache_tensors():
            mark_kind(self.tracker, t, "cache")
        self.cache_sizes.append(gen.cache_bytes())


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic collection inside a step: releases then happen at the same place every step."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextlib.contextmanager
def _no_warnings() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# -- writing out the later steps

Ref = tuple[str, int, int]  # ("new", 0, i) | ("back", d, i) | ("fixed", 0, serial)


def _step_refs(run: _Run, k: int, log: Log) -> list[tuple[bool, Ref]] | None:
    """Step ``k``'s events (1-based), each serial as what it is relative to the step."""
    start, first = run.bounds[k - 1]
    end, last = run.bounds[k] if k < len(run.bounds) else (len(log.events), run.tracker._next)
    out: list[tuple[bool, Ref]] = []
    for ev in log.events[start:end]:
        if ev.serial == 0:
            return None  # a mark inside a step: not a plain step
        out.append((ev.alloc, _ref(run, k, ev.serial, log)))
    return out


def _ref(run: _Run, k: int, serial: int, log: Log) -> Ref:
    for d in range(0, k):
        first = run.bounds[k - 1 - d][1]
        end = run.bounds[k - d][1] if k - d < len(run.bounds) else run.tracker._next
        if first < serial <= end:
            return ("new", 0, serial - first - 1) if d == 0 else ("back", d, serial - first - 1)
    return ("fixed", 0, serial)


def _new_sizes(run: _Run, k: int) -> list[int]:
    first = run.bounds[k - 1][1]
    end = run.bounds[k][1] if k < len(run.bounds) else run.tracker._next
    return [run.tracker.log.allocs[s].nbytes for s in range(first + 1, end + 1)]


@dataclass
class _Pattern:
    refs: list[tuple[bool, Ref]]
    sizes: list[int]  # of the last traced step's new allocations
    growth: list[int]  # per step
    allocs: list[Alloc]  # the last traced step's, as templates


def _pattern(run: _Run, log: Log) -> _Pattern | None:
    """The last traced step's events, if the step before repeats them; its growth per step
    (an encoder-decoder: the same over the two steps before)."""
    k = len(run.bounds) - 1  # steps traced
    compared = 3 if run.decoder.kind is DecoderKind.seq2seq else 2
    if k < compared + 1:  # the first step frees the prefill's cache: never a pattern
        return None
    steps = list(range(k - compared + 1, k + 1))
    refs = [_step_refs(run, j, log) for j in steps]
    if any(r is None or r != refs[-1] for r in refs):
        return None
    sizes = [_new_sizes(run, j) for j in steps]
    growth = [b - a for a, b in zip(sizes[-2], sizes[-1], strict=True)]
    if compared == 3 and [b - a for a, b in zip(sizes[0], sizes[1], strict=True)] != growth:
        return None
    first = run.bounds[k - 1][1]
    allocs = [log.allocs[s] for s in range(first + 1, first + 1 + len(sizes[-1]))]
    return _Pattern(refs[-1] or [], sizes[-1], growth, allocs)


def _written_out(run: _Run, log: Log, more: int, *, check: bool = True) -> Log | None:
    """``log`` with ``more`` steps written out from its pattern; None when there is none or
    (``check``) the sizes it gives at the last step differ from a trace at that step's cache
    length."""
    pattern = _pattern(run, log)
    if pattern is None:
        return None
    if check and run.decoder.kind is not DecoderKind.seq2seq and \
            not _last_step_agrees(run, pattern, more):
        return None
    end = run.bounds[-1][0]
    events = list(log.events[:end])
    allocs = dict(log.allocs)
    k = len(run.bounds) - 1
    made: list[list[int]] = [[run.bounds[j - 1][1] + 1 + i for i in range(len(_new_sizes(run, j)))]
                             for j in range(1, k + 1)]
    serial = run.tracker._next
    templates = [(a.phase, a.module, a.kind, size, grow) for a, size, grow in
                 zip(pattern.allocs, pattern.sizes, pattern.growth, strict=True)]
    for n in range(1, more + 1):
        step = list(range(serial + 1, serial + 1 + len(templates)))
        for (phase, module, kind, size, grow), made_serial in zip(templates, step, strict=True):
            allocs[made_serial] = Alloc(made_serial, size + grow * n, phase, module, k + n, kind)
        serial = step[-1] if step else serial
        made.append(step)
        for alloc, (kind, d, i) in pattern.refs:
            ref = step[i] if kind == "new" else made[-1 - d][i] if kind == "back" else i
            events.append(Event(ref, alloc))
    events += log.events[end:]
    return Log(allocs, events, log.ops)


def _last_step_agrees(run: _Run, pattern: _Pattern, more: int) -> bool:
    """Trace two steps after a prefill 3 tokens shorter than the last step's cache: the second
    reads the cache length the last written step reads; its sizes must be the pattern's."""
    steps = len(run.bounds) - 1
    last_len = run.prompt + steps + more - 1  # cache length the last step reads
    check = _Run(run.decoder, replace(run.cfg, new_tokens=3), run.target, run.batch,
                 last_len - 1)
    check.trace(2, all_steps=True)
    if _step_refs(check, 2, check.tracker.log) != pattern.refs:
        return False
    want = [s + g * more for s, g in zip(pattern.sizes, pattern.growth, strict=True)]
    return _new_sizes(check, 2) == want


# -- the numbers

def _result(case: Any, decoder: Decoder, cfg: GenerateConfig, target: Target, run: _Run,
            log: Log, batch: int, prompt: int, traced: int, written: int,
            per_token: KvPerToken | None) -> GenerateMemory:
    memory = replay(log, len(log.events), mode="generate", device=target.device,
                    root="", top=0)
    phases = [GeneratePhase(p.phase, p.peak, _module_name(p.module, decoder),
                            {k: v for k, v in p.breakdown.items() if v})
              for p in memory.phases if p.phase in ("prefill", "decode")]
    peak_of = {p.phase: p.peak for p in phases}
    workspace = max((p.breakdown.get("workspace", 0) for p in phases), default=0)
    # at its largest: at the end, or after the prefill, where the cache can be a view that
    # keeps a larger storage (a sliding window's of the whole prompt, keys of a fused
    # q/k/v projection) until the first step replaces it
    kv_end = _live_cache_bytes(log)
    kv_largest = max(kv_end, run.cache_sizes[0] if run.cache_sizes else 0)
    notes = _notes(decoder, cfg, target, traced, written)
    return GenerateMemory(
        case.name, case.describe_inputs(), batch, prompt, cfg.new_tokens, target.device,
        target.gpu, cfg.dtype, str(cfg.cache), str(decoder.kind), run.sizes["params"],
        run.sizes["weights"], run.sizes["buffers"], run.sizes["input"], workspace,
        kv_largest, per_token.decoded if per_token is not None else 0,
        peak_of.get("prefill", 0),
        peak_of.get("decode", 0), phases, traced, written, kv_end, notes=notes)


def _module_name(module: str, decoder: Decoder) -> str:
    """ForwardModules names the model by its class: keep what is inside it."""
    root = type(decoder.model).__name__
    return module[len(root) + 1:] if module.startswith(root + ".") else module


def _live_cache_bytes(log: Log) -> int:
    """Bytes of the cache's tensors alive at the end of the log (the last step's cache)."""
    live: dict[int, int] = {}
    for ev in log.events:
        a = log.allocs.get(ev.serial)
        if a is None or a.kind != "cache":
            continue
        if ev.alloc:
            live[ev.serial] = a.nbytes
        else:
            live.pop(ev.serial, None)
    return sum(live.values())


def _notes(decoder: Decoder, cfg: GenerateConfig, target: Target, traced: int,
           written: int) -> list[str]:
    notes = list(decoder.notes)
    if decoder.hf and not cfg.padding_mask:
        notes.append("traced without the attention mask: the model reads a value of it on the "
                     "host that a trace without data does not know")
    if target.emulated:
        notes.append("no GPU here: meta tensors with the CUDA caching allocator's block rules")
    if decoder.hf:
        notes.append("greedy generate with a fixed count of new tokens (min_new_tokens = "
                     "max_new_tokens), prompts without padding")
    if written:
        notes.append(f"{traced} decode steps traced, {written} written out from their pattern "
                     "(checked at the last step's cache length)")
    if decoder.kind is DecoderKind.seq2seq:
        notes.append("encoder-decoder: the encoder's output and the cross-attention cache hold "
                     "the prompt; the self-attention cache grows with the new tokens")
    return notes


# -- --fit: the largest batch, or the longest prompt, that fits

@dataclass
class GenerateFit:
    """``--fit GPU --generate N``: the largest batch at the prompt (or with ``--fit-context``
    the longest prompt at the batch) whose predicted peak fits ``budget``."""

    budget: int
    reserve: float  # fraction planned over the predicted peak (the allocator's cached blocks)
    what: str  # batch | context
    found: int | None  # None: not even 1 fits
    probes: list[tuple[int, int]]  # (value, peak)
    fixed: int  # the prompt (what=batch) or the batch (what=context)
    capped: bool = False

    def smallest(self) -> int | None:
        """The smallest peak probed (what the least of it needs) when nothing fits."""
        return min((p for _, p in self.probes), default=None)

    def to_dict(self) -> dict[str, Any]:
        return {"budget": self.budget, "reserve": self.reserve, "search": self.what,
                "found": self.found, "fixed": self.fixed, "capped": self.capped,
                "probes": [{"value": v, "peak": p} for v, p in self.probes]}


FIT_LIMIT = 1 << 20


def fit_generate(case: Any, cfg: GenerateConfig, target: Target, budget: int, *,
                 reserve: float = 0.0, context: bool = False, progress: Any = None) -> GenerateFit:
    """The largest batch at the input's prompt (or, ``context``, the longest prompt at its
    batch, up to the model's position limit) whose predicted peak times 1 + ``reserve``
    fits ``budget``: a search that guesses from the peaks it has (a peak grows about
    linearly with the batch), then checks the guess and the value above it."""
    shared = Shared(find_decoder(case, cache_arg=cfg.cache_arg, recompute=cfg.recompute),
                    batches_only=not context)
    batch, prompt, _ = token_input(case.require_example(), case.name)
    limit = FIT_LIMIT
    if context and shared.decoder is not None and shared.decoder.position_limit is not None:
        limit = shared.decoder.position_limit - cfg.new_tokens
        if limit < 1:
            check_context(shared.decoder, 1, cfg.new_tokens)
    probes: list[tuple[int, int]] = []

    def peak_at(value: int) -> int:
        if progress is not None:
            progress(f"--fit: {'prompt' if context else 'batch'} {value:,}")
        r = predict_case(case, cfg, target, batch=None if context else value,
                         prompt=value if context else None, shared=shared)
        probes.append((value, r.peak))
        return r.peak

    found, capped = search(peak_at, budget / (1 + reserve), limit)
    return GenerateFit(budget, reserve, "context" if context else "batch", found, probes,
                       batch if context else prompt, capped)


def search(peak_at: Any, allowed: float, limit: int) -> tuple[int | None, bool]:
    """The largest value in [1, ``limit``] whose ``peak_at(value)`` is at most ``allowed``
    (peaks grow with the value). After 1 and 2, each next value is read off the line through
    the two known peaks nearest the boundary (a peak grows about linearly with the batch);
    a value that fits where the line crosses is checked with the one above; where a line step
    did not halve the interval, the next one halves it. -> (value, stopped at ``limit``);
    None: 1 does not fit."""
    known: dict[int, float] = {}

    def fits(v: int) -> bool:
        if v not in known:
            known[v] = peak_at(v)
        return known[v] <= allowed

    if not fits(1):
        return None, False
    if limit == 1 or not fits(2):
        return 1, limit == 1
    lo, hi = 2, limit + 1  # lo fits; hi: the smallest known miss (limit + 1: none yet)
    halve = False
    while hi - lo > 1:
        other = hi if hi <= limit else max(v for v in known if v < lo)
        slope = (known[other] - known[lo]) / (other - lo)
        line = lo + int((allowed - known[lo]) / slope) if slope > 0 else 2 * lo
        if halve:  # in log space over a wide interval (a peak that grows faster than linearly)
            guess = int(math.sqrt(lo * hi)) if hi > 4 * lo else (lo + hi) // 2
            guess = min(max(guess, lo + 1), hi - 1)
        else:
            guess = min(max(line, lo + 1), hi - 1)
        width = hi - lo
        if fits(guess):
            lo = guess
            if guess + 1 < hi and guess == line and slope > 0 and not fits(guess + 1):
                hi = guess + 1
        else:
            hi = guess
        halve = hi <= limit and hi - lo > width // 2 and not halve
    return lo, lo == limit
