"""Model graphs: the autograd graph of one real forward, or the module graph of a meta trace.

* :mod:`.autograd` -- :func:`autograd_graph` runs the model once with gradients and walks
  ``grad_fn.next_functions`` from the outputs (as pytorchviz does).
* :mod:`.flow` -- :func:`module_flow`, which module call or functional op produced each tensor.
* :mod:`.modules` -- :func:`module_graph` draws the module calls of a :class:`Trace` cut at
  ``depth``, repeated blocks folded, open modules as clusters, functional ops as nodes.
* :mod:`.dot` -- :func:`to_dot` (Graphviz source, every label escaped) and :func:`write_graph`.
* :mod:`.build` -- :func:`build_graph`, the case-level API behind ``inspect graph``.
* :mod:`.model` -- the :class:`Graph` dataclasses.

The core returns a :class:`Graph` dataclass and never prints. The names below are imported
on first use (PEP 562): ``cli/graph.py`` takes :class:`GraphKind` at start-up, and that must
pull neither torch nor the io readers behind :mod:`.dot`'s atomic writers
(``tests/test_startup.py``).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LAZY = {
    "autograd_graph": "torchinspect.export.graph.autograd",
    "build_graph": "torchinspect.export.graph.build",
    "RENDER_FORMATS": "torchinspect.export.graph.dot",
    "WRITE_FORMATS": "torchinspect.export.graph.dot",
    "GraphFile": "torchinspect.export.graph.dot",
    "dot_binary": "torchinspect.export.graph.dot",
    "dot_quote": "torchinspect.export.graph.dot",
    "graph_json": "torchinspect.export.graph.dot",
    "output_format": "torchinspect.export.graph.dot",
    "to_dot": "torchinspect.export.graph.dot",
    "write_graph": "torchinspect.export.graph.dot",
    "FUNC": "torchinspect.export.graph.flow",
    "INPUT": "torchinspect.export.graph.flow",
    "OUTPUT": "torchinspect.export.graph.flow",
    "module_flow": "torchinspect.export.graph.flow",
    "BIG_GRAPH": "torchinspect.export.graph.model",
    "READABLE_NODES": "torchinspect.export.graph.model",
    "Graph": "torchinspect.export.graph.model",
    "GraphCluster": "torchinspect.export.graph.model",
    "GraphEdge": "torchinspect.export.graph.model",
    "GraphKind": "torchinspect.export.graph.model",
    "GraphNode": "torchinspect.export.graph.model",
    "big_note": "torchinspect.export.graph.model",
    "module_graph": "torchinspect.export.graph.modules",
}
__all__ = sorted(_LAZY)

if TYPE_CHECKING:
    from torchinspect.export.graph.autograd import autograd_graph as autograd_graph
    from torchinspect.export.graph.build import build_graph as build_graph
    from torchinspect.export.graph.dot import RENDER_FORMATS as RENDER_FORMATS
    from torchinspect.export.graph.dot import WRITE_FORMATS as WRITE_FORMATS
    from torchinspect.export.graph.dot import GraphFile as GraphFile
    from torchinspect.export.graph.dot import dot_binary as dot_binary
    from torchinspect.export.graph.dot import dot_quote as dot_quote
    from torchinspect.export.graph.dot import graph_json as graph_json
    from torchinspect.export.graph.dot import output_format as output_format
    from torchinspect.export.graph.dot import to_dot as to_dot
    from torchinspect.export.graph.dot import write_graph as write_graph
    from torchinspect.export.graph.flow import FUNC as FUNC
    from torchinspect.export.graph.flow import INPUT as INPUT
    from torchinspect.export.graph.flow import OUTPUT as OUTPUT
    from torchinspect.export.graph.flow import module_flow as module_flow
    from torchinspect.export.graph.model import BIG_GRAPH as BIG_GRAPH
    from torchinspect.export.graph.model import READABLE_NODES as READABLE_NODES
    from torchinspect.export.graph.model import Graph as Graph
    from torchinspect.export.graph.model import GraphCluster as GraphCluster
    from torchinspect.export.graph.model import GraphEdge as GraphEdge
    from torchinspect.export.graph.model import GraphKind as GraphKind
    from torchinspect.export.graph.model import GraphNode as GraphNode
    from torchinspect.export.graph.model import big_note as big_note
    from torchinspect.export.graph.modules import module_graph as module_graph


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'torchinspect.export.graph' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
