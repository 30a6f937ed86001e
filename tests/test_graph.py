"""inspect graph: autograd and module graphs, DOT escaping, rendering and the .dot fallback."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import torch
from torch import nn

from torchinspect.export.graph import (
    BIG_GRAPH,
    Graph,
    GraphEdge,
    GraphNode,
    _big_note,
    autograd_graph,
    build_graph,
    module_graph,
    to_dot,
    write_graph,
)
from torchinspect.trace import trace_model

DOT = shutil.which("dot")
needs_dot = pytest.mark.skipif(DOT is None, reason="needs the Graphviz dot program")


class Skip(nn.Module):
    """c(b(a(x)) + x): the add is a functional op between modules."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(4, 4), nn.Linear(4, 4, bias=False), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(self.b(self.a(x)) + x)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.act = nn.Linear(8, 8), nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.fc(x))


class Looped(nn.Module):
    """A ModuleList called in a Python loop, then a head."""

    def __init__(self, n: int = 3) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.blocks = nn.ModuleList(Block() for _ in range(n))
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for blk in self.blocks:
            x = blk(x)
        return self.head(x)


def _edges(g: Graph) -> set[tuple[str, str]]:
    """Edges by name: modules by qualified name, functions as ``op@module``."""
    name = {n.id: (f"{n.type}@{n.name}" if n.kind == "function" else (n.name or n.kind))
            for n in g.nodes}
    return {(name[e.src], name[e.dst]) for e in g.edges}


def _module_graph(model: nn.Module, x: torch.Tensor, **kw) -> Graph:
    from torchinspect.export.graph import module_flow

    trace = trace_model(model, (x,), device="meta")
    flow = module_flow(model, (x,), {})
    return module_graph(trace, flow, **kw)


def test_module_graph_edges_follow_tensors_through_functional_ops() -> None:
    g = _module_graph(Skip(), torch.randn(2, 4), functions=False)
    assert _edges(g) == {("input", "a"), ("a", "b"), ("b", "c"), ("input", "c"), ("c", "output")}


def test_module_graph_of_a_modulelist_loop_folds_and_collapses() -> None:
    model, x = Looped(3), torch.randn(2, 4)
    folded = _module_graph(model, x, functions=False)
    block = [n for n in folded.nodes if n.type == "Block"]
    assert len(block) == 1 and block[0].fold == len(model.blocks)
    assert "Block ×3" in block[0].label
    assert _edges(folded) == {("input", "embed"), ("embed", "blocks.0"), ("blocks.0", "head"),
                              ("head", "output")}
    # unfolded, every level: each block's Linear and GELU, residual edges around them
    full = _module_graph(model, x, fold=False, functions=False)
    assert {n.name for n in full.nodes if n.kind == "module"} == {
        "embed", "head", *(f"blocks.{i}.{m}" for i in range(3) for m in ("fc", "act"))}
    edges = _edges(full)
    assert ("embed", "blocks.1.fc") in edges  # block 0's residual: embed's output skips ahead
    assert ("blocks.0.act", "blocks.1.fc") in edges
    # depth 1: the never-called ModuleList is one node between embed and head
    shallow = _module_graph(model, x, depth=1, functions=False)
    assert [n.type for n in shallow.nodes] == [None, "Linear", "ModuleList", "Linear", None]
    assert _edges(shallow) == {("input", "embed"), ("embed", "blocks"), ("blocks", "head"),
                               ("head", "output")}


def test_module_graph_of_a_spec_runs_on_meta() -> None:
    g = build_graph("resnet18", kind="module", depth=2)
    assert g.device == "meta"
    blocks = [n for n in g.nodes if n.type == "BasicBlock"]
    # resnet18: 4 stages of 2 BasicBlocks; layer1's two blocks are identical -> folded
    assert sum(n.fold for n in blocks) == 8
    assert any(n.fold == 2 and n.name == "layer1.0" for n in blocks)


def test_autograd_graph_names_parameters_and_leaves_model_untouched() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                          nn.Linear(4 * 6 * 6, 5))
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    g = autograd_graph(model, (torch.randn(2, 3, 8, 8),), saved=True)
    params = {n.name: n.shape for n in g.nodes if n.kind == "param"}
    assert params == {k: list(p.shape) for k, p in model.named_parameters()}
    assert "0.weight (4, 3, 3, 3)" in {n.label for n in g.nodes}
    assert g.count("saved") > 0 and g.count("input") == 1 and g.count("output") == 1
    assert all(m.training for m in model.modules())
    for k, v in model.state_dict().items():  # BatchNorm running stats not updated
        assert torch.equal(v, before[k]), k
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_dot_escapes_every_label() -> None:
    weird = 'einsum "bij,bjk->bik" {x} \\ é ∑ <tag> \n next'
    g = Graph("module", 'model "q"', [GraphNode("a", weird, "module"), GraphNode("b", "out", "output")],
              [GraphEdge("a", "b")])
    src = to_dot(g)
    assert '\\"bij,bjk->bik\\"' in src and "\\\\" in src and "é ∑" in src
    if DOT is not None:
        svg = subprocess.run([DOT, "-Tsvg"], input=src.encode(), capture_output=True, check=True).stdout
        text = svg.decode()
        assert "bij,bjk&#45;&gt;bik" in text or "bij,bjk-&gt;bik" in text
        assert "{x}" in text and "é ∑" in text and "&lt;tag&gt;" in text


