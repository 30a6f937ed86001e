"""Sizes that explode (issue 29, item 10): exit 2 with one line, before anything is allocated
or a long simulation starts."""

from __future__ import annotations

import pytest


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
