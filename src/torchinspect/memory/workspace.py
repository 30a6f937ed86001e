"""cuDNN's transient workspaces: which call needs one, and how many bytes.

A convolution (forward; in training its backward) and a cuDNN RNN call (forward, backward)
allocate a **workspace** from the caching allocator for the length of the call and free it
before returning. Its size depends on the algorithm cuDNN picks on that GPU, so it cannot be
derived from shapes alone. The fake run records each such call as a `Problem` (the tracker
logs a workspace allocation and release around it, ``kind="cudnn"``); after the run each
problem gets its bytes from, in order:

1. a calibration measured on this GPU (``calibrate.py``: the op alone on random tensors,
   cached on disk by GPU, cuDNN and torch versions);
2. the shipped table (``data/cudnn_workspace.json.gz``: measured on an H100 for the problems
   of torchvision models at common batch sizes, ``benchmarks/cudnn_workspace_sweep.py``);
3. an estimate with a range (`WorkspaceTable.estimate`): the low end 0 bytes, the high end
   from the same problem at the table's other batch sizes and from the measured problems of
   its family within a factor 2 of its size (docs/concepts/memory.md: "cuDNN workspaces").

The prediction is replayed with each problem's point, low and high bytes: ``peak`` and the
``peak_low``-``peak_high`` range around it.
"""

from __future__ import annotations

import bisect
import functools
import gzip
import json
import math
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

DTYPE_NAMES = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16",
               "torch.float64": "fp64"}
OPS = ("conv_fwd", "conv_bwd", "rnn_fwd", "rnn_bwd")
TABLE_FILE = "cudnn_workspace.json.gz"


@dataclass(frozen=True, eq=False)
class Problem:
    """One cuDNN call as the GPU sees it: op, shapes, hyper-parameters, dtype, layout
    (equal and hashed by its `key`)."""

    op: str  # conv_fwd | conv_bwd | rnn_fwd | rnn_bwd
    spec: tuple[tuple[str, Any], ...]  # sorted (name, value) pairs, values JSON-friendly

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Problem) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    @property
    def key(self) -> str:
        """The table's key: the op and the spec, one canonical line."""
        return self.op + " " + " ".join(f"{k}={_text(v)}" for k, v in self.spec)

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.spec)

    @property
    def family(self) -> str:
        """The group whose measured envelope bounds an unmeasured problem."""
        p = self.params
        half = "half" if p["dtype"] in ("bf16", "fp16") else p["dtype"]
        if self.op.startswith("rnn"):
            return f"{self.op}/{p['kind']}/{half}"
        dims = len(p["x"]) - 2
        groups, cin = p["g"], p["x"][1]
        kind = "transposed" if p["t"] else "depthwise" if groups > 1 and groups == cin else \
            "grouped" if groups > 1 else "dilated" if any(d > 1 for d in p["d"]) else "dense"
        return f"{self.op}/{dims}d/{kind}/{half}"

    @property
    def size(self) -> int:
        """Bytes of the tensors the call reads and writes (input, output, weight)."""
        p = self.params
        elem = {"fp32": 4, "bf16": 2, "fp16": 2, "fp64": 8}.get(p["dtype"], 4)
        if self.op.startswith("rnn"):
            seq, batch, hidden, dirs = p["seq"], p["batch"], p["hidden"], p["dirs"]
            return elem * seq * batch * (p["input"] + hidden * dirs * p["layers"])
        return elem * (_numel(p["x"]) + _numel(conv_output(p)) + _numel(p["w"]))

    def describe(self) -> str:
        """``conv2d 3->64 7x7/2 backward, fp32, input 32x3x224x224`` for a note."""
        p = self.params
        direction = "backward" if self.op.endswith("bwd") else "forward"
        if self.op.startswith("rnn"):
            return (f"{p['kind']} {p['input']}->{p['hidden']} x{p['layers']}"
                    f"{' bidirectional' if p['dirs'] == 2 else ''} {direction}, {p['dtype']}, "
                    f"seq {p['seq']} batch {p['batch']}")
        dims = len(p["x"]) - 2
        w = p["w"]
        k = "x".join(str(s) for s in w[2:])
        stride = "" if all(s == 1 for s in p["s"]) else f"/{p['s'][0]}"
        kind = "conv_transpose" if p["t"] else "conv"
        return (f"{kind}{dims}d {p['x'][1]}->{conv_output(p)[1]} {k}{stride} {direction}, "
                f"{p['dtype']}, input {'x'.join(str(s) for s in p['x'])}")


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(_text(v) for v in value)
    if isinstance(value, bool):
        return str(int(value))
    return str(value)