@needs_dot
def test_unicode_and_quoted_module_names_render(tmp_path) -> None:
    model = nn.Sequential()
    model.add_module('blöck"{1}>', nn.Linear(3, 3))
    model.add_module("ñ", nn.ReLU())
    g = _module_graph(model, torch.randn(1, 3))
    out = write_graph(g, tmp_path / "g.svg")
    assert out.rendered
    text = (tmp_path / "g.svg").read_text()
    assert "blöck&quot;{1}&gt;" in text and "ñ" in text


def test_big_graph_suggests_depth() -> None:
    g = Graph("module", "m", [GraphNode(f"n{i}", "x", "module") for i in range(BIG_GRAPH + 1)])
    _big_note(g)
    assert g.notes and "--depth" in g.notes[0]


@needs_dot
def test_cli_autograd_svg_of_resnet18_has_parameter_names(invoke, tmp_path) -> None:
    import torchvision

    out = tmp_path / "r18.svg"
    r = invoke("graph", "resnet18", "--input", "3,32,32", "-o", out)
    assert r.exit_code == 0, r.output
    svg = out.read_text()
    names = [n for n, _ in torchvision.models.resnet18().named_parameters()]
    assert all(f">{n} (" in svg for n in names)
    assert "layer1.0.conv1.weight (64, 64, 3, 3)" in svg
    assert f"Parameters drawn {len(names)}".split()[-1] in r.output
    again = invoke("graph", "resnet18", "--input", "3,32,32", "-o", out)
    assert again.exit_code == 2 and "already exists" in again.output and "--force" in again.output


def test_cli_json_nodes_and_edges(invoke, tmp_path) -> None:
    r = invoke("graph", "zoo:gpt-tiny", "--kind", "module", "--depth", "1", "--format", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["schema"] == "torchinspect/graph/v1" and data["kind"] == "module"
    ids = {n["id"] for n in data["nodes"]}
    assert data["edges"] and all(e["src"] in ids and e["dst"] in ids for e in data["edges"])
    out = tmp_path / "g.json"
    r = invoke("graph", "zoo:gpt-tiny", "--kind", "module", "--depth", "1", "-o", out)
    assert r.exit_code == 0
    assert json.loads(out.read_text())["nodes"] == data["nodes"]


def test_cli_without_dot_writes_dot_source_and_says_how_to_render(invoke, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no `dot` anywhere on PATH
    assert shutil.which("dot") is None
    out = tmp_path / "m.svg"
    r = invoke("graph", "zoo:gpt-tiny", "--kind", "module", "-o", out)
    assert r.exit_code == 0, r.output
    assert not out.exists()
    dot_file = tmp_path / "m.dot"
    assert dot_file.read_text().startswith("digraph")
    text = " ".join(r.output.split())  # long temporary paths wrap
    assert f"dot -Tsvg {dot_file} -o {out}" in text
    assert "apt install graphviz" in text


def test_cli_usage_errors(invoke, tmp_path) -> None:
    r = invoke("graph", "zoo:gpt-tiny")
    assert r.exit_code == 2 and "needs -o FILE" in r.output
    r = invoke("graph", "zoo:gpt-tiny", "-o", tmp_path / "g.gif")
    assert r.exit_code == 2 and ".gif" in r.output and "hint:" in r.output


def test_python_api_twin() -> None:
    import torchinspect

    g = torchinspect.build_graph(Skip(), torch.randn(2, 4), kind="module")
    assert {n.name for n in g.nodes if n.kind == "module"} == {"a", "b", "c"}


def test_autograd_graph_on_meta_matches_cpu_for_resnet18() -> None:
    from torchinspect.sources.case import ModelOptions, make_case

    graphs = {dev: build_graph(make_case("resnet18", "3,32,32", options=ModelOptions(device=dev)))
              for dev in ("meta", "cpu")}
    meta, cpu = graphs["meta"], graphs["cpu"]
    assert meta.device == "meta" and cpu.device == "cpu"
    assert sorted(n.label for n in meta.nodes) == sorted(n.label for n in cpu.nodes)
    assert len(meta.edges) == len(cpu.edges)


def test_cli_autograd_refuses_weights_that_do_not_fit(invoke, tmp_path) -> None:
    from torchinspect import device as devices
    from torchinspect.sources.case import make_case

    need = devices.weight_bytes(make_case("zoo:llama-70b", need_inputs=False).model)
    free = devices.available_bytes("cpu")
    if free is None or need <= free:
        pytest.skip("this machine could hold llama-70b's weights")
    r = invoke("graph", "zoo:llama-70b", "-o", tmp_path / "l.svg")
    assert r.exit_code == 2
    assert f"needs {devices.fmt_size(need)}" in r.stderr and "--kind module" in r.stderr
    assert not (tmp_path / "l.svg").exists()


def test_every_parameter_and_input_is_one_node() -> None:
    """Autograd nodes' Python objects can be made on access and freed (torch 2.11 reused the
    id() of one AccumulateGrad for the next, so parameters vanished from the graph): each leaf
    tensor is one node, a weight used twice included."""
    shared = nn.Linear(6, 6)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), shared, nn.ReLU(), shared)
    g = autograd_graph(model, (torch.randn(2, 4),))
    params = sorted(n.name for n in g.nodes if n.kind == "param")
    assert params == ["0.bias", "0.weight", "2.bias", "2.weight"]
    assert g.count("input") == 1 and len({n.id for n in g.nodes}) == len(g.nodes)
    linear_ops = [n for n in g.nodes if n.kind == "op" and n.type == "AddmmBackward0"]
    assert len(linear_ops) == 3
