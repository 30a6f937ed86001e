"""Models in the wild, without third-party model libraries: lazy modules, RNN kernels on every
backend, the caller's model never mutated, every input form of the Python API."""

from __future__ import annotations

from collections import namedtuple

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import torchinspect as ti
from torchinspect.errors import InspectError
from torchinspect.trace import trace_model
from torchinspect.trace.counting import grouped_mm_meta
from torchinspect.trace.formulas import _fused_rnn_macs, _grouped_mm_macs


def flop_counter_macs(model: nn.Module, *args: object, **kwargs: object) -> int:
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        model(*args, **kwargs)
    return fc.get_total_flops() // 2


# ------------------------------------------------------------------ lazy modules


def lazy_net() -> nn.Module:
    return nn.Sequential(nn.LazyConv2d(8, 3), nn.ReLU(), nn.Flatten(), nn.LazyLinear(10))


def test_lazy_modules_are_sized_from_the_example_on_a_copy() -> None:
    model = lazy_net()
    s = ti.summarize(model, torch.randn(2, 3, 8, 8))
    real = lazy_net()
    real(torch.randn(2, 3, 8, 8))  # what the first forward does
    assert s.totals.params == sum(p.numel() for p in real.parameters()) == 8 * 27 + 8 + 288 * 10 + 10
    assert s.totals.macs == flop_counter_macs(real, torch.randn(2, 3, 8, 8))
    assert any("lazy parameters" in n for n in s.notes)
    assert torch.nn.parameter.is_lazy(model[0].weight)  # the caller's modules are still lazy
    assert type(model[3]).__name__ == "LazyLinear"


def test_count_params_of_an_unmaterialized_lazy_module_says_so() -> None:
    r = ti.count_params(nn.Sequential(nn.LazyLinear(10), nn.Linear(10, 3)))
    assert r.total == 33 and r.stats.lazy == ["0.weight", "0.bias"]
    assert "not materialized" in r.notes[-1]


def test_lazy_module_with_a_wrong_input_is_one_line() -> None:
    with pytest.raises(InspectError, match=r"lazy modules .* could not be materialized with input \[2, 3\]"):
        ti.summarize(lazy_net(), torch.randn(2, 3))


# ------------------------------------------------------------------ RNN kernels


class LSTMNet(nn.Module):  # torchinfo's LSTMNet
    def __init__(self, vocab: int = 20, emb: int = 300, hidden: int = 512, layers: int = 2) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb)
        self.encoder = nn.LSTM(emb, hidden, num_layers=layers, batch_first=True)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.encoder(self.embedding(x))
        return self.decoder(out)


def rnn_formula(rnn: nn.RNNBase, tokens: int) -> int:
    """tokens x (W_ih + W_hh [+ W_hr]) summed over layers and directions."""
    return tokens * sum(p.numel() for n, p in rnn.named_parameters() if n.startswith("weight"))


def test_lstm_macs_agree_on_meta_and_cpu_and_match_the_formula() -> None:
    net = LSTMNet()
    x = torch.zeros(1, 100, dtype=torch.long)
    meta = ti.summarize(net, x, device="meta").totals.macs
    cpu = ti.summarize(net, x, device="cpu")
    expected = rnn_formula(net.encoder, 100) + 100 * 512 * 20
    assert meta == cpu.totals.macs == expected == 377_036_800
    assert "mkldnn_rnn_layer" not in cpu.not_counted


@pytest.mark.parametrize("kind", [nn.GRU, nn.RNN, nn.LSTM])
def test_bidirectional_rnns_agree_with_flop_counter_on_cpu(kind: type[nn.RNNBase]) -> None:
    rnn = kind(16, 32, num_layers=2, bidirectional=True)
    x = torch.randn(7, 3, 16)
    got = ti.count_flops(rnn, x, device="cpu").macs
    assert got == ti.count_flops(rnn, x, device="meta").macs == rnn_formula(rnn, 21)


def test_fused_kernel_formula_matches_the_meta_path_with_projections() -> None:
    # cuDNN/MIOpen get every layer's weights in one call: check the formula on the shapes
    # they receive against the meta path's matmuls (proj_size adds W_hr).
    rnn = nn.LSTM(16, 32, num_layers=2, bidirectional=True, proj_size=8)
    x = torch.randn(5, 2, 16)
    weights = [p for _, p in rnn.named_parameters()]
    assert _fused_rnn_macs((x, weights), {}, None) == rnn_formula(rnn, 10)
    assert ti.count_flops(rnn, x, device="meta").macs == rnn_formula(rnn, 10)


def test_grouped_mm_formula_and_meta_shape() -> None:
    tokens, k, n, groups = torch.empty(12, 16, device="meta"), 16, 24, 4
    experts = torch.empty(groups, k, n, device="meta")
    offs = torch.tensor([3, 6, 9, 12], dtype=torch.int32, device="meta")
    out = grouped_mm_meta((tokens, experts, offs), {})
    assert out.shape == (12, n)
    assert _grouped_mm_macs((tokens, experts, offs), {}, out) == 12 * k * n  # each row uses one expert
    batched = grouped_mm_meta((torch.empty(groups, 5, k, device="meta"), experts), {})
    assert batched.shape == (groups, 5, n)


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_bilinear_macs_follow_the_closed_form(device: str) -> None:
    """nn.Bilinear: y_k = x1ᵀ W_k x2 + b_k, out x in1 x in2 MACs per sample (torch's
    FlopCounterMode has no formula for aten._trilinear); leading dims flatten into samples."""
    n, extra, in1, in2, out = 3, 2, 5, 7, 4
    proj, bil = nn.Linear(6, in1), nn.Bilinear(in1, in2, out)
    x1, x2 = torch.randn(n, extra, 6), torch.randn(n, extra, in2)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj, self.bil = proj, bil

        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return self.bil(self.proj(a), b)

    s = ti.summarize(Net(), (x1, x2), device=device)
    assert s.trace.macs_by_op["_trilinear"] == n * extra * out * in1 * in2
    assert s.totals.macs == n * extra * (out * in1 * in2 + 6 * in1)


