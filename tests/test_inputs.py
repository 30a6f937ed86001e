"""The --input grammar: parsing, the batch rule, round trips, and clean errors."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from torchinspect.errors import InspectError
from torchinspect.inputs import (
    DTYPE_ALIASES,
    ExampleInputs,
    TensorSpec,
    parse_inputs,
    parse_spec,
    rebatch,
)

IMAGE = ExampleInputs((TensorSpec((1, 3, 224, 224)),))
TOKENS = ExampleInputs((TensorSpec((1, 128), "int64", high=1000),))
DETECTION = ExampleInputs(([TensorSpec((3, 800, 800))],))


def test_sample_shape_gets_batch_prepended():
    ex = parse_inputs(["3,224,224"], default=IMAGE)
    assert ex.args == (TensorSpec((1, 3, 224, 224)),)


def test_full_rank_shape_is_used_as_is_and_batch_replaces_dim0():
    assert parse_inputs(["2,3,64,64"], default=IMAGE).args[0].shape == (2, 3, 64, 64)
    assert parse_inputs(["2,3,64,64"], batch=5, default=IMAGE).args[0].shape == (5, 3, 64, 64)


def test_unknown_rank_prepends_batch():
    assert parse_inputs(["3,32,32"]).args[0].shape == (1, 3, 32, 32)
    assert parse_inputs(["3,32,32"], batch=4).args[0].shape == (4, 3, 32, 32)


def test_no_batch_keeps_shape():
    assert parse_inputs(["3,32,32"], no_batch=True, default=IMAGE).args[0].shape == (3, 32, 32)


def test_token_input_inherits_dtype_and_range_from_default():
    spec = parse_inputs(["1,2048"], default=TOKENS).args[0]
    assert spec.shape == (1, 2048) and spec.dtype == "int64" and spec.high == 1000
    spec = parse_inputs(["long:2048"], default=TOKENS).args[0]
    assert spec.shape == (1, 2048)


def test_dtype_and_named_inputs():
    ex = parse_inputs(["long:1,128", "mask=bool:1,128"])
    assert ex.args[0] == TensorSpec((1, 1, 128), "int64")
    assert ex.kwargs["mask"].dtype == "bool"
    assert ex.kwargs["mask"].name == "mask"


def test_detection_list_input():
    ex = parse_inputs(["3,512,512"], batch=2, default=DETECTION)
    assert ex.args[0] == [TensorSpec((3, 512, 512))] * 2


def test_default_used_without_specs_and_rebatched():
    assert parse_inputs(None, default=IMAGE) is IMAGE
    assert parse_inputs(None, batch=8, default=IMAGE).args[0].shape == (8, 3, 224, 224)
    assert rebatch(DETECTION, 3).args[0] == [TensorSpec((3, 800, 800))] * 3


def test_materialize_meta_and_cpu():
    import torch

    args, kwargs = parse_inputs(["3,8,8", "ids=long:1,4"]).materialize("meta")
    assert args[0].is_meta and args[0].shape == (1, 3, 8, 8)
    assert kwargs["ids"].dtype == torch.int64
    real, _ = TOKENS.materialize("cpu")
    assert real[0].max() < 1000 and real[0].dtype == torch.int64
    again, _ = TOKENS.materialize("cpu")
    assert torch.equal(real[0], again[0])  # deterministic


@pytest.mark.parametrize(
    "bad",
    ["", "3,,224", "3,-1,224", "0,3", "float99:3,4", "3,a,4", "1=3,4", "1,2,3,4,5,6,7,8,9", "ids="],
)
def test_bad_specs_raise_with_grammar_hint(bad):
    with pytest.raises(InspectError) as err:
        parse_inputs([bad])
    assert "--input" in err.value.message
    assert "e.g." in (err.value.hint or "")


def test_duplicate_keyword_and_positional_after_named():
    with pytest.raises(InspectError):
        parse_inputs(["x=3,4", "x=3,4"])
    with pytest.raises(InspectError):
        parse_inputs(["x=3,4", "3,4"])


def test_bad_batch():
    with pytest.raises(InspectError):
        parse_inputs(["3,4"], batch=0)


# shapes a tensor can have: fewer than 2**63 elements (larger ones are refused, tested below)
dims = st.lists(st.integers(min_value=1, max_value=4096), min_size=1, max_size=6).filter(
    lambda d: math.prod(d) < 2**63)
dtypes = st.sampled_from(sorted(set(DTYPE_ALIASES.values())))
names = st.one_of(st.none(), st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True))


@given(dims=dims, dtype=dtypes, name=names)
def test_spec_round_trips_through_text(dims, dtype, name):
    spec = TensorSpec(tuple(dims), dtype, name)
    assert parse_spec(str(spec)) == spec


@given(dims=dims, sep=st.sampled_from([",", "x", ", "]))
def test_separators_are_equivalent(dims, sep):
    assert parse_spec(sep.join(map(str, dims))).shape == tuple(dims)


def test_shapes_no_tensor_can_hold_are_refused():
    with pytest.raises(InspectError, match="more than any tensor can hold"):
        parse_spec("3,99999999999999999999999,1")
    with pytest.raises(InspectError, match="below 2\\*\\*63"):
        parse_inputs(["3,8,8"], batch=2**63)


def test_describe_names_keyword_inputs_once():
    ex = parse_inputs(["3,8,8", "ids=long:4"])
    assert ex.describe() == "1,3,8,8 ids=int64:1,4"
    nested = ExampleInputs((TensorSpec((1, 2)),), {"extra": {"a": TensorSpec((1, 3))}})
    assert nested.describe() == "1,2 extra={a: 1,3}"


def test_written_dtype_wins_over_the_default():
    assert parse_inputs(["float:1,16"], default=TOKENS).args[0].dtype == "float32"
    assert parse_inputs(["1,16"], default=TOKENS).args[0].dtype == "int64"
    half = ExampleInputs((TensorSpec((1, 3, 8, 8), "float16"),))
    assert parse_inputs(["3,8,8"], default=half).args[0].dtype == "float16"
