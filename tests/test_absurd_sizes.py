"""Sizes that explode (issue 29, item 10): exit 2 with one line, before anything is allocated
or a long simulation starts."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


def _one_error(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert len([ln for ln in result.output.splitlines() if ln.startswith("error:")]) == 1, result.output
    for n in needles:
        assert n in result.output, result.output


@pytest.mark.parametrize("args", [
    ["summary", "resnet18", "--input", "1,999999999999,999999"],
    ["summary", "resnet18", "--batch", "1e26"],
    ["summary", "resnet18", "--batch", "99999999999999999999999999"],
    ["memory", "resnet18", "--fsdp", "1e20"],
    ["memory", "resnet18", "--fsdp", "99999999999999999999999"],
    ["memory", "resnet18", "--fsdp", "100000"],
], ids=lambda a: " ".join(a[2:]))
def test_absurd_sizes_are_exit_2(invoke, args) -> None:
    _one_error(invoke(*args))


def test_the_real_cpu_fallback_says_what_it_would_allocate_and_refuses(invoke) -> None:
    """The meta forward fails (a shape error); the CPU fallback would hold a 144 MB input and
    its activations: refused, naming the sizes, instead of allocating GBs."""
    r = invoke("summary", "zoo:mnist-net", "--input", "1,1,6000,6000", "--no-batch")
    _one_error(r, "inputs 144.00 MB", "refused", "--device cpu")


def test_a_small_fallback_still_runs_and_says_so() -> None:
    import torch

    from torchinspect.inputs import ExampleInputs, TensorSpec
    from torchinspect.trace.policy import trace_model

    class NeedsValues(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2 if x.sum().item() > -1e9 else x  # a value: meta cannot, the CPU can

    t = trace_model(NeedsValues(), ExampleInputs((TensorSpec((1, 4)),)))
    assert t.fallback_reason and "item()" in t.fallback_reason
    assert any("ran for real on the CPU instead, allocating weights 0 B + inputs 16 B" in n
               for n in t.notes), t.notes


@pytest.mark.parametrize("shape", [(0, 2**63), (0, 2**62, 4)])
def test_every_reader_refuses_an_empty_tensor_of_impossible_shape(tmp_path, invoke, shape) -> None:
    """diff accepted a zip tensor of shape [0, 2**63] that convert and summary refused."""
    import collections

    import torch

    class Forged:
        def __reduce__(self):  # noqa: ANN204 - a forged tensor record
            return (torch._utils._rebuild_tensor_v2,
                    (torch.empty(0).untyped_storage(), 0, shape, (1,) * len(shape), False,
                     collections.OrderedDict()))

    path = tmp_path / "forged.pt"
    torch.save({"w": Forged(), "b": torch.zeros(2)}, path)
    for args in (["diff", path, path], ["convert", path, tmp_path / "o.safetensors"], ["params", path]):
        _one_error(invoke(*args), "invalid shape")


# ------------------------------------------------------------------ every number bounded (issue 38, item 4)



@pytest.mark.parametrize("args", [
    ["bench", "zoo:mnist-net", "--warmup", "inf"],  # never ended
    ["bench", "zoo:mnist-net", "--warmup", "nan"],
    ["bench", "zoo:mnist-net", "--max-time", "1e300"],
    ["bench", "zoo:mnist-net", "--min-iters", "100000000000000"],
    ["bench", "zoo:mnist-net", "--threads", "100000"],  # exit 1 and a raw libgomp line
    ["bench", "zoo:mnist-net", "--predict", "h100", "--batch", "1e23"],
    ["bench", "zoo:mnist-net", "--predict", "h100", "--batch", "100000000000000000000000"],
    ["memory", "zoo:mnist-net", "--batch", "1e26"],
    ["memory", "zoo:mnist-net", "--batch", "99999999999999999999999999"],
    ["memory", "zoo:mnist-net", "--input", "1,999999999999,999999"],  # exit 70
    ["memory", "zoo:mnist-net", "--fit", "1e400"],
    ["features", "zoo:mnist-net", ".", "-l", "fc1", "--batch-size", "1000000000000"],  # 80 s
    ["features", "zoo:mnist-net", ".", "-l", "fc1", "--workers", "100000"],
    ["features", "zoo:mnist-net", ".", "-l", "fc1", "--resize", "10000000"],
    ["features", "zoo:mnist-net", ".", "-l", "fc1", "--max-image-size", "1e999GB"],
    ["convert", "a.pt", "b.safetensors", "--shard-size", "1e999GB"],
    ["summary", "zoo:mnist-net", "--batch", "3000000000"],
    ["summary", "zoo:mnist-net", "--depth", "99999999999999999999"],
    ["report", "zoo:mnist-net", "--bench-seconds", "inf"],
    ["diff", "a.pt", "b.pt", "--atol", "nan"],
    ["export", "zoo:mnist-net", "--opset", "100000"],
], ids=lambda a: " ".join(a[2:]) if isinstance(a, list) else a)
def test_unbounded_numbers_are_one_line_exit_2(invoke, args) -> None:
    _one_error(invoke(*args))


def test_every_number_option_of_every_command_has_a_bound() -> None:
    """A new number option must say how large it can be (cli/options.py NUMBER_BOUNDS)."""
    from typer.main import get_command

    from torchinspect.cli.app import app
    from torchinspect.cli.command import _number_kind
    from torchinspect.cli.options import NUMBER_BOUNDS

    missing = [f"{name} {p.opts}" for name, cmd in get_command(app).commands.items()
               for p in cmd.params if p.param_type_name == "option" and not p.is_flag
               and _number_kind(p) is not None and not set(p.opts) & set(NUMBER_BOUNDS)]
    assert not missing


#: (command, option) pairs the fuzz parses, numbers in every form a shell can give
_NUMBER_OPTIONS = [("bench", "--warmup"), ("bench", "--threads"), ("bench", "--min-iters"),
                   ("bench", "--target"), ("bench", "--batch"), ("summary", "--batch"),
                   ("summary", "--depth"), ("memory", "--batch"), ("memory", "--top"),
                   ("memory", "--fit"), ("features", "--batch"), ("features", "--workers"),
                   ("report", "--bench-seconds"), ("diff", "--atol"), ("export", "--opset")]
_NUMBER_TEXT = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["inf", "-inf", "nan", "1e999", "0x10", "1_000", " 7", "", "1,2,3",
                     "99999999999999999999999999", "1e23", "0", "-0", "2147483648"]),
    st.text(max_size=8))


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(which=st.sampled_from(_NUMBER_OPTIONS), text=_NUMBER_TEXT)
def test_fuzz_number_options_parse_or_refuse_in_one_line(which, text) -> None:
    """Any text for a number option: the command line parses into bounded finite values, or
    it is a usage error (one line, exit 2); never another exception."""
    import math

    import typer
    from typer.main import get_command

    from torchinspect.arguments import MAX_BATCH, parse_batches
    from torchinspect.cli.app import app
    from torchinspect.errors import InspectError
    from torchinspect.io.writers import parse_size

    usage = {c.__name__: c for c in typer.BadParameter.__mro__}["UsageError"]
    command, option = which
    cmd = get_command(app).commands[command]
    head = {"features": ["zoo:mnist-net", ".", "-l", "fc1"], "diff": ["a.pt", "b.pt"]}.get(
        command, ["zoo:mnist-net"])
    try:
        ctx = cmd.make_context(command, [*head, option, text])
    except usage:
        return
    from torchinspect.cli.options import NUMBER_BOUNDS

    for value in ctx.params.values():
        if isinstance(value, float) and not isinstance(NUMBER_BOUNDS.get(option), str):
            assert math.isfinite(value), (option, text, value)
    if option == "--batch" and command in ("bench", "memory"):  # a list, parsed by the core
        try:
            assert all(1 <= b <= MAX_BATCH for b in parse_batches(text) or ())
        except InspectError:
            pass
    if option == "--fit":
        try:
            assert 1 <= parse_size(text, "--fit") <= 2**50
        except InspectError:
            pass


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(spec=st.one_of(st.text(alphabet="0123456789,x:()[] longfbool=", max_size=40),
                      st.lists(st.integers(min_value=1, max_value=10**20), min_size=1,
                               max_size=9).map(lambda d: ",".join(map(str, d)))),
       batch=st.one_of(st.none(), st.integers(min_value=-5, max_value=10**20)))
def test_fuzz_input_specs_parse_within_bounds_or_refuse(spec, batch) -> None:
    from torchinspect.arguments import MAX_TENSOR_BYTES
    from torchinspect.dtypes import SIZES
    from torchinspect.errors import InspectError
    from torchinspect.inputs import parse_inputs

    try:
        example = parse_inputs([spec], batch=batch)
    except InspectError:
        return
    for s in example.specs():
        n = 1
        for d in s.shape:
            n *= d
        assert n * SIZES.get(s.dtype, 8) <= MAX_TENSOR_BYTES


# ------------------------------------------------------------------ the fake run's failures


def test_a_fake_run_the_input_breaks_is_the_inputs_error_as_in_summary(invoke) -> None:
    """``memory`` called every failure of its fake run an internal error (exit 70) where
    summary says the input is wrong (exit 2)."""
    args = ["zoo:mnist-net", "--input", "bool:1,1,28,28", "--no-batch"]
    mem, summ = invoke("memory", *args), invoke("summary", *args)
    _one_error(mem, "the model's forward failed for input bool:1,1,28,28")
    assert mem.stderr.splitlines()[0] == summ.stderr.splitlines()[0]


def test_a_fake_run_the_models_code_breaks_is_the_models(invoke, tmp_path) -> None:
    model = tmp_path / "raises.py"
    model.write_text("import torch\nfrom torch import nn\n\nclass Net(nn.Module):\n"
                     "    example_input = '1,4'\n\n    def __init__(self):\n        super().__init__()\n"
                     "        self.fc = nn.Linear(4, 4)\n\n    def forward(self, x):\n"
                     "        if x.is_meta or type(x).__name__ == 'FakeTensor':\n"
                     "            raise ValueError('no fakes here')\n        return self.fc(x)\n")
    r = invoke("memory", f"{model}:Net")
    assert r.exit_code == 70, r.output
    assert "the model's code raised ValueError: no fakes here" in r.output
    assert "internal error" not in r.output


def test_a_fake_run_only_ours_breaks_is_ours(invoke, monkeypatch) -> None:
    import functools
    import operator

    from torchinspect.memory import predict

    # raised from C called by our code (no frame of this test file: that would be "a model's")
    monkeypatch.setattr(predict, "_run", functools.partial(operator.truediv))
    r = invoke("memory", "zoo:mnist-net")
    assert r.exit_code == 70, r.output
    assert "the inference run on fake tensors failed: TypeError: truediv" in r.output
    assert "report" in r.output and "the model's code" not in r.output


def test_a_saved_bench_result_with_odd_shapes_is_exit_2(invoke, tmp_path) -> None:
    """A --compare JSON whose ``environment`` was a list ended with exit 70."""
    doc = {"schema": "torchinspect/bench/v1", "model": "m", "configs": [], "environment": [1, 2]}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    good = tmp_path / "good.json"
    good.write_text(json.dumps({**doc, "environment": {"torch": "2"}}))
    _one_error(invoke("bench", good, "--compare", bad), "environment is a list, not an object")
    for env in ({"torch": [1]}, {"torch": {"x": 1}}):
        bad.write_text(json.dumps({**doc, "environment": env}))
        _one_error(invoke("bench", bad, "--compare", good), "environment.torch")
    bad.write_text(json.dumps({**doc, "environment": {"torch": "2"}, "flags": "x"}))
    _one_error(invoke("bench", bad, "--compare", good), "flags is a str, not an object")


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                     lambda kids: st.lists(kids, max_size=4)
                     | st.dictionaries(st.text(max_size=8), kids, max_size=4), max_leaves=16)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(extra=st.dictionaries(st.sampled_from(["environment", "flags", "model", "inputs", "device",
                                              "configs", "schema"]), _JSON, max_size=4))
def test_fuzz_saved_bench_results_load_or_refuse_in_one_line(tmp_path_factory, extra) -> None:
    """Any shape a saved bench result may take: compared, or one InspectError; never another
    exception (an ``environment`` list was an AttributeError, exit 70)."""
    from torchinspect.bench.compare import load_bench_json, setup_differences
    from torchinspect.errors import InspectError

    base = {"schema": "torchinspect/bench/v1", "model": "m", "configs": [],
            "environment": {"torch": "2"}}
    path = tmp_path_factory.mktemp("b") / "r.json"
    path.write_text(json.dumps({**base, **extra}, allow_nan=True))
    try:
        data = load_bench_json(str(path))
    except InspectError:
        return
    assert isinstance(setup_differences(data, data), list)
