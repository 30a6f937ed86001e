"""Text generation (issue 43): the generation trace, the KV cache against hand counts, the
memory of a generate call phase by phase, its written-out steps against every step traced,
the --fit search, the latency figures, and the CLI with its bad input (all on CPU, meta)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch

from torchinspect.errors import InspectError
from torchinspect.memory.faking import make_target
from torchinspect.memory.generate import GenerateConfig, fit_generate, predict_case, search
from torchinspect.sources.case import ModelOptions, make_case
from torchinspect.trace.generation import (
    CaptureCheck,
    DecoderKind,
    Generation,
    KnownValues,
    NotADecoder,
    find_decoder,
    kv_per_token,
    meta_state,
    with_weights,
)

BF16 = 2
LLAMA_GQA = ["hidden_size=64", "intermediate_size=128", "num_hidden_layers=2",
             "num_attention_heads=4", "num_key_value_heads=2", "vocab_size=500"]
MISTRAL = ["hidden_size=64", "intermediate_size=128", "num_hidden_layers=2",
           "num_attention_heads=4", "num_key_value_heads=2", "vocab_size=500",
           "sliding_window=16"]
GEMMA_MQA = ["hidden_size=64", "intermediate_size=128", "num_hidden_layers=2",
             "num_attention_heads=4", "num_key_value_heads=1", "head_dim=32", "vocab_size=500"]
T5 = ["d_model=64", "d_ff=128", "d_kv=16", "num_layers=3", "num_decoder_layers=3",
      "num_heads=4", "vocab_size=500"]
GPT2 = ["n_embd=64", "n_layer=2", "n_head=4", "vocab_size=500", "n_positions=256"]


def case_of(spec: str, args: list[str], batch: int, prompt: int):
    return make_case(spec, options=ModelOptions(args=args, device="meta",
                                                inputs=[f"long:{batch},{prompt}"],
                                                no_batch=True), device="meta")


def predict(spec: str, args: list[str], batch: int, prompt: int, new: int, **kw):
    target = make_target("cuda", "h100", fast=True)
    return predict_case(case_of(spec, args, batch, prompt),
                        GenerateConfig(new, "bf16", **kw), target)


# -- the KV cache against hand counts


@pytest.mark.slow
def test_gqa_cache_holds_kv_heads_not_query_heads():
    """2 layers x (k, v) x 2 KV heads x head_dim 16 x bf16, whatever the 4 query heads."""
    per_token = 2 * 2 * 2 * 16 * BF16
    kv = kv_per_token(case_of("hf:LlamaForCausalLM", LLAMA_GQA, 1, 8), torch.bfloat16)
    assert kv is not None and kv.decoded == per_token and kv.prompt == 0
    r = predict("hf:LlamaForCausalLM", LLAMA_GQA, 3, 40, 10)
    assert r.kv_bytes_per_token == per_token
    assert r.kv_cache_end_bytes == per_token * 3 * (40 + 10 - 1)  # the last token is not fed


def test_multi_query_cache_is_one_head():
    per_token = 2 * 2 * 1 * 32 * BF16  # 1 KV head of head_dim 32
    kv = kv_per_token(case_of("hf:GemmaForCausalLM", GEMMA_MQA, 1, 8), torch.bfloat16)
    assert kv is not None and kv.decoded == per_token


@pytest.mark.slow
def test_sliding_window_cache_stops_at_the_window():
    """transformers keeps the last window - 1 positions after each update and appends one:
    16 per layer, however long the context; after the prefill the window is a view of the
    whole prompt's keys, which stays allocated until the first step."""
    layer_token = 2 * 2 * 16 * BF16  # (k, v) x 2 KV heads x head_dim 16
    r = predict("hf:MistralForCausalLM", MISTRAL, 2, 64, 8)
    assert r.kv_cache_end_bytes == 2 * layer_token * 2 * 16  # 2 layers, 2 sequences, 16 positions
    assert r.kv_cache_bytes == 2 * layer_token * 2 * 64  # the prefill's view keeps the prompt
    assert r.kv_bytes_per_token == 2 * layer_token  # while every layer grows


