"""Every constant of the memory model, with where it comes from.

A number that shapes a predicted byte count lives here, not in the module that uses it: its
value, and its provenance: read from a library's source (``source``: the file that defines
it), measured on a GPU (``measured``: the card and the committed raw data), or chosen with
the help of a development set (``fitted``: the set it was fitted or chosen on, never a
validation set). Modules read them with `value`; `tests/test_memory_constants.py` fails
when a module of the model assigns a numeric constant of its own, and the table is rendered
on the memory RESULTS page (``benchmarks/pages_memory.py``). The two measured tables the
model ships (cuDNN workspaces, the no-GPU margins) carry their provenance in their own files
and are listed in `DATA_TABLES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Provenance(StrEnum):
    """How a constant was obtained."""

    source = "source"  # read from PyTorch's or a library's source code
    measured = "measured"  # measured on a GPU; the raw data is committed
    fitted = "fitted"  # chosen or fitted on a development set (never on a validation set)


@dataclass(frozen=True)
class Constant:
    """One constant: its value and where it comes from."""

    name: str
    value: int | float
    unit: str
    provenance: Provenance
    source: str  # the file that defines it, or the script and raw data that measured it
    card: str = ""  # the GPU it was measured on
    fitted_on: str = ""  # the set it was fitted, chosen or checked on
    meaning: str = ""


H100 = "NVIDIA H100 80GB HBM3 (torch 2.11, cuDNN 9.19)"
ALLOCATOR = "c10/cuda/CUDACachingAllocator.cpp"
RNN_RUN = "benchmarks/cudnn_rnn_memory.py, results/cudnn-rnn-h100.jsonl"
PROJ_RUN = "benchmarks/cudnn_rnn_memory.py --proj, results/cudnn-rnn-proj-h100.jsonl"
REDUCE = "aten/src/ATen/native/cuda/Reduce.cuh (setReduceConfig)"
MIB = 1 << 20

TABLE: tuple[Constant, ...] = (
    # -- the caching allocator (memory/allocator.py)
    Constant("allocator.min_block", 512, "bytes", Provenance.source, ALLOCATOR,
             meaning="kMinBlockSize: every request rounds up to a multiple"),
    Constant("allocator.small_size", MIB, "bytes", Provenance.source, ALLOCATOR,
             meaning="kSmallSize: requests up to this use the small pool"),
    Constant("allocator.small_buffer", 2 * MIB, "bytes", Provenance.source, ALLOCATOR,
             meaning="kSmallBuffer: a small-pool segment"),
    Constant("allocator.large_buffer", 20 * MIB, "bytes", Provenance.source, ALLOCATOR,
             meaning="kLargeBuffer: the segment of a request under min_large_alloc"),
    Constant("allocator.min_large_alloc", 10 * MIB, "bytes", Provenance.source, ALLOCATOR,
             meaning="kMinLargeAlloc"),
    Constant("allocator.round_large", 2 * MIB, "bytes", Provenance.source, ALLOCATOR,
             meaning="kRoundLarge: larger segments round up to a multiple"),
    # -- what the GPU allocates beyond tensors (memory/gpu.py)
    Constant("cublas.workspace_sm90", 32 * MIB, "bytes", Provenance.source,
             "aten/src/ATen/cuda/CublasHandlePool.cpp (getChosenWorkspaceSize)", H100,
             meaning="one cuBLAS workspace per handle on compute capability 9.x and later "
                     "(measured: 32 MiB after a forward matmul, 64 MiB after its backward)"),
    Constant("cublas.workspace_other", 4096 * 1024 * 2 + 16 * 1024 * 8, "bytes",
             Provenance.source, "aten/src/ATen/cuda/CublasHandlePool.cpp",
             meaning="':4096:2:16:8' on GPUs before Hopper"),
    Constant("cublaslt.workspace", MIB, "bytes", Provenance.source,
             "aten/src/ATen/cuda/CUDABlas.cpp (CUBLASLT_WORKSPACE_SIZE default)", H100,
             meaning="cuBLASLt's workspace per handle (a matmul with a fused bias)"),
    # -- reduction staging buffers (memory/reduction.py)
    Constant("reduction.max_threads", 512, "threads", Provenance.source, REDUCE,
             meaning="mnt_wrapper<T>::MAX_NUM_THREADS"),
    Constant("reduction.warp", 32, "threads", Provenance.source, REDUCE),
    Constant("reduction.input_vec", 4, "elements", Provenance.source, REDUCE,
             meaning="input vectorisation of a reduction over the fastest dimension"),
    Constant("reduction.min_values_per_thread", 16, "values", Provenance.source, REDUCE),
    Constant("reduction.max_values_per_thread", 256, "values", Provenance.source, REDUCE),
    # -- cuDNN's RNN (memory/cudnn_rnn.py)
    Constant("cudnn_rnn.reserve_units.lstm", 5, "hidden-wide units per layer and step",
             Provenance.measured, RNN_RUN, H100, "60 shapes, every one to the byte",
             "the reserve keeps 4 gates and the cell state"),
    Constant("cudnn_rnn.reserve_units.gru", 6, "hidden-wide units per layer and step",
             Provenance.measured, RNN_RUN, H100, "60 shapes, every one to the byte"),
    Constant("cudnn_rnn.reserve_units.rnn_tanh", 1, "hidden-wide units per layer and step",
             Provenance.measured, RNN_RUN, H100, "60 shapes, every one to the byte"),
    Constant("cudnn_rnn.reserve_units.rnn_relu", 1, "hidden-wide units per layer and step",
             Provenance.measured, RNN_RUN, H100, "as rnn_tanh (same cuDNN cell shape)"),
    Constant("cudnn_rnn.reserve_extra", 256, "bytes", Provenance.measured, RNN_RUN, H100,
             "60 + 60 shapes, every one to the byte", "added to every reserve"),
    Constant("cudnn_rnn.proj_round", 16, "elements", Provenance.measured, PROJ_RUN, H100,
             "60 LSTM training cases, 39 with proj_size, every one to the byte (one shows it)",
             "the projected part of the reserve (seq x batch x proj_size per layer and "
             "direction) rounds up to a multiple"),
    Constant("cudnn_rnn.dropout_state_per_sm", 48 * 1024, "bytes", Provenance.measured,
             "benchmarks/memory_optrace.py, results/memory-optrace-h100", H100,
             "cudnnDropoutGetStatesSize: 6,488,064 bytes on 132 SMs",
             "cuDNN's dropout states, kept for the process"),
    *(Constant(f"cudnn_rnn.gate_rows.{kind}", rows, "x hidden rows per weight",
               Provenance.source, "torch/nn/modules/rnn.py (gate_size)",
               meaning="rows of an RNN cell's weight matrices, in hidden sizes")
      for kind, rows in (("lstm", 4), ("gru", 3), ("rnn_tanh", 1), ("rnn_relu", 1))),
    *(Constant(f"cudnn_rnn.small_hidden.{kind}", size, "hidden units", Provenance.source,
               "aten/src/ATen/native/cudnn/RNN.cpp (use_rnn_persist_small_h)",
               meaning="the largest hidden size cuDNN's persistent small-hidden kernel "
                       "takes in a forward (a term of its own in the RNN workspace model)")
      for kind, size in (("lstm", 192), ("gru", 192), ("rnn_tanh", 384), ("rnn_relu", 384))),
    # -- estimates of unmeasured cuDNN workspaces (memory/workspace.py, rnn_workspace.py)
    Constant("workspace.neighbours.conv", 3, "problems", Provenance.fitted,
             "benchmarks/cudnn_workspace_sweep.py check", H100,
             "the sweep's 9,198 convolution problems, leave-one-model-out",
             "a convolution's point: the median of its nearest measured problems"),
    Constant("workspace.neighbours.rnn", 1, "problems", Provenance.fitted,
             "benchmarks/cudnn_workspace_sweep.py check", H100,
             "the sweep's RNN problems, leave-one-configuration-out",
             "an RNN call's point where its cell has no fitted workspace model "
             "(rnn_workspace.py): its nearest measured problem"),
    Constant("workspace.envelope_quantile", 1.0, "share", Provenance.fitted,
             "benchmarks/cudnn_workspace_sweep.py check", H100,
             "the same cross-validation",
             "the share of held-out problems each envelope covers (1: the extremes)"),
)

# measured tables shipped as data, each naming its machine and set in its own file
DATA_TABLES: tuple[Constant, ...] = (
    Constant("data/cudnn_workspace.json.gz", 0, "table", Provenance.measured,
             "benchmarks/cudnn_workspace_sweep.py build", H100,
             "convolutions of 27 torchvision models, an RNN grid, the RNN runs of "
             "cudnn_rnn_memory.py (with and without proj_size)",
             "measured workspaces, each op's leave-one-out envelope, and the RNN workspace "
             "model's coefficients (fitted on the table's RNN entries: rnn_workspace.py)"),
    Constant("data/peak_margins.json", 0, "table", Provenance.fitted,
             "benchmarks/memory_validation.py margins", H100,
             "development sets only (memory_heldout.py dev, memory_validation.py rnnproj)",
             "the calibrated errors a prediction without a GPU widens its range by"),
)

_BY_NAME = {c.name: c for c in TABLE}


def value(name: str) -> int:
    """The value of the constant ``name`` as an int (a KeyError names a missing row)."""
    return int(_BY_NAME[name].value)


def real(name: str) -> float:
    """The value of the constant ``name`` as a float."""
    return float(_BY_NAME[name].value)


def constant(name: str) -> Constant:
    return _BY_NAME[name]
