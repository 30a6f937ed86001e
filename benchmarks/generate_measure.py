"""Text generation on one GPU (issue 43): memory and time of ``model.generate`` for small
decoders, the data its predictor is developed (``dev``) and validated (``val``) on.

Every model is an ``hf:ClassName`` spec with ``--arg`` overrides (random weights from the
config, no download), built through torchinspect's own source (``make_case``), so a predictor
builds exactly the same model from the same spec. bf16 weights, eval, the attention
implementation transformers picks (``sdpa``). For each model, batch (1, 8) and prompt length
(512, 2048), with weights already resident:

* ``peak``: ``max_memory_allocated`` over the whole ``generate(ids, attention_mask,
  do_sample=False, max_new_tokens=129, min_new_tokens=129)`` with the default cache, peak
  stats reset just before; ``allocated_before`` (weights and nothing else) and
  ``allocated_after`` beside it;
* ``prefill_ms``: one forward over the prompt with ``use_cache=True`` (encoder-decoders: the
  encoder over the prompt and one decoder position), CUDA events, median of ``--repeats``;
  ``prefill_peak`` its ``max_memory_allocated`` (all positions' logits: a plain forward);
* ``generate_1_ms``, ``generate_129_ms``: wall time of ``generate`` for 1 and 129 new
  tokens (synchronized), each run's value and the median; ``decode_ms_per_token`` =
  (median 129 - median 1) / 128;
* ``graph_decode_ms_per_token``: the serving-engine floor: one decode step with a
  ``StaticCache`` (``max_cache_len`` = prompt + 130) captured in a CUDA graph *by this script*
  (no ``torch.compile``: it would not fit the lease), replayed at cache position = prompt
  length (a static cache's attention reads the whole cache, masked, at every position);
  ``static_eager_ms_per_token`` the same step without the graph. Where the step cannot be
  captured (a host sync in the model's code, e.g. mixture-of-experts routing), the error is
  kept and the eager static step stands alone.

One JSON line per (model, batch, prompt), appended as it goes, each with the run header
(machine, versions incl. transformers); a rerun skips what its output holds. ``--dry-run``
runs on the CPU with tiny prompts and few tokens (and reports whether a decode step would
synchronise the host, i.e. could not be captured, through a dispatch mode).

    python benchmarks/generate_measure.py OUT.jsonl [--sets val,dev] [--models NAME,...]
        [--budget S] [--repeats 3] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import statistics as st
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

# (set, name, spec, --arg list). Chosen and committed before any measurement; the validation
# set is never tuned on. All under 1 B parameters.
DECODERS: list[tuple[str, str, str, list[str]]] = [
    # development: one of each kind the validation set has, other shapes
    ("dev", "llama-mha-12l", "hf:LlamaForCausalLM",
     ["hidden_size=768", "intermediate_size=2048", "num_hidden_layers=12",
      "num_attention_heads=12", "num_key_value_heads=12", "vocab_size=32000",
      "max_position_embeddings=4096"]),
    ("dev", "qwen2-gqa-sliding-8l", "hf:Qwen2ForCausalLM",
     ["hidden_size=512", "intermediate_size=1408", "num_hidden_layers=8",
      "num_attention_heads=8", "num_key_value_heads=2", "vocab_size=16000",
      "use_sliding_window=True", "sliding_window=512", "max_window_layers=4",
      "max_position_embeddings=4096"]),
    ("dev", "gpt2-small-4k", "hf:GPT2LMHeadModel",
     ["n_embd=768", "n_layer=12", "n_head=12", "n_positions=4096"]),
    ("dev", "qwen2moe-8e-4l", "hf:Qwen2MoeForCausalLM",
     ["hidden_size=512", "intermediate_size=1408", "moe_intermediate_size=704",
      "shared_expert_intermediate_size=1408", "num_experts=8", "num_experts_per_tok=2",
      "num_hidden_layers=4", "num_attention_heads=8", "num_key_value_heads=4",
      "vocab_size=16000", "max_position_embeddings=4096"]),
    ("dev", "t5-small-shape", "hf:T5ForConditionalGeneration",
     ["d_model=512", "d_ff=2048", "d_kv=64", "num_layers=6", "num_decoder_layers=6",
      "num_heads=8", "vocab_size=32128"]),
    # validation: 10 decoders of 9 families; GQA, sliding window, MoE, encoder-decoder, MQA
    ("val", "llama-gqa-16l", "hf:LlamaForCausalLM",
     ["hidden_size=1024", "intermediate_size=2816", "num_hidden_layers=16",
      "num_attention_heads=16", "num_key_value_heads=4", "vocab_size=32000",
      "max_position_embeddings=4096"]),
    ("val", "qwen2-0.5b-shape", "hf:Qwen2ForCausalLM",
     ["hidden_size=896", "intermediate_size=4864", "num_hidden_layers=24",
      "num_attention_heads=14", "num_key_value_heads=2", "vocab_size=151936",
      "tie_word_embeddings=True", "max_position_embeddings=32768"]),
    ("val", "mistral-sliding-12l", "hf:MistralForCausalLM",
     ["hidden_size=1024", "intermediate_size=3584", "num_hidden_layers=12",
      "num_attention_heads=16", "num_key_value_heads=8", "vocab_size=32000",
      "sliding_window=1024", "max_position_embeddings=8192"]),
    ("val", "mixtral-8e-8l", "hf:MixtralForCausalLM",
     ["hidden_size=768", "intermediate_size=1536", "num_hidden_layers=8",
      "num_attention_heads=12", "num_key_value_heads=4", "num_local_experts=8",
      "num_experts_per_tok=2", "vocab_size=32000", "sliding_window=None",
      "max_position_embeddings=8192"]),
    ("val", "t5-base-gated", "hf:T5ForConditionalGeneration",
     ["d_model=768", "d_ff=2048", "d_kv=64", "num_layers=12", "num_decoder_layers=12",
      "num_heads=12", "feed_forward_proj='gated-gelu'", "vocab_size=32128",
      "tie_word_embeddings=False"]),
    ("val", "gpt2-medium-4k", "hf:GPT2LMHeadModel",
     ["n_embd=1024", "n_layer=24", "n_head=16", "n_positions=4096"]),
    ("val", "phi-12l", "hf:PhiForCausalLM",
     ["hidden_size=1024", "intermediate_size=4096", "num_hidden_layers=12",
      "num_attention_heads=16", "partial_rotary_factor=0.5", "vocab_size=51200",
      "max_position_embeddings=4096"]),
    ("val", "gemma-mqa-12l", "hf:GemmaForCausalLM",
     ["hidden_size=1024", "intermediate_size=4096", "num_hidden_layers=12",
      "num_attention_heads=8", "num_key_value_heads=1", "head_dim=256", "vocab_size=256000",
      "max_position_embeddings=8192"]),
    ("val", "gptneox-410m-shape", "hf:GPTNeoXForCausalLM",
     ["hidden_size=1024", "intermediate_size=4096", "num_hidden_layers=24",
      "num_attention_heads=16", "vocab_size=50304",
      "max_position_embeddings=4096"]),
    ("val", "qwen2moe-16e-6l", "hf:Qwen2MoeForCausalLM",
     ["hidden_size=768", "intermediate_size=2048", "moe_intermediate_size=512",
      "shared_expert_intermediate_size=2048", "num_experts=16", "num_experts_per_tok=4",
      "num_hidden_layers=6", "num_attention_heads=12", "num_key_value_heads=4",
      "vocab_size=32000", "max_position_embeddings=4096"]),
]
BATCHES = (1, 8)
PROMPTS = (512, 2048)
NEW_TOKENS = 129
DRY = {"batches": (1, 2), "prompts": (16, 32), "new": 5}
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "num_decoder_layers")


def dry_args(args: list[str]) -> list[str]:
    """``--dry-run``: the same config with 2 layers (the code paths, on a CPU's time)."""
    return [f"{a.split('=')[0]}=2" if a.split("=")[0] in LAYER_KEYS else a for a in args]


def _write(path: Path, row: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def _done(path: Path) -> set[tuple[str, int, int]]:
    """(model, batch, prompt) already measured (without an error) in ``path``."""
    if not path.exists():
        return set()
    out = set()
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            if "model" in r and "error" not in r:
                out.add((r["model"], r["batch"], r["prompt"]))
    return out


def build(spec: str, args: list[str], device: str) -> Any:
    """The model as ``inspect ... hf:CLASS --arg ...`` builds it, bf16, eval, on ``device``."""
    import torch

    from torchinspect.sources.case import ModelOptions, make_case

    case = make_case(spec, options=ModelOptions(args=args, device="meta"), device="meta")
    model = case.real_model(device).to(torch.bfloat16).eval()
    return model


class Clock:
    """Synchronized wall time (CUDA) or plain wall time (CPU)."""

    def __init__(self, device: str) -> None:
        import torch

        self.cuda = device.startswith("cuda")
        self.torch = torch

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def wall_ms(self, fn: Any) -> float:
        self.sync()
        t0 = time.perf_counter()
        fn()
        self.sync()
        return (time.perf_counter() - t0) * 1e3

    def event_ms(self, fn: Any) -> float:
        if not self.cuda:
            return self.wall_ms(fn)
        torch = self.torch
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        a.record()
        fn()
        b.record()
        b.synchronize()
        return a.elapsed_time(b)


def _inputs(model: Any, batch: int, prompt: int, device: str) -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(batch * 100_000 + prompt)
    vocab = model.config.get_text_config(decoder=True).vocab_size
    ids = torch.randint(0, vocab, (batch, prompt), generator=g).to(device)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def _start_token(model: Any) -> int:
    """An encoder-decoder's first decoder token: the config's or generation config's
    ``decoder_start_token_id``, else its pad token (T5's convention), else 0."""
    for source in (model.config, getattr(model, "generation_config", None)):
        value = getattr(source, "decoder_start_token_id", None)
        if isinstance(value, int):
            return value
    pad = getattr(model.config, "pad_token_id", None)
    return pad if isinstance(pad, int) else 0


def _prefill_kwargs(model: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    import torch

    kw = dict(inputs)
    if model.config.is_encoder_decoder:
        start = _start_token(model)
        kw["decoder_input_ids"] = torch.full((inputs["input_ids"].shape[0], 1), start,
                                             dtype=torch.long, device=inputs["input_ids"].device)
    return kw


def _gen_kwargs(model: Any, new: int) -> dict[str, Any]:
    pad = model.config.pad_token_id
    if pad is None:
        pad = model.config.eos_token_id if isinstance(model.config.eos_token_id, int) else 0
    kw = {"do_sample": False, "max_new_tokens": new, "min_new_tokens": new, "pad_token_id": pad}
    if model.config.is_encoder_decoder:
        kw["decoder_start_token_id"] = _start_token(model)
    return kw


def measure_case(model: Any, batch: int, prompt: int, new: int, repeats: int,
                 device: str) -> dict[str, Any]:
    import torch

    clock = Clock(device)
    cuda = clock.cuda
    inputs = _inputs(model, batch, prompt, device)
    row: dict[str, Any] = {}
    with torch.inference_mode():
        model.generate(**inputs, **_gen_kwargs(model, 4))  # warm-up: kernels, allocator
        pre_kw = _prefill_kwargs(model, inputs)
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
        one = [clock.wall_ms(lambda: model.generate(**inputs, **_gen_kwargs(model, 1)))
               for _ in range(repeats)]
        full = []
        for i in range(repeats):
            if i == 0 and cuda:
                torch.cuda.synchronize()
                row["allocated_before"] = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
            out: list[Any] = []
            full.append(clock.wall_ms(lambda out=out: out.append(  # type: ignore[misc]
                model.generate(**inputs, **_gen_kwargs(model, new)))))
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
    row.update(static_decode(model, inputs, prompt, new, device))
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
    if cfg.is_encoder_decoder:
        cache: Any = EncoderDecoderCache(StaticCache(config=cfg, max_cache_len=length),
                                         StaticCache(config=cfg, max_cache_len=prompt))
        layers = cache.self_attention_cache.layers
        enc = model.get_encoder()(input_ids=ids, attention_mask=inputs["attention_mask"])
        start = torch.full((batch, 1), _start_token(model), dtype=torch.long, device=device)
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


def host_syncs(fn: Any) -> list[str]:
    """The ops of one call of ``fn`` that read a device value on the host (they would fail
    inside CUDA-graph capture)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    found: list[str] = []
    syncing = {"aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero",
               "aten::item", "aten::equal", "aten::unique", "aten::_unique2"}

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if func._schema.name in syncing:
                found.append(func._schema.name)
            return func(*args, **(kwargs or {}))

    with torch.inference_mode(), Watch():
        fn()
    return sorted(set(found))


def static_decode(model: Any, inputs: dict[str, Any], prompt: int, new: int,
                  device: str) -> dict[str, Any]:
    """Decode per token with a StaticCache: eager, and replayed as a CUDA graph."""
    import torch

    row: dict[str, Any] = {"graph_method": "StaticCache, one decode step captured with "
                           "torch.cuda.graph (no torch.compile), replayed at position = prompt"}
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
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    step()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
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


def describe(model: Any, spec: str, args: list[str]) -> dict[str, Any]:
    cfg = model.config
    text = cfg.get_text_config(decoder=True)
    return {"spec": spec, "args": args, "params": sum(p.numel() for p in model.parameters()),
            "model_type": cfg.model_type, "attn_implementation": cfg._attn_implementation,
            "is_encoder_decoder": bool(cfg.is_encoder_decoder),
            "layer_types": sorted(set(getattr(text, "layer_types", None) or [])),
            "sliding_window": getattr(text, "sliding_window", None),
            "num_key_value_heads": getattr(text, "num_key_value_heads", None)}


def main() -> None:
    from machine import run_header

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--sets", default="val,dev")
    ap.add_argument("--models", default="", help="comma-separated names: only these")
    ap.add_argument("--budget", type=float, default=1e9, help="seconds; stops between cases")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny prompts, few tokens")
    a = ap.parse_args()
    import torch

    deadline = time.monotonic() + a.budget
    device = "cpu" if a.dry_run else "cuda"
    batches, prompts, new = ((DRY["batches"], DRY["prompts"], DRY["new"]) if a.dry_run
                             else (BATCHES, PROMPTS, NEW_TOKENS))
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = _done(out)
    header = run_header("transformers")
    header["device"] = torch.cuda.get_device_name() if device == "cuda" else "cpu (dry run)"
    sets = a.sets.split(",")
    only = [m for m in a.models.split(",") if m]
    chosen = [d for s in sets for d in DECODERS if d[0] == s and (not only or d[1] in only)]
    for set_name, name, spec, args in chosen:
        todo = [(b, p) for b in batches for p in prompts if (name, b, p) not in done]
        if not todo:
            continue
        if time.monotonic() > deadline:
            print(f"deadline: stopped before {name}", flush=True)
            return
        t0 = time.monotonic()
        try:
            model = build(spec, dry_args(args) if a.dry_run else args, device)
        except Exception as exc:  # noqa: BLE001 - one model must not end the run
            _write(out, {"run": header, "set": set_name, "model": name, "batch": None,
                         "prompt": None, "error": f"build: {exc!r}"[:400]})
            continue
        info = describe(model, spec, args)
        for batch, prompt in todo:
            if time.monotonic() > deadline:
                break
            row: dict[str, Any] = {"run": header, "set": set_name, "model": name,
                                   "batch": batch, "prompt": prompt, **info}
            t1 = time.monotonic()
            try:
                row.update(measure_case(model, batch, prompt, new, a.repeats, device))
            except Exception as exc:  # noqa: BLE001 - out of memory, a model's limit
                row["error"] = f"{type(exc).__name__}: {exc}"[:400]
                row["traceback"] = traceback.format_exc()[-1500:]
            row["seconds"] = round(time.monotonic() - t1, 2)
            _write(out, row)
            print(f"{name} b{batch} p{prompt}: {row.get('decode_ms_per_token', '-')} ms/token "
                  f"graph {row.get('graph_decode_ms_per_token', row.get('graph_error', '-'))} "
                  f"({row['seconds']} s)", flush=True)
            if device == "cuda":
                torch.cuda.empty_cache()
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
        print(f"{name}: {time.monotonic() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
