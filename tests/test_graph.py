"""inspect graph: autograd and module graphs, DOT escaping, rendering and the .dot fallback."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from torchinspect.export.graph import (
    BIG_GRAPH,
    Graph,
    GraphEdge,
    GraphNode,
    autograd_graph,
    big_note,
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
    one_input = g.count("input") == 1
    name = {n.id: (f"{n.type}@{n.name}" if n.kind == "function" else
                   "input" if n.kind == "input" and one_input else (n.name or n.kind))
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
    big_note(g)
    assert g.notes and "--depth" in g.notes[0]


@needs_dot
def test_cli_autograd_svg_of_resnet18_has_parameter_names(invoke, tmp_path) -> None:
    import torchvision

    out = tmp_path / "r18.svg"
    r = invoke("graph", "resnet18", "--input", "3,32,32", "--kind", "autograd", "-o", out)
    assert r.exit_code == 0, r.output
    svg = out.read_text()
    names = [n for n, _ in torchvision.models.resnet18().named_parameters()]
    assert all(f">{n} (" in svg for n in names)
    assert "layer1.0.conv1.weight (64, 64, 3, 3)" in svg
    assert f"Parameters drawn {len(names)}".split()[-1] in r.output
    again = invoke("graph", "resnet18", "--input", "3,32,32", "--kind", "autograd", "-o", out)
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

    graphs = {dev: build_graph(make_case("resnet18", "3,32,32", options=ModelOptions(device=dev)),
                               kind="autograd") for dev in ("meta", "cpu")}
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
    r = invoke("graph", "zoo:llama-70b", "--kind", "autograd", "-o", tmp_path / "l.svg")
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


# ------------------------------------------------------------------ function nodes and clusters


class Residual(nn.Module):
    """relu(fc2(relu(fc1(x))) + x): the add and relu are functional ops."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.fc2(F.relu(self.fc1(x))) + x)


class TwoResiduals(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem, self.r1, self.r2, self.head = nn.Linear(4, 8), Residual(), Residual(), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.r2(self.r1(self.stem(x))))


class Attention(nn.Module):
    def __init__(self, sdpa: bool) -> None:
        super().__init__()
        self.sdpa = sdpa
        self.qkv, self.proj = nn.Linear(16, 48), nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        if self.sdpa:
            return self.proj(F.scaled_dot_product_attention(q, k, v))
        return self.proj((q @ k.transpose(-2, -1) / 4).softmax(-1) @ v)


class AttnModel(nn.Module):
    def __init__(self, sdpa: bool) -> None:
        super().__init__()
        self.attn = Attention(sdpa)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x)


def _succ(g: Graph) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {n.id: set() for n in g.nodes}
    for e in g.edges:
        out[e.src].add(e.dst)
    return out


def _paths(g: Graph, src: str, dst: str) -> list[list[str]]:
    """Every path from node src to node dst (the graphs here are small DAGs)."""
    succ = _succ(g)

    def walk(node: str) -> list[list[str]]:
        if node == dst:
            return [[node]]
        return [[node, *rest] for nxt in sorted(succ[node]) for rest in walk(nxt)]

    return walk(src)


def _node(g: Graph, name: str) -> GraphNode:
    (node,) = [n for n in g.nodes if n.kind == "module" and n.name == name]
    return node


def test_residual_blocks_draw_add_and_relu_between_the_right_modules() -> None:
    g = _module_graph(TwoResiduals(), torch.randn(2, 4), fold=False)
    by_id = {n.id: n for n in g.nodes}
    adds = [n for n in g.nodes if n.kind == "function" and n.type == "add"]
    assert sorted(n.name for n in adds) == ["r1", "r2"]  # one add per block, in its block
    add1 = next(n for n in adds if n.name == "r1")
    preds = {e.src for e in g.edges if e.dst == add1.id}
    assert {by_id[p].name for p in preds} == {"r1.fc2", "stem"}  # the block's branch and skip
    (after,) = [by_id[e.dst] for e in g.edges if e.src == add1.id]
    assert (after.kind, after.type, after.name) == ("function", "relu", "r1")
    # the relu output feeds block 2's first layer and its skip: no edge from stem skips ahead
    assert {by_id[d].name for d in _succ(g)[after.id]} == {"r2.fc1", "r2"}
    names = _edges(g)
    assert ("stem", "r2.fc1") not in names and ("r1.fc2", "r2.fc1") not in names
    # --no-functions: the older picture, where the skip looks like a DenseNet connection
    old = _module_graph(TwoResiduals(), torch.randn(2, 4), fold=False, functions=False)
    assert old.count("function") == 0
    assert {("stem", "r2.fc1"), ("r1.fc2", "r2.fc1")} <= _edges(old)