def _numel(shape: Any) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def conv_output(p: dict[str, Any]) -> list[int]:
    """The output shape of a convolution problem."""
    x, w = p["x"], p["w"]
    dims = len(x) - 2
    if p["t"]:
        out = [(x[2 + i] - 1) * p["s"][i] - 2 * p["p"][i] + p["d"][i] * (w[2 + i] - 1)
               + p["op"][i] + 1 for i in range(dims)]
        return [x[0], w[1] * p["g"], *out]
    out = [(x[2 + i] + 2 * p["p"][i] - p["d"][i] * (w[2 + i] - 1) - 1) // p["s"][i] + 1
           for i in range(dims)]
    return [x[0], w[0], *out]


def dtype_name(dtype: Any) -> str:
    return DTYPE_NAMES.get(str(dtype), str(dtype).replace("torch.", ""))


def _layout(t: Any) -> str:
    """cl: channels-last (not also contiguous); cf: contiguous or anything else."""
    import torch

    if t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last):
        return "cl"
    if t.dim() == 5 and not t.is_contiguous() and t.is_contiguous(
            memory_format=torch.channels_last_3d):
        return "cl"
    return "cf"


def _ints(value: Any, dims: int) -> list[int]:
    values = [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]
    return values * dims if len(values) == 1 and dims > 1 else values


def conv_problem(name: str, args: Any) -> Problem | None:
    """The problem of an ``aten.convolution`` / ``convolution_backward`` call (None: not one
    that reaches cuDNN, e.g. a 1-element input)."""
    if name == "convolution":
        x, w, bias, stride, padding, dilation, transposed, out_pad, groups = args[:9]
        mask = None
        op = "conv_fwd"
        has_bias = bias is not None
    elif name == "convolution_backward":
        _, x, w, bias_sizes, stride, padding, dilation, transposed, out_pad, groups, mask = args[:11]
        op = "conv_bwd"
        has_bias = bias_sizes is not None and bool(mask[2])
    else:
        return None
    if x.dim() not in (3, 4, 5) or x.numel() == 0 or not x.is_floating_point():
        return None
    dims = x.dim() - 2
    spec: dict[str, Any] = {
        "x": [int(s) for s in x.shape], "w": [int(s) for s in w.shape], "b": has_bias,
        "s": _ints(stride, dims), "p": _ints(padding, dims), "d": _ints(dilation, dims),
        "t": bool(transposed), "op": _ints(out_pad, dims), "g": int(groups),
        "dtype": dtype_name(x.dtype), "layout": _layout(x),
    }
    if mask is not None:
        spec["mask"] = [bool(mask[0]), bool(mask[1]), bool(mask[2])]
    return Problem(op, tuple(sorted(spec.items())))


def rnn_problem(kind: str, *, backward: bool, input_size: int, hidden: int, layers: int,
                dirs: int, seq: int, batch: int, dtype: Any, train: bool, bias: bool,
                batch_first: bool) -> Problem:
    spec = {"kind": kind, "input": int(input_size), "hidden": int(hidden), "layers": int(layers),
            "dirs": int(dirs), "seq": int(seq), "batch": int(batch), "dtype": dtype_name(dtype),
            "train": bool(train), "bias": bool(bias), "bf": bool(batch_first)}
    return Problem("rnn_bwd" if backward else "rnn_fwd", tuple(sorted(spec.items())))


