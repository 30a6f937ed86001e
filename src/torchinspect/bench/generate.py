"""Text generation measured on a GPU: time to first token, the time per new token of eager
``model.generate``, a static-cache decode step replayed as a CUDA graph, and the peak memory
of the whole call: what ``latency/generate.py`` and ``memory/generate.py`` predict, measured
the way ``benchmarks/generate_measure.py`` measured its data (it calls these functions).

For a transformers model with weights resident, batch x prompt random token ids and an
all-ones attention mask, under ``torch.inference_mode`` after a warm-up ``generate``:

* ``prefill_ms``: one forward over the prompt with ``use_cache=True`` (an encoder-decoder:
  the encoder and one decoder position), CUDA events, median of ``repeats``; ``logits``
  "generate" asks for the last position's logits only where the forward takes
  ``logits_to_keep`` (as generate does), "all" computes every position's (a plain forward);
  ``prefill_peak`` its ``max_memory_allocated`` above what was allocated before;
* ``generate_1_ms``, ``generate_N_ms``: wall time of greedy ``generate`` of 1 and N new
  tokens (``min_new_tokens`` = ``max_new_tokens``), synchronized, median of ``repeats``;
  ``decode_ms_per_token`` = (N - 1 new tokens' time) / (N - 1); ``peak`` the
  ``max_memory_allocated`` of the first N-token call, ``allocated_before`` what was allocated
  just before it, ``peak_above_before`` the difference;
* ``graph_decode_ms_per_token``: one decode step with a ``StaticCache`` (``max_cache_len`` =
  prompt + N + 1) captured in a CUDA graph on a side stream (no ``torch.compile``) and
  replayed at cache position = prompt; ``static_eager_ms_per_token`` the same step without
  the graph; where the step reads a device value on the host or copies from the host, it is
  not captured and ``graph_error`` says why.
"""

from __future__ import annotations

import statistics as st
import time
from collections.abc import Callable
from typing import Any

from torchinspect.errors import InspectError

SYNCING = frozenset({"aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero",
                     "aten::item", "aten::equal", "aten::unique", "aten::_unique2"})
GRAPH_METHOD = ("StaticCache, one decode step captured with torch.cuda.graph (no torch.compile), "
                "replayed at position = prompt")


class Clock:
    """Synchronized wall time (CUDA) or plain wall time (CPU), and CUDA events."""

    def __init__(self, device: str) -> None:
        import torch

        self.cuda = device.startswith("cuda")
        self.torch = torch

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def wall_ms(self, fn: Callable[[], Any]) -> float:
        self.sync()
        t0 = time.perf_counter()
        fn()
        self.sync()
        return (time.perf_counter() - t0) * 1e3

    def event_ms(self, fn: Callable[[], Any]) -> float:
        if not self.cuda:
            return self.wall_ms(fn)
        torch = self.torch
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        a.record()
        fn()
        b.record()
        b.synchronize()
        return float(a.elapsed_time(b))


def random_inputs(model: Any, batch: int, prompt: int, device: str) -> dict[str, Any]:
    """Token ids below the vocabulary (seeded by batch and prompt) and an all-ones mask."""
    import torch

    g = torch.Generator().manual_seed(batch * 100_000 + prompt)
    vocab = model.config.get_text_config(decoder=True).vocab_size
    ids = torch.randint(0, vocab, (batch, prompt), generator=g).to(device)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def start_token(model: Any) -> int:
    """An encoder-decoder's first decoder token: the config's or generation config's
    ``decoder_start_token_id``, else its pad token (T5's convention), else 0."""
    for source in (model.config, getattr(model, "generation_config", None)):
        value = getattr(source, "decoder_start_token_id", None)
        if isinstance(value, int):
            return value
    pad = getattr(model.config, "pad_token_id", None)
    return pad if isinstance(pad, int) else 0


def prefill_kwargs(model: Any, inputs: dict[str, Any], logits: str = "all") -> dict[str, Any]:
    import inspect

    import torch

    kw = dict(inputs)
    if model.config.is_encoder_decoder:
        kw["decoder_input_ids"] = torch.full((inputs["input_ids"].shape[0], 1), start_token(model),
                                             dtype=torch.long, device=inputs["input_ids"].device)
    if logits == "generate" and "logits_to_keep" in inspect.signature(model.forward).parameters:
        kw["logits_to_keep"] = 1
    return kw