@pytest.mark.parametrize("sdpa", [False, True])
def test_attention_draws_the_functional_ops_between_qkv_and_proj(sdpa: bool) -> None:
    model = AttnModel(sdpa)
    g = _module_graph(model, torch.randn(2, 5, 16))
    qkv, proj = _node(g, "attn.qkv"), _node(g, "attn.proj")
    assert proj.id not in _succ(g)[qkv.id]  # no longer straight from qkv to proj
    paths = _paths(g, qkv.id, proj.id)
    by_id = {n.id: n for n in g.nodes}
    ops = {tuple(by_id[i].type for i in p[1:-1]) for p in paths}
    if sdpa:
        assert ops == {("scaled_dot_product_attention",)}
    else:  # q @ k^T / 4, softmax, @ v; v joins at the second matmul
        assert ops == {("matmul", "div", "softmax", "matmul"), ("matmul",)}
    assert all(by_id[i].cluster == g.clusters[0].id for p in paths for i in p)
    assert g.clusters[0].name == "attn"
    old = _module_graph(model, torch.randn(2, 5, 16), functions=False)
    assert ("attn.qkv", "attn.proj") in _edges(old)


def test_depth_folding_absorbs_the_functions_inside_a_leaf() -> None:
    model = TwoResiduals()
    g = _module_graph(model, torch.randn(2, 4), depth=1, fold=False)
    assert g.count("function") == 0 and not g.clusters
    assert _edges(g) == {("input", "stem"), ("stem", "r1"), ("r1", "r2"), ("r2", "head"),
                         ("head", "output")}
    folded = _module_graph(model, torch.randn(2, 4))  # the two identical blocks fold
    assert g.count("function") == 0 and any(n.fold == 2 for n in folded.nodes)


def test_nested_modules_are_clusters_in_the_dot_source() -> None:
    g = _module_graph(TwoResiduals(), torch.randn(2, 4), fold=False)
    assert [(c.name, c.type, c.parent) for c in g.clusters] == [("r1", "Residual", None),
                                                                ("r2", "Residual", None)]
    src = to_dot(g)
    lines = src.splitlines()
    for c in g.clusters:
        start = lines.index(f'  subgraph "cluster {c.name} (Residual)" {{')
        end = lines.index("  }", start)
        inside = "\n".join(lines[start:end])
        assert f'label="{c.name} (Residual)"' in inside
        # the block's modules and its add/relu are declared inside its cluster
        assert f'"{c.name}.fc1" [' in inside and f'"{c.name}.fc2" [' in inside
        assert f'"add in {c.name}" [' in inside and f'"relu in {c.name}" [' in inside
        assert '"stem" [' not in inside
    if DOT is not None:
        svg = subprocess.run([DOT, "-Tsvg"], input=src.encode(), capture_output=True,
                             check=True).stdout.decode()
        assert svg.count('class="cluster"') == 2
        assert "<title>r1.fc1</title>" in svg and "<title>m" not in svg  # names, not ids
        assert "<title>cluster r1 (Residual)</title>" in svg
        assert 'xlink:title="add() in r1"' in svg


def test_nested_clusters_have_parents() -> None:
    model = nn.Sequential(AttnModel(sdpa=True), nn.Linear(16, 4))
    g = _module_graph(model, torch.randn(2, 5, 16))
    parents = {c.name: c.parent for c in g.clusters}
    ids = {c.name: c.id for c in g.clusters}
    assert parents == {"0": None, "0.attn": ids["0"]}
    assert _node(g, "0.attn.qkv").cluster == ids["0.attn"]
    src = to_dot(g)
    assert src.index('  subgraph "cluster 0.attn (Attention)"') > \
        src.index('subgraph "cluster 0 (AttnModel)"')


def test_cli_functions_option(invoke) -> None:
    args = ("graph", "zoo:gpt-tiny", "--kind", "module", "--depth", "9", "--no-fold",
            "--format", "json")
    on = json.loads(invoke(*args).stdout)
    off = json.loads(invoke(*args, "--no-functions").stdout)
    assert on["functions"] is True and off["functions"] is False
    kinds = {n["type"] for n in on["nodes"] if n["kind"] == "function"}
    assert {"add", "scaled_dot_product_attention"} <= kinds
    assert not any(n["kind"] == "function" for n in off["nodes"])
    r = invoke("graph", "zoo:gpt-tiny", "--kind", "autograd", "--no-functions", "--format", "json")
    assert r.exit_code == 2 and "--kind module" in r.output


def test_all_lists_every_node_type(invoke) -> None:
    import io

    from torchinspect.report import render
    from torchinspect.report.graph import graph_report

    g = Graph("module", "m", [GraphNode(f"n{i}", "x", "module", f"m{i}", f"Type{i:02d}")
                              for i in range(20)])

    def shown(**kw) -> str:
        buf = io.StringIO()
        render(graph_report(g, **kw), "table", buf, width=100)
        return buf.getvalue()

    short, full = shown(), shown(show_all=True)
    assert "… and 5 more kinds (--all lists them" in short and "Type19" not in short
    assert "more kinds" not in full and all(f"Type{i:02d}" in full for i in range(20))
    r = invoke("graph", "zoo:mnist-net", "--kind", "module", "--all", "--format", "json")
    assert r.exit_code == 0 and len(json.loads(r.stdout)["nodes"]) > 2


# ---- modules shared by several parents or called twice, several inputs (issue 33)

