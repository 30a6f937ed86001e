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


# ---------------------------------------------------------------- one rule for every source
# The model's own example gives each input's rank and dtype: a spec of that rank is used as
# is, one dimension fewer gets the batch, a spec without a dtype takes the example's, and any
# other rank is an error naming the expected one. Checked through make_case for each kind
# of source (no forward).

TINY_LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
              "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
              "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 1024}


def _case_inputs(model: str, *specs: str, **options: object) -> object:
    from torchinspect.sources.case import ModelOptions, make_case

    case = make_case(model, options=ModelOptions(inputs=list(specs), **options))  # type: ignore[arg-type]
    return case.example


def _only(example: object) -> TensorSpec:
    specs = example.specs()  # type: ignore[attr-defined]
    assert len(specs) == 1
    return specs[0]


def _llama_folder(tmp_path, cfg: dict | None = None):
    import json

    folder = tmp_path / "tiny-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg or TINY_LLAMA))
    return folder


def _image_cases(tmp_path) -> list[str]:
    net = tmp_path / "net.py"
    net.write_text("from torch import nn\nEXAMPLE_INPUT = '1,3,32,32'\n"
                   "class Net(nn.Sequential):\n"
                   "    def __init__(self):\n"
                   "        super().__init__(nn.Conv2d(3, 8, 3), nn.Flatten())\n")
    return ["resnet18", "zoo:convnet", f"{net}:Net"]


def test_image_sources_share_the_rank_rule(tmp_path):
    for model in _image_cases(tmp_path):
        assert _only(_case_inputs(model, "3,64,64")).shape == (1, 3, 64, 64), model
        assert _only(_case_inputs(model, "2,3,64,64")).shape == (2, 3, 64, 64), model
        assert _only(_case_inputs(model, "3,64,64", batch=4)).shape == (4, 3, 64, 64), model
        with pytest.raises(InspectError, match="rank 4") as err:
            _case_inputs(model, "64,64")
        assert "--no-batch" in (err.value.hint or "")


def test_timm_source_shares_the_rank_rule():
    pytest.importorskip("timm")
    assert _only(_case_inputs("timm:resnet18", "3,64,64")).shape == (1, 3, 64, 64)
    assert _only(_case_inputs("timm:resnet18", "1,3,64,64")).shape == (1, 3, 64, 64)
    with pytest.raises(InspectError, match="rank 4"):
        _case_inputs("timm:resnet18", "1,1,3,64,64")


@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning",
                            "ignore::DeprecationWarning")
def test_token_sources_take_full_rank_specs_as_written(tmp_path):
    pytest.importorskip("transformers")
    folder = str(_llama_folder(tmp_path))
    for model in ("zoo:llama-tiny", folder, "hf:llama", "hf:bert"):
        for spec in ("long:1,512", "long:512", "512", "1,512"):
            got = _only(_case_inputs(model, spec))
            assert (got.shape, got.dtype) == ((1, 512), "int64"), (model, spec)
        assert _only(_case_inputs(model, "long:2,512")).shape == (2, 512)
        with pytest.raises(InspectError, match="rank 2"):
            _case_inputs(model, "long:1,1,512")


@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning",
                            "ignore::DeprecationWarning")
def test_token_ids_written_as_floats_get_a_long_hint_and_an_uncut_message(tmp_path, invoke):
    pytest.importorskip("transformers")
    r = invoke("flops", str(_llama_folder(tmp_path)), "--input", "float:1,512")
    assert r.exit_code != 0
    assert "--input long:" in r.output
    message = r.output.split("error: ", 1)[1].splitlines()[0]
    assert message.endswith("(while checking arguments for embedding)")


def _llama_macs(cfg: dict, tokens: int) -> int:
    """By hand: q/k/v/o projections, the gated MLP and lm_head per token, plus attention's
    QKᵀ and AV (tokens x tokens x head_dim per head, dense)."""
    h, inter, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = h // heads
    per_token = layers * (h * h * 2 + 2 * h * kv * head_dim + 3 * h * inter) + h * cfg["vocab_size"]
    attention = layers * 2 * heads * tokens * tokens * head_dim
    return tokens * per_token + attention


@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning",
                            "ignore::DeprecationWarning")
def test_hf_folder_token_macs_match_the_config(tmp_path, invoke):
    pytest.importorskip("transformers")
    import json

    folder = _llama_folder(tmp_path)
    expected = _llama_macs(TINY_LLAMA, 512)
    for spec in ("long:1,512", "long:512", "512"):
        r = invoke("flops", str(folder), "--input", spec, "--depth", "0", "-f", "json")
        assert r.exit_code == 0, r.output
        d = json.loads(r.output)
        assert d["input"] == "input_ids=int64:1,512"
        assert d["totals"]["macs"] == expected


@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning",
                            "ignore::DeprecationWarning")
def test_bert_token_input_of_full_rank_runs(invoke):
    pytest.importorskip("transformers")
    r = invoke("flops", "hf:bert", "--arg", "num_hidden_layers=1", "--input", "long:1,64",
               "--depth", "0")
    assert r.exit_code == 0, r.output
    assert "int64:1,64" in r.output


def test_rank_that_cannot_fit_names_the_expected_rank():
    with pytest.raises(InspectError, match="rank 2") as err:
        parse_inputs(["long:1,1,512"], default=TOKENS)
    assert "1,1,512" in err.value.message
    with pytest.raises(InspectError, match="rank 4"):
        parse_inputs(["3,1,2,3,4"], batch=None, default=DETECTION)


def test_keyword_only_example_takes_positional_specs_by_name():
    ex = ExampleInputs((), {"input_ids": TensorSpec((1, 128), "int64", high=9),
                            "decoder_input_ids": TensorSpec((1, 128), "int64", high=9)})
    got = parse_inputs(["64", "long:1,32"], default=ex)
    assert got.args == ()
    assert got.kwargs["input_ids"].shape == (1, 64)
    assert got.kwargs["decoder_input_ids"].shape == (1, 32)
    assert got.kwargs["input_ids"].dtype == "int64"