# ------------------------------------------------------------------ never mutate the model


class Anchors(nn.Module):
    """Like torchvision's AnchorGenerator: a plain list of tensors re-assigned in forward."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.cell_anchors = [torch.ones(4), torch.ones(4)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.cell_anchors = [a.to(x.device) for a in self.cell_anchors]
        self.cache = x  # a new attribute
        return self.fc(x) + self.cell_anchors[0]


def test_plain_list_attributes_are_restored_after_meta_and_cpu_runs() -> None:
    model = Anchors()
    before = list(model.cell_anchors)
    for device in ("meta", "cpu", "auto"):
        ti.summarize(model, torch.randn(1, 4), device=device)
        assert model.cell_anchors[0] is before[0] and not hasattr(model, "cache")
    model(torch.randn(1, 4))  # still runs


def test_failed_call_leaves_the_model_usable() -> None:
    model = Anchors()
    with pytest.raises(InspectError):
        ti.summarize(model, torch.randn(1, 5))
    assert model.cell_anchors[0].device.type == "cpu"
    assert model(torch.randn(1, 4)).shape == (1, 4)


def test_training_run_does_not_move_batch_norm_statistics() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    ti.summarize(model, torch.randn(2, 3, 8, 8), device="cpu", train=True)
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert model.training  # the caller's flag (train, as built) is kept


@pytest.mark.slow
def test_fasterrcnn_passed_by_the_user_still_runs_after_summarize() -> None:
    import torchvision  # a required dependency: a broken install fails, never skips
    model = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None, weights_backbone=None).eval()
    x = [torch.rand(3, 320, 320)]
    s = ti.summarize(model, (x,))
    assert s.device == "cpu" and s.fallback_reason
    assert any("input-dependent count" in n and "nonzero" in n for n in s.notes)
    assert {a.device.type for a in model.rpn.anchor_generator.cell_anchors} == {"cpu"}
    with torch.no_grad():
        model(x)


# ------------------------------------------------------------------ input forms


class KwNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.fc = nn.Linear(8, 2)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        h = self.emb(input_ids)
        if attention_mask is not None:
            h = h * attention_mask[..., None]
        return self.fc(h)


def test_dict_inputs_are_keyword_arguments_for_every_api() -> None:
    ids = torch.zeros(1, 6, dtype=torch.long)
    inputs = {"input_ids": ids, "attention_mask": torch.ones(1, 6)}
    s = ti.summarize(KwNet(), inputs)
    assert s.totals.macs == ti.count_flops(KwNet(), inputs).macs == 6 * 8 * 2
    assert s.input == "{input_ids: [1, 6], attention_mask: [1, 6]}"
    assert ti.count_params(KwNet()).total == 10 * 8 + 8 * 2 + 2
    with pytest.raises(InspectError, match="keys must be strings"):
        ti.summarize(KwNet(), {0: ids})


Pair = namedtuple("Pair", "a b")


class PairNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, pair: Pair) -> torch.Tensor:
        assert isinstance(pair, Pair)  # the container type is kept
        return self.fc(pair.a) + pair.b


def test_namedtuple_is_one_input_and_keeps_its_type() -> None:
    pair = Pair(torch.randn(1, 4), torch.randn(1, 4))
    for device in ("meta", "cpu"):
        assert ti.summarize(PairNet(), pair, device=device).totals.macs == 16
    assert ti.summarize(PairNet(), [pair]).totals.macs == 16  # a list: the positional inputs


def test_shapes_and_nested_containers() -> None:
    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x: torch.Tensor, y: dict[str, list[torch.Tensor]]) -> torch.Tensor:
            return self.fc(x) + self.fc(y["z"][0])

    assert ti.summarize(nn.Linear(4, 3), [(2, 4)]).totals.macs == 24  # torchinfo input_size
    class Pairwise(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(4, 3), nn.Linear(5, 3)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return self.a(x) + self.b(y)

    assert ti.summarize(Pairwise(), [(2, 4), (2, 5)]).totals.macs == 2 * 3 * (4 + 5)
    nested = (torch.randn(2, 4), {"z": [torch.randn(2, 4)]})
    assert ti.summarize(Two(), nested).totals.macs == 48


def test_forward_failure_shows_shapes_not_values() -> None:
    with pytest.raises(InspectError) as err:
        ti.summarize(nn.Linear(4, 4), torch.randn(300, 5))
    text = str(err.value)
    assert "input [300, 5]" in text and len(text) < 300 and "tensor(" not in text


def test_data_dependent_counts_are_labelled() -> None:
    class Select(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x[x.sum(dim=1) > 0])

    trace = trace_model(Select(), torch.randn(8, 4))
    assert trace.device == "cpu"
    assert any("input-dependent count" in n and "index ×1" in n and "[8, 4]" in n
               for n in trace.notes)