def generate_kwargs(model: Any, new: int) -> dict[str, Any]:
    pad = model.config.pad_token_id
    if pad is None:
        pad = model.config.eos_token_id if isinstance(model.config.eos_token_id, int) else 0
    kw = {"do_sample": False, "max_new_tokens": new, "min_new_tokens": new, "pad_token_id": pad}
    if model.config.is_encoder_decoder:
        kw["decoder_start_token_id"] = start_token(model)
    return kw


def measure_generate(model: Any, batch: int, prompt: int, new: int, *, repeats: int = 3,
                     device: str = "cuda", logits: str = "all",
                     side_stream: Any = None) -> dict[str, Any]:
    """Every figure of the module's docstring for one (batch, prompt), as a flat dict."""
    import torch

    if new < 2:
        raise InspectError(f"--generate {new}: measuring the time per new token needs 2 or more",
                           hint="e.g. --generate 32")
    clock = Clock(device)
    cuda = clock.cuda
    inputs = random_inputs(model, batch, prompt, device)
    row: dict[str, Any] = {}
    with torch.inference_mode():
        # warm-up: kernels and allocator blocks at every cache length the timed calls reach
        # (a 4-token warm-up left the first timed N-token call several times slower)
        model.generate(**inputs, **generate_kwargs(model, new))
        pre_kw = prefill_kwargs(model, inputs, logits)
        if cuda:
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        prefill = []
        for i in range(repeats):
            prefill.append(clock.event_ms(lambda: model(**pre_kw, use_cache=True)))
            if i == 0 and cuda:
                row["prefill_peak"] = torch.cuda.max_memory_allocated() - base
        row["prefill_ms"] = st.median(prefill)
        row["prefill_runs_ms"] = prefill
        one = [clock.wall_ms(lambda: model.generate(**inputs, **generate_kwargs(model, 1)))
               for _ in range(repeats)]
        full = []
        for i in range(repeats):
            if i == 0 and cuda:
                torch.cuda.synchronize()
                row["allocated_before"] = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
            out: list[Any] = []
            full.append(clock.wall_ms(lambda out=out: out.append(  # type: ignore[misc]
                model.generate(**inputs, **generate_kwargs(model, new)))))
            if i == 0:
                # an encoder-decoder's output starts with the decoder start token
                row["new_tokens"] = int(out[0].shape[1] - (1 if model.config.is_encoder_decoder
                                                           else prompt))
                if cuda:
                    row["peak"] = torch.cuda.max_memory_allocated()
                    row["peak_above_before"] = row["peak"] - row["allocated_before"]
                    del out[:]
                    torch.cuda.synchronize()
                    row["allocated_after"] = torch.cuda.memory_allocated()
    row.update({"generate_1_ms": st.median(one), "generate_1_runs_ms": one,
                f"generate_{new}_ms": st.median(full), f"generate_{new}_runs_ms": full,
                "decode_ms_per_token": (st.median(full) - st.median(one)) / (new - 1)})
    row.update(static_decode(model, inputs, prompt, new, device, side_stream))
    return row


def _static_step(model: Any, inputs: dict[str, Any], prompt: int, new: int) -> Any:
    """A decode step over a StaticCache filled by a prefill: ``step()`` -> logits. Each call
    first sets the cache's length back to the prompt's (``cumulative_length``, a device
    tensor, and the host integer sliding-window layers keep), so every step, eager or
    replayed, writes and attends at position ``prompt``."""
    import torch
    from transformers import EncoderDecoderCache, StaticCache

    ids = inputs["input_ids"]
    batch, device = ids.shape[0], ids.device
    cfg = model.config
    length = prompt + new + 1
    tok: Any = None
    if cfg.is_encoder_decoder:
        cache: Any = EncoderDecoderCache(StaticCache(config=cfg, max_cache_len=length),
                                         StaticCache(config=cfg, max_cache_len=prompt))
        layers = cache.self_attention_cache.layers
        enc = model.get_encoder()(input_ids=ids, attention_mask=inputs["attention_mask"])
        start = torch.full((batch, 1), start_token(model), dtype=torch.long, device=device)
        out = model(encoder_outputs=enc, attention_mask=inputs["attention_mask"],
                    decoder_input_ids=start, past_key_values=cache, use_cache=True)
        at = 1
        mask = inputs["attention_mask"]

        def forward() -> Any:
            return model(encoder_outputs=enc, attention_mask=mask, decoder_input_ids=tok,
                         past_key_values=cache, use_cache=True).logits
    else:
        cache = StaticCache(config=cfg, max_cache_len=length)
        layers = cache.layers
        out = model(input_ids=ids, past_key_values=cache, use_cache=True)
        at = prompt

        def forward() -> Any:
            return model(input_ids=tok, past_key_values=cache, use_cache=True).logits
    tok = out.logits[:, -1:].argmax(-1)

    def step() -> Any:
        for layer in layers:
            if isinstance(getattr(layer, "cumulative_length", None), torch.Tensor):
                layer.cumulative_length.fill_(at)
            if hasattr(layer, "cumulative_length_int"):
                layer.cumulative_length_int = at
        return forward()
    return step


