"""The generation trace: how ``generate`` calls a decoder, step by step, on meta tensors.

Text generation is a prefill (the prompt through the model, filling its KV cache) followed by
one decode step per new token (the last token through the model, reading and growing the
cache). The memory and the latency of generation (``memory/generate.py``,
``latency/generate.py``) both run what is described here, so there is one description of the
calls, never two:

* `find_decoder(case)` says what kind of decoder a model is (`DecoderKind`): a Hugging Face
  model with a language-model head (``causal``: decoder-only; ``seq2seq``: an
  encoder-decoder such as T5, whose cross-attention keys and values are cached too), a
  module of one's own with a cache (``custom``: `CACHE_PROTOCOL`), or a decoder without a
  cache whose generation is priced as full recomputation when asked (``recompute``).
  Anything else (no token input, no logits) is refused with one line.
* `Generation(decoder, batch, prompt, new_tokens)` is one ``generate`` call:
  `Generation.prefill` runs the prompt, `Generation.step` one new token. Each runs the
  model's own code on whatever tensors the caller made (meta, fake): transformers' own cache
  classes (``DynamicCache`` and its sliding-window layers, ``StaticCache``, the encoder-decoder
  cache, the FP8 ``QuantizedCache`` where transformers offers it), grouped- and multi-query
  heads as the model stores them, ``prepare_inputs_for_generation`` as generate calls it.
  Around the model it does generate's own tensor work of greedy decoding (`greedy_tail`).
  The cache's tensors are read from the cache object itself (`cache_tensors`), never from a
  config formula.
* `CaptureCheck` watches a step for what a CUDA graph cannot capture: a device value read on
  the host (``.item()``, ``nonzero``, a tensor's truth value) or a host-to-device copy
  (``torch.tensor(..., device=cuda)``), as transformers' sliding-window static cache makes
  once the window is full.

Meta tensors hold no values, yet transformers reads the attention mask on the host to decide
whether a mask is needed at all (``fast_all(mask)``); `KnownValues` answers such reads for
tensors whose values are known (the all-ones mask of an unpadded batch and what is derived
from it), so the mask is passed as generate passes it and the masks the model builds from it
(a sliding window's, per sequence) are traced. Any other host read ends the trace with
`HostRead`; the callers then trace without the mask and say so.
"""

from __future__ import annotations

import inspect
import re
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from torchinspect.errors import InspectError, first_line
from torchinspect.privtorch import QuietDispatchMode

#: the keyword a decoder of one's own takes its cache by, unless ``--cache-arg`` names another
DEFAULT_CACHE_ARG = "cache"

CACHE_PROTOCOL = (
    "forward(ids, cache=...) returns (logits, cache): the first call (the prompt) gets the "
    "object make_cache(batch, max_len) returns (or None, when the model has no make_cache), "
    "later calls get back the cache the previous call returned")


class DecoderKind(StrEnum):
    """How a decoder generates: what `Generation` calls and what it caches."""

    causal = "causal"  # transformers, decoder-only, with a cache class of its own
    seq2seq = "seq2seq"  # transformers, encoder-decoder: self- and cross-attention caches
    custom = "custom"  # a module of one's own following CACHE_PROTOCOL
    recompute = "recompute"  # no cache: every step runs the whole sequence again


class CacheKind(StrEnum):
    """The KV cache a generate call uses (transformers' ``cache_implementation``)."""

    dynamic = "dynamic"  # generate's default: grown by concatenation, per layer
    static = "static"  # preallocated at prompt + new tokens (what a CUDA graph replays)
    quantized = "quantized"  # transformers' QuantizedCache, FP8 backend (no extra library)


class NotADecoder(InspectError):
    """The model cannot generate text: no token input, no logits, no language-model head."""


@dataclass(frozen=True)
class Decoder:
    """What kind of decoder a model is, and how generate calls it."""

    kind: DecoderKind
    model: Any
    name: str
    token_dtype: Any  # the dtype of its token ids (int64 for every known decoder)
    vocab: int | None
    cache_arg: str | None  # the forward's keyword for the cache (None: recompute)
    keep_last_logits: bool  # generate passes logits_to_keep=1: the prefill's last logits only
    position_limit: int | None  # an absolute-position model's longest sequence
    eos: bool  # generate's eos handling (and the min-new-tokens processor) runs each step
    make_cache: bool = False  # custom: the model has make_cache(batch, max_len)
    notes: tuple[str, ...] = ()

    @property
    def hf(self) -> bool:
        return self.kind in (DecoderKind.causal, DecoderKind.seq2seq)

    @property
    def cached(self) -> bool:
        return self.kind is not DecoderKind.recompute

    def to_dict(self) -> dict[str, Any]:
        return {"kind": str(self.kind), "cache_arg": self.cache_arg,
                "keep_last_logits": self.keep_last_logits, "position_limit": self.position_limit,
                "vocab": self.vocab}