def _flow_edges(g: Graph) -> list[tuple[str, str]]:
    """Edges by what a reader sees: inputs by parameter name, modules by the name their caller
    holds them by, functions by op name; the k-th call of the same name is ``name#k``."""
    seen: dict[str, int] = {}
    key: dict[str, str] = {}
    for n in g.nodes:
        if n.kind == "module":
            base = n.label.split("\n")[1].split(" (shared")[0].split(" (call ")[0]
        elif n.kind == "function":
            base = str(n.type)
        else:
            base = str(n.name)
        seen[base] = seen.get(base, 0) + 1
        key[n.id] = base if seen[base] == 1 else f"{base}#{seen[base]}"
    return sorted((key[e.src], key[e.dst]) for e in g.edges)


def _zoo_graph(name: str, **kw) -> Graph:
    return build_graph(f"zoo:{name}", kind="module", **kw)


def test_a_relu_called_twice_draws_both_calls_and_the_residual_add() -> None:
    g = _zoo_graph("shared-act-residual")
    assert not g.notes
    # labelled as summary labels its rows (issue 42)
    assert [n.label.split("\n")[1] for n in g.nodes if n.type == "ReLU"] == [
        "act (call 1/2)", "act (call 2/2)"]
    assert _flow_edges(g) == sorted([
        ("x", "fc1"), ("fc1", "act"), ("act", "fc2"), ("fc2", "add"), ("x", "add"),
        ("add", "act#2"), ("act#2", "output")])


def test_a_relu_shared_by_every_unet_block_draws_the_unet() -> None:
    g = _zoo_graph("shared-act-unet", depth=2)
    assert not g.notes and g.count("function") == 2
    chain: list[tuple[str, str]] = []
    for block, src in (("enc1", "x"), ("enc2", "pool"), ("bottleneck", "pool#2"),
                       ("dec2", "cat"), ("dec1", "cat#2")):
        act, act2 = f"{block}.act", f"{block}.act#2"
        chain += [(src, f"{block}.conv1"), (f"{block}.conv1", act), (act, f"{block}.conv2"),
                  (f"{block}.conv2", act2)]
    chain += [("enc1.act#2", "pool"), ("enc2.act#2", "pool#2"), ("bottleneck.act#2", "up2"),
              ("up2", "cat"), ("enc2.act#2", "cat"),  # the deeper skip
              ("dec2.act#2", "up1"), ("up1", "cat#2"), ("enc1.act#2", "cat#2"),  # the outer skip
              ("dec1.act#2", "head"), ("head", "output")]
    assert _flow_edges(g) == sorted(chain)
    convs = [n.name for n in g.nodes if n.type == "Conv2d"]
    assert convs == [f"{b}.conv{i}" for b in ("enc1", "enc2", "bottleneck", "dec2", "dec1")
                     for i in (1, 2)] + ["head"]
    relus = [n for n in g.nodes if n.type == "ReLU"]
    assert len(relus) == 10 and all("(shared: act)" in n.label for n in relus)


def test_the_default_unet_graph_is_readable_and_says_how_to_get_more() -> None:
    from torchinspect.export.graph import READABLE_NODES

    g = _zoo_graph("shared-act-unet")
    assert g.depth == 1 and g.max_depth == 2 and len(g.nodes) <= READABLE_NODES
    assert _flow_edges(g) == sorted([
        ("x", "enc1"), ("enc1", "pool"), ("pool", "enc2"), ("enc2", "pool#2"),
        ("pool#2", "bottleneck"), ("bottleneck", "up2"), ("up2", "cat"), ("enc2", "cat"),
        ("cat", "dec2"), ("dec2", "up1"), ("up1", "cat#2"), ("enc1", "cat#2"),
        ("cat#2", "dec1"), ("dec1", "head"), ("head", "output")])
    assert any("--depth 2 draws every module" in n for n in g.notes)


def test_two_inputs_are_two_input_nodes() -> None:
    g = _zoo_graph("siamese")
    assert _flow_edges(g) == sorted([
        ("a", "encoder.0"), ("encoder.0", "encoder.1"), ("b", "encoder.0#2"),
        ("encoder.0#2", "encoder.1#2"), ("encoder.1", "sub"), ("encoder.1#2", "sub"),
        ("sub", "abs"), ("abs", "head"), ("head", "output")])
    auto = build_graph("zoo:siamese", kind="autograd")
    assert sorted(n.name for n in auto.nodes if n.kind == "input") == ["a", "b"]
    nested = _zoo_graph("multi-input")
    assert {n.name for n in nested.nodes if n.kind == "input"} == {
        "image", "features['numeric']", "features['category']", "mask"}


def test_cli_default_graph_is_the_readable_module_graph(invoke) -> None:
    r = invoke("graph", "zoo:shared-act-unet", "--format", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["kind"] == "module" and data["depth"] == 1 and data["max_depth"] == 2
    r = invoke("graph", "zoo:shared-act-unet", "--kind", "autograd", "--depth", "1",
               "--format", "json")
    assert r.exit_code == 2 and "--depth" in r.output