def host_syncs(fn: Callable[[], Any]) -> list[str]:
    """The ops of one call of ``fn`` that read a device value on the host (they would fail
    inside CUDA-graph capture)."""
    import torch

    from torchinspect.privtorch import QuietDispatchMode

    found: list[str] = []

    class Watch(QuietDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            if func._schema.name in SYNCING:
                found.append(func._schema.name)
            return func(*args, **(kwargs or {}))

    with torch.inference_mode(), Watch():
        fn()
    return sorted(set(found))


def static_decode(model: Any, inputs: dict[str, Any], prompt: int, new: int, device: str,
                  side_stream: Any = None) -> dict[str, Any]:
    """Decode per token with a StaticCache: eager, and replayed as a CUDA graph (captured on
    ``side_stream``, made once per process by the caller: each new stream gets its own cuBLAS
    workspace, kept for the life of the process)."""
    import torch

    row: dict[str, Any] = {"graph_method": GRAPH_METHOD}
    clock = Clock(device)
    try:
        with torch.inference_mode():
            step = _static_step(model, inputs, prompt, new)
            for _ in range(3):
                step()
            eager = [clock.event_ms(step) for _ in range(10)]
            row["static_eager_ms_per_token"] = st.median(eager)
            row["host_syncs_in_step"] = host_syncs(step)
            if not clock.cuda:
                return row
            if row["host_syncs_in_step"]:  # capture would fail (and may harm what follows)
                row["graph_error"] = ("not captured: the step reads device values on the host "
                                      f"({', '.join(row['host_syncs_in_step'])})")
                return row
            side = side_stream if side_stream is not None else torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    step()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=side):
                step()
            for _ in range(3):
                graph.replay()
            torch.cuda.synchronize()
            reps = 20

            def replays(g: Any = graph) -> None:
                for _ in range(reps):
                    g.replay()
            times = [clock.event_ms(replays) / reps for _ in range(5)]
            row["graph_decode_ms_per_token"] = st.median(times)
            row["graph_decode_runs_ms"] = times
            del graph, replays
    except Exception as exc:  # noqa: BLE001 - the eager numbers stand; say why
        row["graph_error"] = f"{type(exc).__name__}: {exc}"[:400]
        if clock.cuda:
            torch.cuda.synchronize()
    return row


def release(device: str) -> None:
    """Between cases: what a case left in the caching allocator and every cuBLAS workspace
    (one per stream, kept for the process) go back, so the next case starts as a fresh
    process would (its warm-up makes the workspace again before anything is read)."""
    import gc

    import torch

    from torchinspect.privtorch import clear_cublas_workspaces

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        clear_cublas_workspaces()
        torch.cuda.empty_cache()


def measure_peak(model: Any, batch: int, prompt: int, new: int, device: str = "cuda") -> int:
    """``max_memory_allocated`` of one greedy generate of ``new`` tokens with the weights and the
    prompt resident, from a released allocator (``inspect memory --generate N --verify``)."""
    import torch

    inputs = random_inputs(model, batch, prompt, device)
    release(device)
    torch.cuda.reset_peak_memory_stats()
    with torch.inference_mode():
        out = model.generate(**inputs, **generate_kwargs(model, new))
    torch.cuda.synchronize()
    peak = int(torch.cuda.max_memory_allocated())
    del out
    release(device)
    return peak