# -- what kind of decoder

def _parameters(fn: Any) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return {}


def token_input(example: Any, name: str) -> tuple[int, int, Any]:
    """(batch, prompt length, dtype) of the example's token ids: ``input_ids`` or its first
    integer spec of shape (batch, length)."""
    specs = list(example.specs()) if hasattr(example, "specs") else []
    main = (getattr(example, "kwargs", None) or {}).get("input_ids")
    for spec in ([main] if main is not None else []) + specs:
        shape = tuple(getattr(spec, "shape", ()))
        dtype = str(getattr(spec, "dtype", ""))
        if len(shape) == 2 and "int" in dtype and not dtype.startswith("u"):
            return int(shape[0]), int(shape[1]), getattr(torch, dtype, torch.int64)
    raise NotADecoder(f"{name} is not a text decoder: its input is not token ids "
                      "(an integer tensor of shape batch x length)",
                      hint="--generate needs a decoder fed token ids, e.g. --input long:1,512 "
                      "--no-batch")


def find_decoder(case: Any, *, cache_arg: str | None = None, recompute: bool = False) -> Decoder:
    """The case's model as a decoder, or `NotADecoder` (exit 2) saying why not.

    A model without a cache is refused unless ``recompute`` (every step then runs the whole
    sequence again)."""
    model, name = case.model, case.name
    _, _, dtype = token_input(case.require_example(), name)
    config = getattr(model, "config", None)
    if hasattr(model, "can_generate") and config is not None and hasattr(config, "to_dict"):
        return _hf_decoder(model, name, dtype, cache_arg, recompute)
    params = _parameters(getattr(model, "forward", None))
    arg = cache_arg or DEFAULT_CACHE_ARG
    limit = _embedding_limit(model)
    notes: tuple[str, ...] = ()
    if arg in params:
        return Decoder(DecoderKind.custom, model, name, dtype, _output_vocab(model), arg,
                       False, limit, False, callable(getattr(model, "make_cache", None)))
    if cache_arg is not None:
        raise InspectError(f"--cache-arg {cache_arg}: {name}'s forward takes no argument "
                           f"{cache_arg!r}", hint="name the keyword its forward takes the cache "
                           "by (" + ", ".join(p for p in params if p not in ("self",))[:80] + ")")
    if not recompute:
        raise InspectError(
            f"{name} has no KV cache: its forward takes no '{arg}' argument, so each new token "
            "would run the whole sequence again",
            hint="add --recompute to price that, or give the model a cache: "
            f"{CACHE_PROTOCOL} (--cache-arg NAME for another keyword)")
    notes = ("no KV cache: every decode step runs the whole sequence so far (--recompute)",)
    return Decoder(DecoderKind.recompute, model, name, dtype, _output_vocab(model), None, False,
                   limit, False, notes=notes)


def _hf_decoder(model: Any, name: str, dtype: Any, cache_arg: str | None,
                recompute: bool) -> Decoder:
    config = model.config
    cls = type(model).__name__
    try:
        can = bool(model.can_generate())
    except Exception:  # noqa: BLE001 - a model's own method: no answer is no
        can = False
    if not can:
        raise NotADecoder(f"{name} is not a text decoder: {cls} has no language-model head "
                          "(transformers' can_generate() is False)",
                          hint="build the class with the head, e.g. hf:LlamaForCausalLM or "
                          "hf:T5ForConditionalGeneration")
    params = _parameters(model.forward)
    arg = cache_arg or next((a for a in ("cache", "past_key_values") if a in params), None)
    if arg is None or arg not in params:
        if not recompute:
            raise InspectError(f"{name}: {cls}'s forward takes no cache argument, so each new "
                               "token would run the whole sequence again",
                               hint="add --recompute to price that")
        arg = None
    if cache_arg is None and getattr(config, "use_cache", True) is False and not recompute:
        raise InspectError(f"{name}: its config says use_cache=False (generate keeps no cache)",
                           hint="add --arg use_cache=True, or --recompute to price that")
    seq2seq = bool(getattr(config, "is_encoder_decoder", False))
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    generation = getattr(model, "generation_config", None)
    eos = _first_int(getattr(generation, "eos_token_id", None),
                     getattr(config, "eos_token_id", None)) is not None
    kind = DecoderKind.recompute if arg is None else (
        DecoderKind.seq2seq if seq2seq else DecoderKind.causal)
    return Decoder(kind, model, name, dtype, getattr(text, "vocab_size", None), arg,
                   "logits_to_keep" in params, _hf_position_limit(model, text), eos)