def problem_from_key(key: str) -> Problem:
    """The inverse of `Problem.key` (the sweep and the calibration cache store keys)."""
    op, _, rest = key.partition(" ")
    if op not in OPS:
        raise ValueError(f"unknown workspace op {op!r}")
    spec: dict[str, Any] = {}
    for item in rest.split(" "):
        name, _, text = item.partition("=")
        spec[name] = _parse(name, text)
    return Problem(op, tuple(sorted(spec.items())))


_LISTS = {"x", "w", "s", "p", "d", "op", "mask"}
_BOOLS = {"b", "t", "train", "bias", "bf"}
_STRS = {"dtype", "layout", "kind"}


def _parse(name: str, text: str) -> Any:
    if name in _STRS:
        return text
    if name in _BOOLS:
        return text == "1"
    if name == "mask":
        return [v == "1" for v in text.split(",")]
    if name in _LISTS:
        return [int(v) for v in text.split(",")] if text else []
    return int(text)


# -- estimates for problems nobody measured


@dataclass(frozen=True)
class Bound:
    """A family's fit: ``log w = a + b log s`` over its measured non-zero workspaces ``w`` of
    problem size ``s`` (least squares); ``up`` is the largest residual, so every measured
    point lies on or under ``high(s)``; ``zeros`` the share of problems that took none."""

    a: float
    b: float
    up: float
    zeros: float
    n: int

    def _fit(self, size: int) -> float:
        return self.a + self.b * math.log(max(size, 1))

    def high(self, size: int) -> int:
        return int(math.exp(self._fit(size) + self.up))

    def point(self, size: int) -> int:
        """The fitted workspace (0 where most of the family took none)."""
        return 0 if self.zeros > 0.5 else min(self.high(size), int(math.exp(self._fit(size))))


def fit_bound(points: list[tuple[int, int]]) -> Bound:
    """The power-law fit and envelope of (size, workspace) measurements of one family."""
    logs = [(math.log(max(s, 1)), math.log(w)) for s, w in points if w > 0]
    zeros = 1 - len(logs) / len(points) if points else 1.0
    if not logs:
        return Bound(0.0, 0.0, 0.0, zeros, len(points))
    mx = sum(x for x, _ in logs) / len(logs)
    my = sum(y for _, y in logs) / len(logs)
    var = sum((x - mx) ** 2 for x, _ in logs)
    b = sum((x - mx) * (y - my) for x, y in logs) / var if var > 0 else 0.0
    a = my - b * mx
    up = max(y - (a + b * x) for x, y in logs)
    return Bound(a, b, up, zeros, len(points))


@dataclass(frozen=True)
class Estimate:
    """Workspace bytes for one problem: point, low, high and where they came from."""

    point: int
    low: int
    high: int
    source: str  # calibrated | table | estimate | none | oom

    @property
    def exact(self) -> bool:
        return self.low == self.high


