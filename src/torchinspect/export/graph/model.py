"""The graph model: nodes, edges, clusters and the shape helpers the builders share."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from torchinspect.shapes import tensor_leaves

BIG_GRAPH = 2000  # nodes; above this the result suggests --depth
# nodes; the default module graph is drawn to the deepest depth that stays within this (a
# picture about one screen tall: a small U-Net's every module is 29 nodes, 2,900 px)
READABLE_NODES = 24


class GraphKind(StrEnum):
    autograd = "autograd"
    module = "module"


@dataclass
class GraphNode:
    """One node. ``kind``: op, param, input, output, saved (autograd); module, function,
    input, output (module graph)."""

    id: str
    label: str
    kind: str
    name: str | None = None  # parameter, module or function qualified name
    type: str | None = None  # autograd function, module class or function name
    shape: list[int] | None = None
    fold: int = 1  # identical consecutive blocks drawn as this one node
    cluster: str | None = None  # id of the module cluster drawn around it (module graph)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GraphEdge:
    src: str
    dst: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GraphCluster:
    """A module drawn open: a box around the nodes of its children (nested by ``parent``)."""

    id: str
    label: str
    name: str
    type: str
    parent: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Graph:
    """Nodes and edges of one view of a model, ready for DOT or JSON."""

    kind: str
    model: str
    nodes: list[GraphNode] = field(default_factory=list)
    edges: list[GraphEdge] = field(default_factory=list)
    depth: int | None = None
    device: str = "meta"
    inputs: str = ""
    notes: list[str] = field(default_factory=list)
    clusters: list[GraphCluster] = field(default_factory=list)
    functions: bool = False  # module graph: functional ops drawn as their own nodes
    max_depth: int | None = None  # module graph: the model's deepest module level

    @property
    def big(self) -> bool:
        return len(self.nodes) > BIG_GRAPH

    def count(self, kind: str) -> int:
        return sum(1 for n in self.nodes if n.kind == kind)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "model": self.model, "depth": self.depth,
                "max_depth": self.max_depth, "device": self.device, "inputs": self.inputs,
                "notes": list(self.notes),
                "functions": self.functions,
                "nodes": [n.to_dict() for n in self.nodes],
                "edges": [e.to_dict() for e in self.edges],
                "clusters": [c.to_dict() for c in self.clusters]}


def big_note(graph: Graph) -> None:
    if graph.big:
        hint = ("pass --kind module --depth 2 for a readable picture" if graph.kind == "autograd"
                else "pass --depth 2 (or 1) to collapse the inner modules")
        graph.notes.append(f"{len(graph.nodes):,} nodes: a graph this big is hard to read; {hint}")


def shape_list(t: Any) -> list[int]:
    return [int(d) for d in t.shape]


def fmt_shape(shape: list[int] | tuple[int, ...] | None) -> str:
    if shape is None:
        return ""
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def device_of(out: Any) -> str:
    ts = tensor_leaves(out)
    return str(ts[0].device) if ts else "cpu"