def _first_int(*values: Any) -> int | None:
    for v in values:
        if isinstance(v, (list, tuple)) and v:
            v = v[0]
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


_POSITION_NAME = re.compile(r"(^|[._])(wpe|pos[a-z_]*|position[a-z_]*|embed_positions)$")


def _position_tables(model: Any) -> list[tuple[str, nn.Embedding]]:
    return [(n, m) for n, m in model.named_modules()
            if isinstance(m, nn.Embedding) and _POSITION_NAME.search(n)]


def _embedding_limit(model: Any) -> int | None:
    """An absolute-position model's limit: the rows of its position embedding table."""
    tables = _position_tables(model)
    return min(int(m.num_embeddings) for _, m in tables) if tables else None


def _hf_position_limit(model: Any, text: Any) -> int | None:
    """A transformers model with a learned position table (GPT-2's ``wpe``, OPT's offset
    table): the config's limit; rotary and relative positions have none to refuse at."""
    if not _position_tables(model):
        return None
    for attr in ("n_positions", "max_position_embeddings", "max_target_positions"):
        v = getattr(text, attr, None)
        if isinstance(v, int) and v > 0:
            return v
    return _embedding_limit(model)


def _output_vocab(model: Any) -> int | None:
    """The vocabulary of a module of one's own: its last Linear's outputs (the LM head)."""
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    return int(linears[-1].out_features) if linears else None


def check_context(decoder: Decoder, prompt: int, new_tokens: int) -> None:
    """Refuse a context past an absolute-position model's limit (exit 2)."""
    limit = decoder.position_limit
    if limit is not None and prompt + new_tokens > limit:
        raise InspectError(
            f"{decoder.name}: a prompt of {prompt:,} and {new_tokens:,} new tokens is a context of "
            f"{prompt + new_tokens:,} positions, past its limit of {limit:,} (learned absolute "
            "positions: it has no embedding for later ones)",
            hint=f"keep --input's length plus --generate within {limit:,}")


# -- one generate call