@dataclass
class WorkspaceTable:
    """Measured workspaces of one machine, and per-family envelopes for the rest."""

    machine: dict[str, Any]
    entries: dict[str, int]
    bounds: dict[str, Bound]
    coverage: str = ""
    _families: dict[str, list[tuple[int, int]]] | None = field(default=None, repr=False)

    def lookup(self, problem: Problem) -> int | None:
        return self.entries.get(problem.key)

    def estimate(self, problem: Problem) -> Estimate:
        """The table's answer: exact when measured; else a range whose high end is the
        larger of (a) the same problem at the table's other batch sizes (the largest of them,
        scaled up linearly beyond the largest batch) and (b) the local envelope of its family
        (`local`); the point is (a) interpolated in the batch, else (b)'s median."""
        known = self.lookup(problem)
        if known is not None:
            return Estimate(known, known, known, "table")
        sibling = self._sibling(problem)
        local = self.local(problem)
        if sibling is None and local is None:
            return Estimate(0, 0, 0, "none")
        point = sibling.point if sibling is not None else local.point if local else 0
        high = max(e.high for e in (sibling, local) if e is not None)
        return Estimate(point, 0, max(point, high), "estimate")

    def local(self, problem: Problem) -> Estimate | None:
        """From the family's measured problems of similar size (within a factor `WINDOW`),
        each scaled linearly to this size where it is smaller: high = the largest, point = the
        median. Where none is that close: the family's (else the op's) power-law envelope."""
        size = problem.size
        points = self.families().get(problem.family, [])
        sizes = [s for s, _ in points]
        lo, hi = bisect.bisect_left(sizes, size / WINDOW), bisect.bisect_right(sizes, size * WINDOW)
        scaled = sorted(int(w * max(1.0, size / max(s, 1))) for s, w in points[lo:hi])
        if scaled:
            return Estimate(scaled[len(scaled) // 2], 0, scaled[-1], "estimate")
        bound = self.bound(problem)
        if bound is None:
            return None
        return Estimate(bound.point(size), 0, bound.high(size), "estimate")

    def families(self) -> dict[str, list[tuple[int, int]]]:
        """Measured (size, workspace) by family, sorted by size (built on first use)."""
        if self._families is None:
            groups: dict[str, list[tuple[int, int]]] = {}
            for key, nbytes in self.entries.items():
                problem = problem_from_key(key)
                groups.setdefault(problem.family, []).append((problem.size, nbytes))
            self._families = {k: sorted(v) for k, v in groups.items()}
        return self._families

    def bound(self, problem: Problem) -> Bound | None:
        """The family's fit, or the op's where the family has too few measurements."""
        bound = self.bounds.get(problem.family)
        if bound is None or bound.n < MIN_FIT:
            bound = self.bounds.get(problem.op)
        return bound

    def _sibling(self, problem: Problem) -> Estimate | None:
        """The same problem measured at other batch sizes: the point interpolated linearly in
        the batch, the high end the largest of them (scaled up beyond the largest batch)."""
        p = problem.params
        field = "batch" if problem.op.startswith("rnn") else "x"
        batch = _batch(p, field)
        known: dict[int, int] = {}
        for b in _BATCHES:
            q = dict(p)
            if field == "batch":
                q["batch"] = b
            else:
                q["x"] = [b, *p["x"][1:]]
            found = self.entries.get(Problem(problem.op, tuple(sorted(q.items()))).key)
            if found is not None:
                known[b] = found
        known.pop(batch, None)
        if not known:
            return None
        below = max((b for b in known if b < batch), default=None)
        above = min((b for b in known if b > batch), default=None)
        if below is not None and above is not None:
            t = (batch - below) / (above - below)
            point = int(known[below] + t * (known[above] - known[below]))
        else:
            nearest = below if above is None else above
            assert nearest is not None
            point = int(known[nearest] * (batch / nearest if above is None else 1))
        scale = max(1.0, batch / max(known))
        high = int(max(known.values()) * scale)
        return Estimate(point, 0, max(point, high), "estimate")

    def to_dict(self) -> dict[str, Any]:
        return {"version": 1, "machine": self.machine, "coverage": self.coverage,
                "bounds": {k: {"a": b.a, "b": b.b, "up": b.up, "zeros": b.zeros, "n": b.n}
                           for k, b in sorted(self.bounds.items())},
                "families": {k: [list(p) for p in v] for k, v in sorted(self.families().items())},
                "entries": dict(sorted(self.entries.items()))}


_BATCHES = (1, 8, 32, 128)
MIN_FIT = 20  # fewer measurements in a family: the op's fit is used
WINDOW = 2.0  # the local envelope looks at family problems within this factor of the size


def _batch(p: dict[str, Any], field: str) -> int:
    return int(p["batch"]) if field == "batch" else int(p["x"][0])


def table_from_dict(data: dict[str, Any]) -> WorkspaceTable:
    """Validate and build (a malformed file raises ValueError)."""
    if not isinstance(data, dict) or data.get("version") != 1:
        raise ValueError("not a version-1 workspace table")
    entries = data.get("entries", {})
    if not isinstance(entries, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and v >= 0 for k, v in entries.items()):
        raise ValueError("entries must map problem keys to byte counts")
    bounds = {}
    for name, b in dict(data.get("bounds", {})).items():
        bounds[str(name)] = Bound(float(b["a"]), float(b["b"]), float(b["up"]),
                                  float(b["zeros"]), int(b["n"]))
    families: dict[str, list[tuple[int, int]]] | None = None
    if "families" in data:  # (size, workspace) by family, precomputed: parsing 9k keys is slow
        families = {str(k): sorted((int(s), int(w)) for s, w in v)
                    for k, v in dict(data["families"]).items()}
    return WorkspaceTable(dict(data.get("machine", {})), dict(entries), bounds,
                          str(data.get("coverage", "")), families)


def build_table(measured: dict[str, int], machine: dict[str, Any], coverage: str) -> WorkspaceTable:
    """The shipped table from measurements: the entries, and each family's envelope (and each
    op's, for families never measured)."""
    groups: dict[str, list[tuple[int, int]]] = {}
    for key, nbytes in measured.items():
        problem = problem_from_key(key)
        for name in (problem.family, problem.op):
            groups.setdefault(name, []).append((problem.size, nbytes))
    bounds = {name: fit_bound(points) for name, points in groups.items()}
    return WorkspaceTable(machine, dict(measured), bounds, coverage)


def load_table() -> WorkspaceTable:
    """The table shipped with torchinspect (an empty one if the data file is missing)."""
    try:
        raw = resources.files("torchinspect.memory").joinpath("data", TABLE_FILE).read_bytes()
    except (FileNotFoundError, OSError):
        return WorkspaceTable({}, {}, {})
    return table_from_dict(json.loads(gzip.decompress(raw)))


@functools.lru_cache(maxsize=1)
def shipped_table() -> WorkspaceTable:
    """`load_table`, read once per process (the file is part of the installed package)."""
    return load_table()


@dataclass
class Workspaces:
    """Where a prediction's workspace bytes come from: a calibration of this GPU (measured
    bytes by problem key; None: it ran out of memory), else the table, else a range."""

    table: WorkspaceTable
    exact_table: bool  # the table was measured on the GPU predicted for
    calibrated: dict[str, int | None] | None = None
    calibration: Any = None  # calibrate.Calibration: the cache the measurements go to
    estimated: dict[str, Problem] = field(default_factory=dict)
    out_of_memory: dict[str, Problem] = field(default_factory=dict)

    def estimate(self, problem: Problem) -> Estimate:
        if self.calibrated is not None and problem.key in self.calibrated:
            measured = self.calibrated[problem.key]
            if measured is not None:
                return Estimate(measured, measured, measured, "calibrated")
            self.out_of_memory[problem.key] = problem
        found = self.table.estimate(problem)
        if found.source == "table" and not self.exact_table:
            bound = self.table.bound(problem)
            high = max(found.point, bound.high(problem.size) if bound else found.point)
            found = Estimate(found.point, 0, high, "estimate")
        if not found.exact:
            self.estimated[problem.key] = problem
        return found

    def notes(self, gpu: str | None) -> list[str]:
        out = []
        for problem in self.out_of_memory.values():
            out.append(f"calibration ran out of GPU memory measuring {problem.describe()}: "
                       "its workspace is estimated")
        if self.estimated:
            where = (f"measured on {self.table.machine.get('gpu', '?')}" if self.table.entries
                     else "no table installed")
            out.append(f"{len(self.estimated)} cuDNN workspace(s) not measured for {gpu} "
                       f"(table {where}): peaks are given as a range whose upper end uses "
                       "the largest workspace measured for problems of that kind and size")
        return out
