"""The closed vocabularies of ``inspect bench`` (torch-free, so the CLI declares its choices
from them at start-up): how to compile, what to do after an out-of-memory batch, and what
became of one configuration."""

from __future__ import annotations

from enum import StrEnum


class CompileMode(StrEnum):
    """``torch.compile``'s modes (``--compile-mode``)."""

    default = "default"
    reduce_overhead = "reduce-overhead"
    max_autotune = "max-autotune"
    max_autotune_no_cudagraphs = "max-autotune-no-cudagraphs"


class OnOom(StrEnum):
    """After an out-of-memory batch (``--on-oom``): skip the larger batches, or try them."""

    skip = "skip"
    try_ = "try"


class Status(StrEnum):
    """What became of one configuration (dtype, batch): the JSON's ``status``."""

    ok = "ok"
    oom = "oom"
    skipped = "skipped"
    error = "error"