def _logits(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return out
    value = out.get("logits") if hasattr(out, "get") else getattr(out, "logits", None)
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    return None


def _hf_cache(out: Any) -> Any:
    for key in ("cache", "past_key_values"):
        value = out.get(key) if hasattr(out, "get") else getattr(out, key, None)
        if value is not None:
            return value
    return None


@dataclass
class Generation:
    """One greedy ``generate`` of ``new_tokens`` tokens for ``batch`` prompts of ``prompt``
    tokens: `prefill` once (it gives the first token), then `step` per token after it.

    The model runs on whatever weights it holds when called (the memory predictor calls
    this inside ``functional_call`` on fake weights); the tensors made here go on ``device``.
    ``cache``: generate's cache implementation. ``logits="all"``: the prefill computes every
    position's logits (a plain forward) instead of the last one generate asks for."""

    decoder: Decoder
    batch: int
    prompt: int
    new_tokens: int
    device: Any = "meta"
    cache: CacheKind = CacheKind.dynamic
    logits: str = "generate"
    padding_mask: bool = True  # pass generate's all-ones attention mask (False: no mask)
    ids: Any = None
    mask: Any = None  # generate's attention mask, grown each step
    values: Any = None  # the KnownValues of this generate
    state: Any = None  # the cache object between steps
    encoder_outputs: Any = None
    length: int = 0  # positions in the cache
    unfinished: Any = None

    def __post_init__(self) -> None:
        self.cache = CacheKind(self.cache)
        if self.cache is not CacheKind.dynamic and not self.decoder.hf:
            raise InspectError(f"--cache {self.cache}: transformers' cache classes serve "
                               f"transformers models; {self.decoder.name} keeps its own",
                               hint="leave out --cache")
        self.values = KnownValues()
        with self.values:
            self.ids = torch.zeros(self.batch, self.prompt, dtype=self.decoder.token_dtype,
                                   device=self.device)
            if self.decoder.hf:
                self.mask = torch.ones(self.batch, self.prompt, dtype=torch.int64,
                                       device=self.device)

    @property
    def model(self) -> Any:
        return self.decoder.model

    def prefill(self) -> None:
        """The prompt through the model (an encoder-decoder: the encoder, then the first
        decoder position), filling the cache; then generate's work for the first token."""
        with self.values:
            self._prefill()

    def step(self) -> None:
        """One new token: the last token through the model, reading and growing the cache."""
        with self.values:
            self._step()

    def forward(self) -> Any:
        """A plain forward over the prompt with ``use_cache=True`` (an encoder-decoder: the
        encoder and one decoder position): every position's logits, no generate around it."""
        with self.values:
            ids, mask = self.ids, self._mask()
            if self.decoder.kind is DecoderKind.seq2seq:
                start = torch.zeros(self.batch, 1, dtype=self.decoder.token_dtype,
                                    device=self.device)
                return self.model(input_ids=ids, attention_mask=mask, decoder_input_ids=start,
                                  use_cache=True)
            if self.decoder.hf:
                return self.model(input_ids=ids, attention_mask=mask, use_cache=True)
            if self.decoder.kind is DecoderKind.custom:
                return self.model(ids, **{self.decoder.cache_arg or DEFAULT_CACHE_ARG:
                                          self._new_custom_cache()})
            return self.model(ids)

    def _prefill(self) -> None:
        kind = self.decoder.kind
        if kind is DecoderKind.recompute:
            out = self.model(self.ids)
        elif kind is DecoderKind.custom:
            self.state = self._new_custom_cache()
            out = self.model(self.ids, **{self.decoder.cache_arg or DEFAULT_CACHE_ARG: self.state})
        else:
            self.state = self._new_hf_cache()
            if kind is DecoderKind.seq2seq:
                self.encoder_outputs = self.model.get_encoder()(
                    input_ids=self.ids, attention_mask=self._mask(), return_dict=True)
                self.ids = torch.zeros(self.batch, 1, dtype=self.decoder.token_dtype,
                                       device=self.device)
            out = self.model(**self._hf_inputs(first=True))
        self.length = 1 if kind is DecoderKind.seq2seq else self.prompt
        self.unfinished = torch.ones(self.batch, dtype=torch.int64, device=self.device)
        self._after(out)

    def _step(self) -> None:
        kind = self.decoder.kind
        if kind is DecoderKind.recompute:
            out = self.model(self.ids)
        elif kind is DecoderKind.custom:
            out = self.model(self.ids[:, -1:], **{self.decoder.cache_arg or DEFAULT_CACHE_ARG:
                                                  self.state})
        else:
            out = self.model(**self._hf_inputs(first=False))
        self.length += 1
        self._after(out)

    def _mask(self) -> Any:
        return self.mask if self.padding_mask else None

    def _new_custom_cache(self) -> Any:
        if not self.decoder.make_cache:
            return None
        return self.model.make_cache(self.batch, self.prompt + self.new_tokens)

    def _new_hf_cache(self) -> Any:
        import transformers

        config = self.model.config  # generate's: the decoder's text config
        config = config.get_text_config(decoder=True) if hasattr(
            config, "get_text_config") else config
        max_len = self.prompt + self.new_tokens
        seq2seq = self.decoder.kind is DecoderKind.seq2seq
        if self.cache is CacheKind.static:
            if seq2seq:
                return transformers.EncoderDecoderCache(
                    transformers.StaticCache(config=config, max_cache_len=max_len),
                    transformers.StaticCache(config=config, max_cache_len=self.prompt))
            return transformers.StaticCache(config=config, max_cache_len=max_len)
        if self.cache is CacheKind.quantized:
            if seq2seq:  # as generate refuses it
                raise InspectError("--cache quantized: transformers' generate offers no quantized "
                                   "cache for an encoder-decoder", hint="leave out --cache")
            return _quantized_cache(transformers, config)
        if seq2seq:
            return transformers.EncoderDecoderCache(transformers.DynamicCache(config=config),
                                                    transformers.DynamicCache(config=config))
        return transformers.DynamicCache(config=config)

    def _hf_inputs(self, *, first: bool) -> dict[str, Any]:
        """``prepare_inputs_for_generation`` as generate calls it: the cache under the keyword
        its signature names, ``logits_to_keep=1`` where the forward takes it, the attention
        mask (an encoder-decoder's is the encoder's)."""
        decoder = self.decoder
        kwargs: dict[str, Any] = {"use_cache": True}
        if self._mask() is not None:
            kwargs["attention_mask"] = self._mask()
        if decoder.keep_last_logits and self.logits == "generate":
            kwargs["logits_to_keep"] = 1
        if self.encoder_outputs is not None:
            kwargs["encoder_outputs"] = self.encoder_outputs
        prepare = getattr(self.model, "prepare_inputs_for_generation", None)
        params = _parameters(prepare) if prepare is not None else {}
        cache_kw = next((a for a in (decoder.cache_arg, "cache", "past_key_values")
                         if a in params), None)
        if prepare is not None and cache_kw is not None:
            kwargs[cache_kw] = self.state
            inputs = dict(prepare(self.ids, next_sequence_length=None if first else 1,
                                  is_first_iteration=first, **kwargs))
            if cache_kw != decoder.cache_arg and cache_kw in inputs:
                inputs[decoder.cache_arg or cache_kw] = inputs.pop(cache_kw)
            return inputs
        kwargs[decoder.cache_arg or "cache"] = self.state
        key = "decoder_input_ids" if decoder.kind is DecoderKind.seq2seq else "input_ids"
        kwargs[key] = self.ids if first else self.ids[:, -1:].clone()
        return kwargs

    def _after(self, out: Any) -> None:
        """generate's own tensor work after a forward (the cache kept, the logits read)."""
        logits = _logits(out)
        if logits is None or not torch.is_floating_point(logits) or logits.dim() != 3:
            got = type(out).__name__ if logits is None else \
                f"a tensor of shape {list(logits.shape)}"
            raise NotADecoder(f"{self.decoder.name} is not a text decoder: its forward returns "
                              f"{got}, not logits of shape batch x length x vocabulary",
                              hint="--generate needs a model that returns next-token logits")
        if self.decoder.kind is DecoderKind.custom:
            if isinstance(out, (tuple, list)) and len(out) > 1 and out[1] is not None:
                self.state = out[1]
            elif self.state is None:
                raise InspectError(f"{self.decoder.name}: its forward took "
                                   f"'{self.decoder.cache_arg}' but returned no cache",
                                   hint=CACHE_PROTOCOL)
        elif self.decoder.hf and self.decoder.cached:
            self.state = _hf_cache(out) or self.state
        del out
        greedy_tail(self, logits)

    def cache_tensors(self) -> list[Any]:
        """The tensors the cache holds now, each storage once."""
        return unique_tensors(self.state)

    def cache_bytes(self) -> int:
        """Bytes of the storages the cache holds now (a sliding window's view of a longer
        prefill keeps the whole prefill)."""
        return storage_bytes(self.cache_tensors())


def _quantized_cache(transformers: Any, config: Any) -> Any:
    """transformers' QuantizedCache on its FP8 backend (plain torch: it runs on meta)."""
    cls = getattr(transformers, "QuantizedCache", None)
    try:
        made = cls(backend="fp8", config=config) if cls is not None else None
    except ValueError as exc:
        if "backend" in str(exc):
            made = None
        else:
            raise InspectError(f"--cache quantized: {first_line(exc, limit=160)}",
                               hint="transformers' FP8 quantized cache takes models of "
                               "full-attention layers only") from None
    if made is None:
        raise InspectError(f"--cache quantized: transformers {transformers.__version__} offers "
                           "no quantized cache that runs without a quantization library",
                           hint="a transformers with the FP8 backend (5.24 has it), or leave out "
                           "--cache")
    return made


def greedy_tail(gen: Generation, logits: Any) -> None:
    """What greedy ``generate`` does with a forward's logits (transformers' ``_sample``): the
    last position's logits copied to fp32; with an eos token, the min-new-tokens processor
    (a fixed count of new tokens is what is asked: a copy, the vocabulary's eos mask,
    ``where``) and the eos blend of finished rows; ``argmax``; the ids and the attention mask
    grown by one; the stopping criteria (length, eos) and their ``max`` (read on the host by
    generate: not read here). A decoder of one's own gets the copy, ``argmax`` and the ids."""
    decoder = gen.decoder
    scores = logits[:, -1].to(copy=True, dtype=torch.float32)
    del logits
    if decoder.hf and decoder.eos:
        vocab = torch.arange(scores.shape[-1], device=scores.device)
        eos = torch.zeros(1, dtype=torch.int64, device=scores.device)
        scores = torch.where(torch.isin(vocab, eos), -float("inf"), scores.clone())
    tokens = torch.argmax(scores, dim=-1)
    del scores
    if decoder.hf and decoder.eos:
        tokens = tokens * gen.unfinished + torch.zeros((), dtype=torch.int64,
                                                       device=tokens.device) * (1 - gen.unfinished)
    gen.ids = torch.cat([gen.ids, tokens[:, None].to(gen.ids.dtype)], dim=-1)
    if gen.mask is not None and decoder.kind is DecoderKind.causal:
        gen.mask = torch.cat([gen.mask, gen.mask.new_ones((gen.batch, 1))], dim=-1)
    if decoder.hf:
        done = torch.full((gen.batch,), False, dtype=torch.bool, device=tokens.device)
        if decoder.eos:
            done = done | torch.isin(gen.ids[:, -1], torch.zeros(1, dtype=gen.ids.dtype,
                                                                 device=tokens.device))
        gen.unfinished = gen.unfinished & ~done
        gen.unfinished.max()  # compared with 0 and read on the host by generate


def unique_tensors(value: Any, depth: int = 0) -> list[Any]:
    """Every tensor of two or more dimensions reachable from a cache object (tuples, lists,
    dicts, attributes: a transformers ``Cache``'s layers, a module's own cache class), each
    storage once; scalars and vectors (lengths, positions, scales) are bookkeeping."""
    found: dict[int, Any] = {}
    _walk(value, found, 0, set())
    return [t for t in found.values() if t.dim() >= 2]


def _walk(value: Any, found: dict[int, Any], depth: int, seen: set[int]) -> None:
    if depth > 8 or value is None or id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, torch.Tensor):
        try:
            key = value.untyped_storage()._cdata
        except (RuntimeError, NotImplementedError):
            key = id(value)
        found.setdefault(key, value)
        return
    if isinstance(value, (str, bytes, int, float, bool, nn.Module)):
        return
    if isinstance(value, dict):
        items: Any = value.values()
    elif isinstance(value, (list, tuple, set)):
        items = value
    elif hasattr(value, "__dict__"):
        items = vars(value).values()
    else:
        return
    for item in items:
        _walk(item, found, depth + 1, seen)


