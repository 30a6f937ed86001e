"""dtypes.py: the one table of dtype names, checked against torch itself."""

from __future__ import annotations

import pytest
import torch

from torchinspect.bench.run import parse_dtype
from torchinspect.dtypes import ALIASES, SHORT, SIZES, short_name
from torchinspect.errors import InspectError
from torchinspect.inputs import TensorSpec


def test_sizes_are_torchs_element_sizes() -> None:
    for name, size in SIZES.items():
        dtype = getattr(torch, name, None)
        if dtype is not None:  # a few quantized/float8 names are missing on some builds
            assert dtype.itemsize == size, name


def test_every_word_names_a_sized_dtype_and_input_specs_use_it() -> None:
    for word, name in ALIASES.items():
        assert name in SIZES
        assert TensorSpec((2, 3), name).itemsize == getattr(torch, name).itemsize
        assert (short_name(word) is None) == (name not in SHORT.values())


@pytest.mark.parametrize("word,short", [("half", "fp16"), ("float16", "fp16"), ("BF16", "bf16"),
                                        ("float", "fp32"), ("fp32", "fp32")])
def test_bench_dtype_words(word: str, short: str) -> None:
    assert parse_dtype(word) == short


def test_bench_refuses_a_non_float_dtype() -> None:
    with pytest.raises(InspectError, match="int8"):
        parse_dtype("int8")


def test_short_names_cover_fp64_and_name_torch_dtypes() -> None:
    """One short-name table (the memory/ copies are gone): fp64 has its name, a run is still
    cast only to fp32, fp16 or bf16."""
    from torchinspect.dtypes import RUN, short_of

    assert short_name("double") == "fp64" and SHORT["fp64"] == "float64"
    assert [short_of(getattr(torch, SHORT[s])) for s in SHORT] == list(SHORT)
    assert short_of(torch.int64) == "int64" and short_of("torch.bfloat16") == "bf16"
    assert set(RUN) == set(SHORT) - {"fp64"}
    with pytest.raises(InspectError, match="fp64"):
        parse_dtype("fp64")