@pytest.mark.slow
def test_encoder_decoder_caches_the_prompt_for_cross_attention():
    """T5: the decoder's self-attention grows one position a step (3 layers: transformers
    sizes generate's cache by the config's layer count); its cross-attention holds the
    encoder's keys and values of the whole prompt."""
    per_token = 3 * 2 * 4 * 16 * BF16  # decoder layers x (k, v) x heads x d_kv
    kv = kv_per_token(case_of("hf:T5ForConditionalGeneration", T5, 1, 8), torch.bfloat16)
    assert kv is not None and kv.decoded == per_token and kv.prompt == per_token
    r = predict("hf:T5ForConditionalGeneration", T5, 2, 32, 6)
    assert r.decoder == "seq2seq"
    # the start token and 5 fed tokens: 6 self positions; 32 prompt positions cross
    assert r.kv_cache_end_bytes == 2 * per_token * (6 + 32)


def test_zoo_decoder_follows_the_cache_protocol():
    """zoo:llama-tiny (make_cache, an object of its own): 2 layers x (k, v) x 2 KV heads x 16."""
    case = make_case("zoo:llama-tiny", device="meta")
    decoder = find_decoder(case)
    assert decoder.kind is DecoderKind.custom and decoder.make_cache
    kv = kv_per_token(case)
    assert kv is not None and kv.decoded == 2 * 2 * 2 * 16 * 4  # fp32 as built


def test_zoo_llama_cache_gives_the_full_forwards_logits():
    from torchinspect.zoo.llama import llama

    torch.manual_seed(0)
    model = llama("llama-tiny").eval()
    ids = torch.randint(0, 1000, (2, 12))
    with torch.no_grad():
        full = model(ids)
        logits, cache = model(ids[:, :9], cache=model.make_cache(2, 12))
        steps = [logits[:, -1]]
        for i in range(9, 12):
            logits, cache = model(ids[:, i:i + 1], cache=cache)
            steps.append(logits[:, -1])
    assert cache.length == 12
    for got, at in zip(steps, (8, 9, 10, 11), strict=True):
        torch.testing.assert_close(got, full[:, at])


# -- the phases and the written-out steps


@pytest.mark.parametrize(("spec", "args"), [("hf:LlamaForCausalLM", LLAMA_GQA),
                                            ("hf:GPT2LMHeadModel", GPT2),
                                            ("hf:T5ForConditionalGeneration", T5)])
@pytest.mark.slow
def test_phase_accounting_on_meta(spec, args):
    """Resident, prefill and decode: each phase's peak holds the weights and its cache; the
    peak is the larger phase; the written-out steps give what tracing every step gives."""
    written = predict(spec, args, 2, 48, 12)
    traced = predict(spec, args, 2, 48, 12, padding_mask=written.notes == [])  # same config
    assert written.steps_written > 0 and written.steps_traced + written.steps_written == 11
    by = {p.phase: p for p in written.phases}
    assert set(by) == {"prefill", "decode"}
    assert written.peak == max(written.prefill_peak, written.decode_peak)
    for phase in by.values():
        assert phase.breakdown["weights"] >= written.weights_bytes
        assert phase.peak >= sum(phase.breakdown.values()) * 0.999  # the makeup adds up
    assert by["decode"].breakdown["kv cache"] >= written.kv_cache_end_bytes
    assert written.resident == written.weights_bytes + written.buffer_bytes + written.input_bytes
    assert traced.peak == written.peak


@pytest.mark.slow
def test_written_out_steps_equal_every_step_traced(monkeypatch):
    import torchinspect.memory.generate as gen

    written = predict("hf:LlamaForCausalLM", LLAMA_GQA, 2, 40, 16)
    monkeypatch.setattr(gen, "TRACED_STEPS", 100)
    every = predict("hf:LlamaForCausalLM", LLAMA_GQA, 2, 40, 16)
    assert every.steps_written == 0 and written.steps_written == 12
    assert (written.peak, written.prefill_peak, written.decode_peak, written.kv_cache_end_bytes) \
        == (every.peak, every.prefill_peak, every.decode_peak, every.kv_cache_end_bytes)