# -- the values a meta trace knows

READS = frozenset({"_local_scalar_dense", "item", "is_nonzero"})
# ops whose output holds the one value every element of their (known) data input holds
_SAME = frozenset({
    "alias", "as_strided", "clone", "contiguous", "detach", "expand", "index", "index_select",
    "gather", "lift_fresh", "narrow", "permute", "repeat", "reshape", "select", "slice",
    "squeeze", "t", "transpose", "unsqueeze", "view", "_unsafe_view", "_to_copy", "to",
    "flatten", "take", "cat", "amax", "amin", "max", "min", "roll", "flip"})
_FILL = {"ones": 1, "ones_like": 1, "new_ones": 1, "zeros": 0, "zeros_like": 0, "new_zeros": 0}
_COMPARE = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
            "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}
_ARITH = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "bitwise_and": lambda a, b: a & b, "logical_and": lambda a, b: bool(a and b),
          "bitwise_or": lambda a, b: a | b, "logical_or": lambda a, b: bool(a or b)}


class KnownValues(QuietDispatchMode):
    """What a meta trace knows of tensor values: storages whose every element is one known
    number (the attention mask of an unpadded batch is all ones), followed through the ops
    that keep that so (views, copies, comparisons, sums, ``all``) and through in-place updates
    of a whole storage (``fill_``, ``add_``); any other write forgets it. A host read of such
    a value (``fast_all(mask)``, ``bool(mask.all())``: transformers' check that no mask is
    needed; a static cache's length) is answered and counted; any other host read raises
    `HostRead`, as no value exists on meta."""


    def __init__(self) -> None:
        super().__init__()
        self.known: dict[int, Any] = {}  # storage -> value of every element
        self.reads: list[str] = []  # host reads answered (each a sync on a GPU)

    def value(self, t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return None
        key = _storage_key(t)
        return self.known.get(key) if key is not None else None

    def remember(self, t: Any, value: Any) -> None:
        key = _storage_key(t)
        if key is None:
            return
        if value is None:
            self.known.pop(key, None)
            return
        if key not in self.known:
            weakref.finalize(t.untyped_storage(), self.known.pop, key, None)
        self.known[key] = _cast(value, t.dtype)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in READS:
            value = self.value(args[0])
            if value is None:
                raise HostRead(f"aten::{name}")
            self.reads.append(f"aten::{name}")
            return bool(value) if name == "is_nonzero" else _cast(value, args[0].dtype)
        written = _written(func, args, kwargs)
        if not self.known and name not in _FILL and not name.startswith(("full", "fill")):
            return func(*args, **kwargs)  # nothing known yet: nothing to follow
        before = {id(t): self._updated(name, t, args, kwargs) for t in written}
        out = func(*args, **kwargs)
        for t in written:
            self.remember(t, before[id(t)])
        if isinstance(out, torch.Tensor) and not any(out is t for t in written):
            value = self._follow(name.rstrip("_"), args, kwargs, out)
            if value is not None or self.value(out) is not None:
                self.remember(out, value)
        return out

    def _updated(self, name: str, t: Any, args: Any, kwargs: Any) -> Any:
        """The value of ``t``'s storage after an in-place op on it (None: unknown)."""
        if t.numel() != t.untyped_storage().nbytes() // max(t.element_size(), 1):
            return None  # a part of the storage written: no longer one value
        if name == "fill_":
            fill = args[1] if len(args) > 1 else None
            return self.value(fill) if isinstance(fill, torch.Tensor) else fill
        if name == "zero_":
            return 0
        if name == "copy_":
            return self.value(args[1])
        if name.endswith("_") and name[:-1] in _ARITH | _COMPARE:
            return self._follow(name[:-1], args, kwargs, t)
        return None

    def _follow(self, name: str, args: Any, kwargs: Any, out: Any) -> Any:
        if name in _FILL:
            return _FILL[name]
        if name in ("full", "full_like", "new_full", "fill"):
            fill = args[1] if len(args) > 1 else kwargs.get("fill_value")
            return fill if isinstance(fill, (int, float, bool)) else None
        if name == "cat":
            values = {self.value(t) for t in (args[0] if args else [])}
            return values.pop() if len(values) == 1 and None not in values else None
        first = self.value(args[0]) if args else None
        if first is None:
            return None
        if name in _SAME:
            return first
        if name in ("all", "any"):
            return bool(first) if args[0].numel() else name == "all"
        if name == "sum":
            return first * (args[0].numel() // max(out.numel(), 1))
        if name in ("bitwise_not", "logical_not"):
            return (not first) if args[0].dtype == torch.bool else ~first
        other = args[1] if len(args) > 1 else kwargs.get("other")
        other_value = self.value(other) if isinstance(other, torch.Tensor) else other
        if other_value is None or not isinstance(other_value, (int, float, bool)):
            return None
        if name in _COMPARE:
            return _COMPARE[name](first, other_value)
        if name in _ARITH:
            alpha = kwargs.get("alpha", args[2] if len(args) > 2 else 1)
            if name in ("add", "sub") and isinstance(alpha, (int, float)):
                other_value = other_value * alpha
            return _ARITH[name](first, other_value)
        return None


def _storage_key(t: Any) -> int | None:
    try:
        return int(t.untyped_storage()._cdata)
    except (RuntimeError, NotImplementedError):
        return None


_WRITES: dict[Any, tuple[tuple[int, str], ...]] = {}


def _written(func: Any, args: Any, kwargs: Any) -> list[Any]:
    """The tensors an op writes into (its schema's mutable arguments)."""
    places = _WRITES.get(func)
    if places is None:
        places = _WRITES[func] = tuple(
            (i, arg.name) for i, arg in enumerate(func._schema.arguments)
            if arg.alias_info is not None and arg.alias_info.is_write)
    out = []
    for i, name in places:
        value = args[i] if i < len(args) else kwargs.get(name)
        if isinstance(value, torch.Tensor):
            out.append(value)
    return out


def _cast(value: Any, dtype: Any) -> Any:
    if dtype == torch.bool:
        return bool(value)
    if dtype.is_floating_point:
        return float(value)
    return int(value)


# -- running it on stand-in weights

class GenerateLoop(nn.Module):
    """The generate loop around a model: ``forward(fn)`` runs ``fn()``, so one
    ``functional_call`` swaps the model's weights for stand-ins for the whole loop (its
    prefill, steps, cache creation and ``make_cache``) and nothing is assigned to the model."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, fn: Callable[[], Any]) -> Any:
        return fn()


def with_weights(model: nn.Module, state: dict[str, Any], fn: Callable[[], Any],
                 loop: GenerateLoop | None = None) -> Any:
    """``fn()`` with the model's parameters and buffers replaced by ``state`` (by name; tied
    names share one tensor). ``loop``: the wrapper to call (a caller that watches modules
    makes it first, to know it)."""
    loop = loop if loop is not None else GenerateLoop(model)
    return torch.func.functional_call(loop, {f"model.{k}": v for k, v in state.items()}, (fn,),
                                      tie_weights=True, strict=False)


def meta_state(model: nn.Module, dtype: Any = None) -> dict[str, Any]:
    """Meta stand-ins for the model's parameters and buffers, floating ones in ``dtype`` (a
    torch dtype; None: as they are): the weights a priced generate runs on."""
    state: dict[str, Any] = {}
    seen: dict[int, Any] = {}
    for table in (model.named_parameters(remove_duplicate=False),
                  model.named_buffers(remove_duplicate=False)):
        for name, t in table:
            if t is None:
                continue
            made = seen.get(id(t))
            if made is None:
                dt = dtype if dtype is not None and t.is_floating_point() else t.dtype
                made = seen[id(t)] = torch.empty_strided(tuple(t.shape), tuple(t.stride()),
                                                         dtype=dt, device="meta")
            state[name] = made
    return state


# -- a decoder's KV bytes per token (summary)

@dataclass(frozen=True)
class KvPerToken:
    """Bytes the KV cache of one sequence holds per token, read from the cache's tensors."""

    decoded: int  # per token of the sequence (self-attention)
    prompt: int = 0  # an encoder-decoder: per prompt token (cross-attention)

    def to_dict(self) -> dict[str, int]:
        return {"per_token": self.decoded, "per_prompt_token": self.prompt}


