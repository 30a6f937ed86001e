"""Model graphs: the autograd graph of one real forward, or the module graph of a meta trace.

* :mod:`.autograd` -- :func:`autograd_graph` runs the model once with gradients and walks
  ``grad_fn.next_functions`` from the outputs (as pytorchviz does).
* :mod:`.flow` -- :func:`module_flow`, which module call or functional op produced each tensor.
* :mod:`.modules` -- :func:`module_graph` draws the module calls of a :class:`Trace` cut at
  ``depth``, repeated blocks folded, open modules as clusters, functional ops as nodes.
* :mod:`.dot` -- :func:`to_dot` (Graphviz source, every label escaped) and :func:`write_graph`.
* :mod:`.build` -- :func:`build_graph`, the case-level API behind ``inspect graph``.
* :mod:`.model` -- the :class:`Graph` dataclasses.

The core returns a :class:`Graph` dataclass and never prints. The package stays torch-free at
import (``cli/graph.py`` takes :class:`GraphKind` at start-up), so the trace and analysis
modules, which import torch, are imported inside the functions that use them.
"""

from torchinspect.export.graph.autograd import autograd_graph
from torchinspect.export.graph.build import build_graph
from torchinspect.export.graph.dot import (
    RENDER_FORMATS,
    WRITE_FORMATS,
    GraphFile,
    dot_binary,
    dot_quote,
    graph_json,
    output_format,
    to_dot,
    write_graph,
)
from torchinspect.export.graph.flow import FUNC, INPUT, OUTPUT, module_flow
from torchinspect.export.graph.model import (
    BIG_GRAPH,
    READABLE_NODES,
    Graph,
    GraphCluster,
    GraphEdge,
    GraphKind,
    GraphNode,
    big_note,
)
from torchinspect.export.graph.modules import module_graph

__all__ = [
    "BIG_GRAPH", "FUNC", "INPUT", "OUTPUT", "READABLE_NODES", "RENDER_FORMATS", "WRITE_FORMATS", "Graph",
    "GraphCluster", "GraphEdge", "GraphFile", "GraphKind", "GraphNode", "big_note",
    "autograd_graph", "build_graph", "dot_binary", "dot_quote", "graph_json", "module_flow",
    "module_graph", "output_format", "to_dot", "write_graph",
]