@pytest.mark.slow
def test_a_window_that_fills_inside_the_call_is_traced_step_by_step(monkeypatch):
    """Prompt 8, window 16, 20 new tokens: the cache stops growing mid-call, so the pattern
    of the first steps does not hold at the last: every step is traced."""
    import torchinspect.memory.generate as gen

    r = predict("hf:MistralForCausalLM", MISTRAL, 2, 8, 20)
    assert r.steps_written == 0 and r.steps_traced == 19
    monkeypatch.setattr(gen, "TRACED_STEPS", 100)
    assert predict("hf:MistralForCausalLM", MISTRAL, 2, 8, 20).peak == r.peak


@pytest.mark.slow
def test_generate_peak_grows_with_the_batch_and_the_context():
    small = predict("hf:LlamaForCausalLM", LLAMA_GQA, 1, 64, 8)
    batch = predict("hf:LlamaForCausalLM", LLAMA_GQA, 4, 64, 8)
    longer = predict("hf:LlamaForCausalLM", LLAMA_GQA, 1, 512, 8)
    assert batch.kv_cache_end_bytes == 4 * small.kv_cache_end_bytes
    assert batch.peak > small.peak and longer.peak > small.peak


# -- the generation trace


def test_known_values_answer_the_masks_host_check():
    values = KnownValues()
    with values:
        mask = torch.ones(2, 5, dtype=torch.long, device="meta")
        assert bool(mask.sum() == mask.numel()) is True  # transformers' fast_all
        assert bool(mask.bool().all()) is True
        assert bool((~mask.bool()[:, 5:]).sum() == 0) is True
        grown = torch.cat([mask, mask.new_ones((2, 1))], dim=-1)
        assert bool(grown.all()) is True
        counter = torch.zeros((), dtype=torch.long, device="meta")
        counter.add_(3)
        assert int(counter.item()) == 3
        unknown = torch.empty(3, device="meta")
        with pytest.raises(RuntimeError, match="host"):
            bool(unknown.sum() > 0)
    assert len(values.reads) == 5


def test_capture_check_says_why_a_step_cannot_be_captured():
    """transformers' sliding-window static cache, full after a prompt past its window, indexes
    with torch.tensor(..., device=...): a copy from the host a CUDA graph cannot capture."""
    case = case_of("hf:MistralForCausalLM", MISTRAL, 1, 32)
    decoder = find_decoder(case)
    checks = []

    def body(prompt: int) -> None:
        gen = Generation(decoder, 1, prompt, 4, cache="static", padding_mask=False)
        gen.prefill()
        with CaptureCheck(gen) as check:
            gen.step()
        checks.append(check)

    state = meta_state(decoder.model, torch.bfloat16)
    for prompt in (32, 8):
        with torch.no_grad():
            with_weights(decoder.model, state, lambda p=prompt: body(p))
    past, within = checks
    assert not past.capturable and "copies host data to the GPU" in past.reason()
    assert within.capturable


@pytest.mark.parametrize(("spec", "why"), [
    ("resnet18", "its input is not token ids"),
    ("hf:bert", "has no language-model head"),
])
def test_not_a_decoder(spec, why):
    case = make_case(spec, device="meta")
    with pytest.raises(NotADecoder, match=why):
        find_decoder(case)


@pytest.mark.slow
def test_a_model_without_a_cache_is_said_so_and_recomputed_when_asked():
    case = make_case("zoo:gpt-tiny", device="meta")
    with pytest.raises(InspectError, match="has no KV cache") as info:
        find_decoder(case)
    assert "--recompute" in (info.value.hint or "")
    assert find_decoder(case, recompute=True).kind is DecoderKind.recompute
    r = predict_case(case, GenerateConfig(4, recompute=True), make_target("cuda", "h100", fast=True))
    assert r.kv_cache_end_bytes == 0 and r.decoder == "recompute"


def test_context_past_absolute_positions_is_refused_naming_the_limit():
    with pytest.raises(InspectError, match="past its limit of 256"):
        predict("hf:GPT2LMHeadModel", GPT2, 1, 250, 10)


# -- the --fit search


