"""The serving part of a report page, for a decoder: the predicted peak of ``generate`` at
growing context lengths (weights, KV cache and the rest stacked, against the card's usable
memory) and the predicted time per new token at growing batches (eager and under a CUDA
graph), both from the predictors ``inspect memory --generate`` and ``inspect bench
--generate`` use (memory/generate.py, latency/generate.py), on the GPU the page predicts for.

A model that is not a decoder (no token input, no logits) has no serving part: ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NEW_TOKENS = 128
DTYPE = "bf16"
CONTEXTS = (512, 2048, 8192, 32768)  # prompts, capped at the model's position limit
BATCHES = (1, 8, 64)


@dataclass
class ServingPart:
    """Predictions of generate of `NEW_TOKENS` tokens in `DTYPE` for one decoder on ``gpu``:
    ``contexts`` (GenerateMemory, at the input's ``batch`` and growing prompts) and
    ``decode`` (GenerateLatency, at the input's ``prompt`` and growing batches)."""

    gpu: str
    gpu_label: str
    usable: int  # the card's memory less the CUDA context: the line on the memory chart
    batch: int
    prompt: int
    contexts: list[Any] = field(default_factory=list)
    decode: list[Any] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "dtype": DTYPE, "new_tokens": NEW_TOKENS,
                "usable_bytes": self.usable, "batch": self.batch, "prompt": self.prompt,
                "by_context": [{"prompt": m.prompt, "peak": m.peak,
                                "weights_bytes": m.weights_bytes + m.buffer_bytes,
                                "kv_cache_bytes": m.kv_cache_bytes,
                                "other_bytes": other_bytes(m)} for m in self.contexts],
                "by_batch": [{"batch": p.batch, "decode_ms_per_token": p.decode_ms_per_token,
                              "decode_graph_ms_per_token": p.decode_graph_ms_per_token,
                              "tokens_per_s": p.tokens_per_s} for p in self.decode],
                "notes": list(self.notes)}


def other_bytes(m: Any) -> int:
    """What the peak holds beyond the weights and the KV cache: the prompt, activations,
    logits, workspaces and a growing cache's moment of two copies."""
    return max(m.peak - m.weights_bytes - m.buffer_bytes - m.kv_cache_bytes, 0)


def contexts_for(limit: int | None, new_tokens: int) -> list[int]:
    """`CONTEXTS` below the position limit, and the longest prompt the model takes where
    that is shorter than the last of them."""
    cap = limit - new_tokens if limit is not None else None
    chosen = [c for c in CONTEXTS if cap is None or c <= cap]
    if cap is not None and cap > 0 and cap not in chosen and cap < CONTEXTS[-1]:
        chosen.append(cap)
    return chosen


def serving_part(case: Any, gpu: str | None = None) -> ServingPart | None:
    """The two sweeps for ``case`` on ``gpu`` (None: the GPU here, else the default), or
    None when the model is not a decoder."""
    from torchinspect.errors import InspectError
    from torchinspect.gpus import target_gpu
    from torchinspect.latency import host_model, latency_gpu
    from torchinspect.latency.generate import LatencyConfig
    from torchinspect.latency.generate import predict_case as predict_latency
    from torchinspect.memory.faking import make_target
    from torchinspect.memory.generate import GenerateConfig, Shared
    from torchinspect.memory.generate import predict_case as predict_memory
    from torchinspect.overview.parts import PartUnavailable
    from torchinspect.trace.generation import NotADecoder, find_decoder, token_input

    try:
        decoder = find_decoder(case)
        batch, prompt, _ = token_input(case.require_example(), case.name)
    except NotADecoder:
        return None
    except InspectError as exc:  # a decoder without a cache: said, not a failure
        raise PartUnavailable(exc.message) from None
    spec = target_gpu(gpu)
    part = ServingPart(spec.name, spec.label, spec.usable_bytes(), batch, prompt)
    shared = Shared(decoder)
    target = make_target("cuda", spec.name, fast=True)
    cfg = GenerateConfig(NEW_TOKENS, DTYPE)
    for context in contexts_for(decoder.position_limit, NEW_TOKENS):
        part.contexts.append(predict_memory(case, cfg, target, prompt=context, shared=shared))
    lat, host = latency_gpu(spec.name), host_model()
    for b in BATCHES:
        part.decode.append(predict_latency(case, LatencyConfig(NEW_TOKENS, DTYPE), lat, host,
                                           batch=b, decoder=decoder))
    part.notes.append("eager decode: generate's host work priced at this CPU's dispatch cost "
                      "(probed here, so a busy machine reads slower); the CUDA-graph step is "
                      "GPU time alone")
    if part.decode and part.decode[0].graph is None:
        part.notes.append(f"CUDA graph: {part.decode[0].graph_reason}")
    return part