def kv_per_token(case: Any, dtype: Any = None, cache: CacheKind = CacheKind.dynamic,
                 decoder: Decoder | None = None) -> KvPerToken | None:
    """A cached decoder's KV bytes per token: the cache after a one-token prompt and one
    decode step (two positions, in the tensors a step leaves: a prefill's cache can be a view
    of a larger projection), on meta, floating weights in ``dtype`` (else the model's own);
    None for anything else (no token input, no cache, a forward that fails on meta).
    ``decoder``: the case's, where it was found with options (a custom model's --cache-arg)."""
    from torchinspect.trace.engine import forward_mode

    try:
        decoder = decoder or find_decoder(case)
    except InspectError:
        return None
    gen = Generation(decoder, 1, 1, 2, cache=cache)

    def run() -> None:
        gen.prefill()
        gen.step()

    try:
        with warnings.catch_warnings(), forward_mode(decoder.model, False), torch.no_grad():
            warnings.simplefilter("ignore")
            with_weights(decoder.model, meta_state(decoder.model, dtype), run)
    except Exception:  # noqa: BLE001 - a figure of a summary, never its failure
        return None
    state = gen.state
    positions = 3 if CacheKind(cache) is CacheKind.static else 2  # static: prompt + new
    if decoder.kind is DecoderKind.seq2seq and hasattr(state, "cross_attention_cache"):
        return KvPerToken(_nbytes(unique_tensors(state.self_attention_cache)) // positions,
                          _nbytes(unique_tensors(state.cross_attention_cache)))
    return KvPerToken(_nbytes(unique_tensors(state)) // positions)


def _nbytes(tensors: list[Any]) -> int:
    return storage_bytes(tensors)


def storage_bytes(tensors: list[Any]) -> int:
    """Bytes of the storages behind ``tensors`` (a view keeps all of its storage)."""
    return sum(int(t.untyped_storage().nbytes()) for t in tensors)


# -- what a CUDA graph cannot capture

SYNC_OPS = frozenset({"_local_scalar_dense", "item", "is_nonzero", "nonzero", "equal", "unique",
                      "_unique2", "unique_consecutive", "masked_select"})
CREATE_ON_DEVICE = frozenset({"tensor", "as_tensor", "asarray"})


class HostRead(RuntimeError):
    """An op read a device value on the host (raised on meta, where there is no value)."""

    def __init__(self, op: str) -> None:
        super().__init__(f"the step reads a device value on the host ({op})")
        self.op = op


class _Dispatch(QuietDispatchMode):

    def __init__(self, check: CaptureCheck) -> None:
        super().__init__()
        self.check = check

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in SYNC_OPS:
            self.check.reasons.append(f"reads a device value on the host (aten::{name})")
            raise HostRead(f"aten::{name}")
        if name in ("_to_copy", "copy_", "_copy_from") and self.check.active:
            src = args[1] if name == "copy_" and len(args) > 1 else (args[0] if args else None)
            if isinstance(src, torch.Tensor) and src.device.type == "cpu" and src.dim() > 0:
                self.check.reasons.append(f"copies a CPU tensor to the GPU (aten::{name})")
        return func(*args, **kwargs)


class _Functions(TorchFunctionMode):
    def __init__(self, check: CaptureCheck) -> None:
        super().__init__()
        self.check = check

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if self.check.active and name in CREATE_ON_DEVICE and getattr(func, "__module__", "") \
                in ("torch", None):
            device = kwargs.get("device")
            if device is not None and torch.device(device).type not in ("cpu",):
                self.check.reasons.append(f"copies host data to the GPU (torch.{name}(..., "
                                          "device=...))")
        return func(*args, **kwargs)


@dataclass
class CaptureCheck:
    """``with CaptureCheck(gen) as check: gen.step()`` -> ``check.reasons``: why a CUDA graph
    could not capture that step (empty: it could). A host read ends the step (`HostRead`,
    caught here); one `KnownValues` answered during the step is a host read too."""

    gen: Generation | None = None
    reasons: list[str] = field(default_factory=list)
    active: bool = True
    _modes: list[Any] = field(default_factory=list)
    _reads: int = 0

    def __enter__(self) -> CaptureCheck:
        self._reads = len(self.gen.values.reads) if self.gen is not None else 0
        self._modes = [_Functions(self), _Dispatch(self)]
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        for mode in reversed(self._modes):
            mode.__exit__(None, None, None)
        if self.gen is not None:
            self.reasons += [f"reads a device value on the host ({op})"
                             for op in self.gen.values.reads[self._reads:]]
        if isinstance(exc, HostRead) and not any(exc.op in r for r in self.reasons):
            self.reasons.append(f"reads a device value on the host ({exc.op})")
        return isinstance(exc, HostRead)

    @property
    def capturable(self) -> bool:
        return not self.reasons

    def reason(self) -> str:
        return "; ".join(dict.fromkeys(self.reasons))