def test_search_finds_the_boundary_in_few_predictions():
    for f, allowed, limit, want in [(lambda v: 100 + 10 * v, 500, 1 << 20, 40),
                                    (lambda v: 100 + 10 * v + 0.01 * v * v, 5000, 1 << 20, 360),
                                    (lambda v: 1e9 + 3e7 * v + 5e5 * (v % 7), 8e10, 1 << 16, 2633),
                                    (lambda v: 100 + v ** 3, 1e9, 1 << 20, 999)]:
        calls: list[int] = []
        found, capped = search(lambda v, f=f, calls=calls: calls.append(v) or f(v), allowed,
                               limit)
        assert (found, capped) == (want, False)
        assert len(calls) <= 16
    assert search(lambda v: 10.0, 5, 100) == (None, False)
    assert search(lambda v: 10.0 * v, 1e9, 64) == (64, True)


@pytest.mark.slow
def test_fit_batch_and_context_against_the_predictions():
    case = case_of("hf:LlamaForCausalLM", LLAMA_GQA, 1, 64)
    cfg = GenerateConfig(8, "bf16")
    target = make_target("cuda", "h100", fast=True)
    one = predict_case(case, cfg, target, batch=1).peak
    budget = int(one * 1.6)
    found = fit_generate(case, cfg, target, budget)
    assert found.found is not None and found.found > 1
    peaks = dict(found.probes)
    assert peaks[found.found] <= budget < peaks[found.found + 1]
    nothing = fit_generate(case, cfg, target, one // 2)
    assert nothing.found is None and nothing.smallest() == one
    gpt2 = case_of("hf:GPT2LMHeadModel", GPT2, 2, 16)
    context = fit_generate(gpt2, cfg, target, 10**12, context=True)
    assert context.found == 256 - 8 and context.capped  # the position limit


# -- latency


def test_latency_figures_and_what_binds():
    from torchinspect.latency import latency_gpu
    from torchinspect.latency.eager import HostModel
    from torchinspect.latency.generate import HostScale, LatencyConfig
    from torchinspect.latency.generate import predict_case as predict_latency
    from torchinspect.latency.host import HostCost

    host = HostModel(HostCost(2.0, 1.5, "test cpu"), 5.0)
    short = predict_latency(case_of("hf:LlamaForCausalLM", LLAMA_GQA, 4, 64),
                            LatencyConfig(16, "bf16"), latency_gpu("h100"), host,
                            scale=HostScale(1.0, "test"))
    # a cache long enough that attention costs more than its kernel's floor: below a few MB
    # the measured small-kernel times are not monotone in size (4,096 here prices 1% under 64)
    long = predict_latency(case_of("hf:LlamaForCausalLM", LLAMA_GQA, 4, 16384),
                           LatencyConfig(16, "bf16"), latency_gpu("h100"), host,
                           scale=HostScale(1.0, "test"))
    assert short.decode.binds == "host"  # a tiny model's step is all dispatch
    assert short.decode_ms_per_token == pytest.approx(short.decode.host_ms)
    assert long.decode.bytes > 10 * short.decode.bytes
    assert long.decode.gpu_ms > short.decode.gpu_ms  # attention reads a longer cache
    assert long.decode_graph_ms_per_token > short.decode_graph_ms_per_token
    assert short.tokens_per_s == pytest.approx(4 * 1e3 / short.decode_ms_per_token)
    assert short.total_ms == pytest.approx(short.prefill_ms + 15 * short.decode_ms_per_token)
    window = predict_latency(case_of("hf:MistralForCausalLM", MISTRAL, 1, 32),
                             LatencyConfig(8, "bf16"), latency_gpu("h100"), host)
    assert window.decode_graph_ms_per_token is None
    assert "copies host data to the GPU" in window.graph_reason


# -- the CLI on CPU


@pytest.mark.slow
def test_cli_memory_generate_table_and_json(invoke):
    args = ["memory", "hf:LlamaForCausalLM", *sum((["--arg", a] for a in LLAMA_GQA), []),
            "--input", "long:2,64", "--no-batch", "--generate", "8", "--dtype", "bf16"]
    table = invoke(*args)
    assert table.exit_code == 0, table.output
    for text in ("Generation (predicted)", "KV per token", "256 B per sequence", "prefill",
                 "decode", "resident"):
        assert text in table.output
    data = json.loads(invoke(*args, "-f", "json").output)
    assert data["schema"] == "torchinspect/memory-generate/v1"
    gen = data["generate"]
    per_token = 2 * 2 * 2 * 16 * BF16  # layers x (k, v) x KV heads x head_dim x bf16
    assert gen["kv_bytes_per_token"] == per_token
    assert gen["kv_cache_end_bytes"] == per_token * 2 * (64 + 8 - 1)
    assert gen["peak"] == max(gen["prefill_peak"], gen["decode_peak"])


def test_cli_bench_generate_predicts_without_a_gpu(invoke):
    args = ["bench", "hf:LlamaForCausalLM", *sum((["--arg", a] for a in LLAMA_GQA), []),
            "--input", "long:2,64", "--no-batch", "--generate", "8", "--dtype", "bf16",
            "--predict", "h100"]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert "PREDICTED, not measured" in result.output and "time to first token" in result.output
    data = json.loads(invoke(*args, "-f", "json").output)
    assert data["schema"] == "torchinspect/bench-generate/v1"
    gen = data["predicted"]["generate"]
    assert gen["decode_ms_per_token"] > 0 and gen["graph_capturable"] is True
    assert gen["tokens_per_s"] == pytest.approx(2 * 1e3 / gen["decode_ms_per_token"])


CUSTOM = textwrap.dedent('''
    import torch
    from torch import nn

    class Decoder(nn.Module):
        """forward(ids, kv=None) -> (logits, kv): keys and values of one layer, grown."""

        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(100, 32)
            self.k, self.v = nn.Linear(32, 32), nn.Linear(32, 32)
            self.head = nn.Linear(32, 100)

        def forward(self, ids, kv=None):
            x = self.embed(ids)
            k, v = self.k(x), self.v(x)
            if kv is not None:
                k, v = torch.cat([kv[0], k], 1), torch.cat([kv[1], v], 1)
            att = torch.softmax(x @ k.transpose(1, 2), -1) @ v
            return self.head(att), (k, v)
''')


@pytest.mark.slow
def test_cli_a_decoder_of_ones_own_with_cache_arg(invoke, tmp_path: Path):
    path = tmp_path / "decoder.py"
    path.write_text(CUSTOM)
    base = ["memory", f"{path}:Decoder", "--input", "long:2,10", "--no-batch", "--generate", "5",
            "-f", "json"]
    missing = invoke(*base)
    assert missing.exit_code == 2 and "no KV cache" in missing.output
    wrong = invoke(*base, "--cache-arg", "past")
    assert wrong.exit_code == 2 and "takes no argument 'past'" in wrong.output
    ok = invoke(*base, "--cache-arg", "kv")
    assert ok.exit_code == 0, ok.output
    gen = json.loads(ok.output)["generate"]
    assert gen["decoder"] == "custom" and gen["kv_bytes_per_token"] == 2 * 32 * 4


@pytest.mark.parametrize(("args", "message"), [
    (["memory", "resnet18", "--generate", "8"], "is not a text decoder"),
    (["memory", "zoo:llama-tiny", "--generate", "0"], "--generate: must be at least 1"),
    (["memory", "zoo:llama-tiny", "--generate", "100000000"], "--generate"),
    (["memory", "zoo:llama-tiny", "--input", "long:5000000,8", "--no-batch", "--generate", "8"],
     "a batch of 5,000,000 sequences"),
    (["memory", "zoo:llama-tiny", "--input", "long:1,99999999", "--no-batch", "--generate", "8"],
     "a prompt of 99,999,999 tokens"),
    (["memory", "zoo:llama-tiny", "--generate", "8", "--cache", "paged"], "--cache 'paged'"),
    (["memory", "zoo:llama-tiny", "--generate", "8", "--amp"], "--amp does not apply"),
    (["memory", "zoo:llama-tiny", "--generate", "8", "--fit-context"], "it needs --fit"),
    (["memory", "zoo:llama-tiny", "--cache", "static"], "--cache is an option of --generate"),
    (["memory", "zoo:llama-tiny", "--generate", "8", "--cache", "static"], "transformers' cache"),
    (["memory", "zoo:llama-tiny", "--generate", "8", "--verify"], "no CUDA device"),
    (["memory", "zoo:gpt-tiny", "--generate", "8"], "has no KV cache"),
    (["memory", "hf:T5ForConditionalGeneration", *sum((["--arg", a] for a in T5), []),
      "--input", "long:1,16", "--no-batch", "--generate", "4", "--cache", "quantized"],
     "no quantized cache for an encoder-decoder"),
    (["bench", "zoo:llama-tiny", "--generate", "8"], "--predict GPU"),
    (["bench", "zoo:llama-tiny", "--generate", "8", "--predict", "h100", "--batch", "2"],
     "--batch does not apply"),
    (["bench", "zoo:llama-tiny", "--recompute", "--predict", "h100"], "options of --generate"),
])
def test_cli_bad_input_is_one_line_and_exit_2(invoke, args, message):
    if "--verify" in args and torch.cuda.is_available():
        pytest.skip("a GPU is here")
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


@pytest.mark.slow
def test_cli_fit_that_fits_nothing_says_the_least_need(invoke):
    result = invoke("memory", "zoo:llama-tiny", "--input", "long:1,32", "--no-batch",
                    "--generate", "4", "--fit", "1MB")
    assert result.exit_code == 0, result.output
    assert "none: batch 1 needs" in result.output


# -- the report's serving section


@pytest.mark.slow
def test_report_serving_part_sweeps_context_and_batch():
    """A decoder's report part: generate's peak at each context up to the position limit
    (weights + KV cache + the rest add up to the peak), the decode time at each batch; the
    charts draw every point and the card's line (or say it is above the chart)."""
    from torchinspect.overview.serving import BATCHES, NEW_TOKENS, contexts_for, serving_part
    from torchinspect.report.serving_chart import decode_svg, memory_svg, serving_sections

    assert contexts_for(None, 128) == [512, 2048, 8192, 32768]
    assert contexts_for(4096, 128) == [512, 2048, 3968]  # GPT-2 4k: up to its last position
    assert contexts_for(1024, 128) == [512, 896]
    part = serving_part(case_of("hf:GPT2LMHeadModel", GPT2, 2, 16), "h100")
    assert part is not None and part.gpu == "h100" and part.batch == 2 and part.prompt == 16
    assert [m.prompt for m in part.contexts] == [256 - NEW_TOKENS]  # n_positions 256
    for m in part.contexts:
        data = part.to_dict()["by_context"][0]
        assert data["weights_bytes"] + data["kv_cache_bytes"] + data["other_bytes"] == m.peak
        # 2 layers x (k, v) x 64 channels x bf16, for 2 sequences of every position but the last
        assert m.kv_cache_bytes == 2 * 2 * 64 * BF16 * 2 * (m.prompt + NEW_TOKENS - 1)
    assert [p.batch for p in part.decode] == list(BATCHES)
    assert all(p.decode_ms_per_token > 0 for p in part.decode)
    svg = memory_svg(part)
    assert svg.count("<rect") >= len(part.contexts) and "h100 usable" in svg
    assert decode_svg(part).count("<circle") >= len(part.decode)
    titles = [getattr(s, "title", "") for s in serving_sections(part)]
    assert any("against the context" in t for t in titles)
    assert any("against the batch" in t for t in titles)


def test_report_serving_part_is_none_for_a_model_that_is_not_a_decoder():
    from torchinspect.overview.serving import serving_part

    assert serving_part(make_case("zoo:convnet", device="meta"), "h100") is None


def test_measuring_generate_on_the_cpu_gives_every_figure():
    """bench/generate.py (what generate_measure.py and --verify run) on a tiny decoder on the
    CPU: every timing is there, generate made the tokens asked for, no CUDA graph off a GPU."""
    from torchinspect.bench.generate import measure_generate

    model = case_of("hf:LlamaForCausalLM", LLAMA_GQA, 2, 12).real_model("cpu").eval()
    row = measure_generate(model, 2, 12, 4, repeats=1, device="cpu", logits="generate")
    assert row["new_tokens"] == 4
    assert row["prefill_ms"] > 0 and row["generate_1_ms"] > 0 and row["generate_4_ms"] > 0
    assert row["decode_ms_per_token"] == (row["generate_4_ms"] - row["generate_1_ms"]) / 3
    assert row["static_eager_ms_per_token"] > 0 and "graph_decode_ms_per_token" not in row
