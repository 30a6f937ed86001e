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
3. an estimate with a range (`WorkspaceTable.estimate`): the point, for a convolution from
   the nearest measured problems in shape space (`features`), scaled by the ratio of problem
   sizes, for an RNN call from a linear model in its shapes fitted on the table's RNN
   entries (`rnn_workspace.py`); the range the point minus and plus the **envelope** of its
   op (an RNN call: of its op and cell) at that problem size: how far measurements lay below
   and above such points when each torchvision model's problems (each RNN configuration's)
   were left out of the table (`held_out_errors`, docs/concepts/memory.md: "cuDNN
   workspaces").

The prediction is replayed with each problem's point, low and high bytes: ``peak`` and the
``peak_low``-``peak_high`` range around it (without a GPU, `margins.py` widens it further by
the measured error of the rest of the prediction).
"""

from __future__ import annotations

import bisect
import functools
import gzip
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from torchinspect.dtypes import short_of
from torchinspect.memory.constants import real, value

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
        if self.op.startswith("rnn"):  # input and every layer's output (projected, if so)
            seq, batch, out, dirs = p["seq"], p["batch"], p.get("proj") or p["hidden"], p["dirs"]
            return elem * seq * batch * (p["input"] + out * dirs * p["layers"])
        return elem * (_numel(p["x"]) + _numel(conv_output(p)) + _numel(p["w"]))

    def describe(self) -> str:
        """``conv2d 3->64 7x7/2 backward, fp32, input 32x3x224x224`` for a note."""
        p = self.params
        direction = "backward" if self.op.endswith("bwd") else "forward"
        if self.op.startswith("rnn"):
            proj = f" proj {p['proj']}" if p.get("proj") else ""
            return (f"{p['kind']} {p['input']}->{p['hidden']}{proj} x{p['layers']}"
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
        "dtype": short_of(x.dtype), "layout": _layout(x),
    }
    if mask is not None:
        spec["mask"] = [bool(mask[0]), bool(mask[1]), bool(mask[2])]
    return Problem(op, tuple(sorted(spec.items())))


def rnn_problem(kind: str, *, backward: bool, input_size: int, hidden: int, layers: int,
                dirs: int, seq: int, batch: int, dtype: Any, train: bool, bias: bool,
                batch_first: bool, proj: int = 0) -> Problem:
    """A cuDNN RNN call. ``proj``: an LSTM's ``proj_size`` (0: none; then not in the key, so
    the keys of tables and caches written before projections were modelled still match)."""
    spec = {"kind": kind, "input": int(input_size), "hidden": int(hidden), "layers": int(layers),
            "dirs": int(dirs), "seq": int(seq), "batch": int(batch), "dtype": short_of(dtype),
            "train": bool(train), "bias": bool(bias), "bf": bool(batch_first)}
    if proj:
        spec["proj"] = int(proj)
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


def features(problem: Problem) -> tuple[float, ...]:
    """Where a problem lies in shape space: logs of its sizes, and its flags as 0/1 (the
    nearest measured problem by Euclidean distance gives an unmeasured one its point)."""
    p = problem.params
    if problem.op.startswith("rnn"):
        return (math.log(p["seq"] * p["batch"]), math.log(p["hidden"]), math.log(p["input"]),
                math.log(p["layers"]), float(p["dirs"] - 1), float(p["train"]), float(p["bf"]),
                float(p["bias"]), float(p["dtype"] == "fp16"),
                math.log(p["hidden"] / (p.get("proj") or p["hidden"])))  # 0 without projection
    mask = p.get("mask") or [False, False, False]
    return (math.log(p["x"][0]), math.log(p["x"][1]), math.log(conv_output(p)[1]),
            math.log(max(_numel(p["w"][2:]), 1)), math.log(_numel(p["s"])),
            math.log(max(_numel(p["x"][2:]), 1)), math.log(p["g"]), math.log(_numel(p["d"])),
            float(len(p["x"]) - 2), float(p["t"]), *(float(m) for m in mask),
            float(p["layout"] == "cl"), float(p["b"]), float(p["dtype"] == "fp16"))


def envelope_key(problem: Problem) -> str:
    """The envelope that bounds a problem: its op; for an RNN call, its op and cell (the
    cells' models err differently)."""
    if problem.op.startswith("rnn"):
        kind = problem.params["kind"]
        return f"{problem.op}/{'rnn_tanh' if kind == 'rnn_relu' else kind}"
    return problem.op


def bucket(problem: Problem) -> str:
    """The group searched for neighbours: op, kind and precision class (the family without
    the convolution's dimensions: a 1-D or 3-D problem looks among the 2-D ones)."""
    family = problem.family.split("/")
    return "/".join([family[0], *family[2:]] if problem.op.startswith("conv") else family)


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


@dataclass(frozen=True)
class Envelope:
    """How far cross-validation found measurements from the nearest-neighbour point, per
    op and problem size: in size class ``bin`` (problem bytes in [2**bin, 2**(bin+1))),
    ``above``/``below`` are the quantile `QUANTILE` of bytes the measurement lay above/below
    the point, made non-decreasing with the size."""

    bins: tuple[tuple[int, int, int], ...]  # (bin, above, below), bins ascending

    def at(self, size: int) -> tuple[int, int]:
        if not self.bins:
            return 0, 0
        b = int(math.log2(max(size, 1)))
        i = bisect.bisect_right([row[0] for row in self.bins], b) - 1
        if i < 0:
            return self.bins[0][1], self.bins[0][2]
        _, above, below = self.bins[i]
        if b > self.bins[-1][0]:  # larger than anything held out: grow with the size
            scale = size / 2 ** (self.bins[-1][0] + 1)
            return int(above * scale), int(below * scale)
        return above, below


# how many nearest problems the point is the median of
NEIGHBOURS = {"conv": value("workspace.neighbours.conv"), "rnn": value("workspace.neighbours.rnn")}
QUANTILE = real("workspace.envelope_quantile")  # the share of held-out problems each covers


def envelope(errors: list[tuple[int, int]], quantile: float = QUANTILE) -> Envelope:
    """From (problem size, measured - point) pairs of problems held out of the table."""
    by_bin: dict[int, list[int]] = {}
    for size, err in errors:
        by_bin.setdefault(int(math.log2(max(size, 1))), []).append(err)
    rows = []
    above = below = 0
    for b in sorted(by_bin):
        errs = sorted(by_bin[b])
        above = max(above, _quantile([e for e in errs if e > 0], len(errs), quantile))
        below = max(below, _quantile([-e for e in errs if e < 0], len(errs), quantile))
        rows.append((b, above, below))
    return Envelope(tuple(rows))


def _quantile(positive: list[int], n: int, quantile: float) -> int:
    """The ``quantile`` of n values of which these are the positive ones (the rest 0)."""
    k = math.ceil(quantile * n) - (n - len(positive))  # rank among the positive values
    return sorted(positive)[k - 1] if k >= 1 else 0


@dataclass
class WorkspaceTable:
    """Measured workspaces of one machine; the nearest of them, and the cross-validated
    envelopes, for the rest."""

    machine: dict[str, Any]
    entries: dict[str, int]
    envelopes: dict[str, Envelope] = field(default_factory=dict)
    coverage: str = ""
    # the RNN workspace model's coefficients (rnn_workspace.py); None: fitted from `entries`
    rnn_model: dict[str, tuple[float, ...]] | None = None
    _pools: dict[str, tuple[list[str], Any, Any, Any]] | None = field(default=None,
                                                                      repr=False)
    _rnn_fits: dict[frozenset[str], dict[str, tuple[float, ...]]] = field(
        default_factory=dict, repr=False)

    def lookup(self, problem: Problem) -> int | None:
        return self.entries.get(problem.key)

    def estimate(self, problem: Problem) -> Estimate:
        """Exact when measured; else the point from the nearest measured problem (scaled by
        the size ratio) and the range ``point - below`` to ``point + above`` of its op's
        envelope at this size."""
        known = self.lookup(problem)
        if known is not None:
            return Estimate(known, known, known, "table")
        point = self.nearest(problem)
        if point is None:
            return Estimate(0, 0, 0, "none")
        above, below = self.spread(problem)
        return Estimate(point, max(0, point - below), point + above, "estimate")

    def spread(self, problem: Problem) -> tuple[int, int]:
        found = self.envelopes.get(envelope_key(problem), self.envelopes.get(problem.op))
        return found.at(problem.size) if found is not None else (0, 0)

    def nearest(self, problem: Problem,
                held_out: Callable[[str], bool] | None = None) -> int | None:
        """The point for an unmeasured problem: an RNN call's from the RNN workspace model
        (`rnn_workspace.py`, fitted on the table's RNN entries); a convolution's (and an RNN
        call's without a fit for its cell) the workspace of the nearest measured problem of
        its bucket (else of its op) in `features` space, scaled by the ratio of problem
        sizes. ``held_out(key)``: rows to ignore (cross-validation: the model is refitted
        without them)."""
        import numpy as np

        if problem.op.startswith("rnn"):
            from torchinspect.memory import rnn_workspace

            found = rnn_workspace.predict(problem.params, self.rnn_fit(held_out))
            if found is not None:
                return found
        pools = self.pools()
        here = np.asarray(features(problem))
        for name in (bucket(problem), problem.op):
            if name not in pools:
                continue
            keys, feats, sizes, nbytes = pools[name]
            d = ((feats - here) ** 2).sum(axis=1)
            if held_out is not None:
                d[[i for i, key in enumerate(keys) if held_out(key)]] = np.inf
            k = NEIGHBOURS["rnn" if problem.op.startswith("rnn") else "conv"]
            near = [i for i in np.argsort(d, kind="stable")[:k] if np.isfinite(d[i])]
            if near:
                scaled = sorted(nbytes[i] * problem.size / max(sizes[i], 1.0) for i in near)
                return int(scaled[(len(scaled) - 1) // 2])  # the median (the lower of two)
        return None

    def rnn_fit(self, held_out: Callable[[str], bool] | None = None) -> dict[
            str, tuple[float, ...]]:
        """The RNN workspace model: the stored one, else (or without the held-out rows)
        fitted on the RNN entries (each fit made once); an empty stored model (``{}``: RNN
        calls take the nearest measured problem, as convolutions do) stays empty."""
        from torchinspect.memory import rnn_workspace

        if self.rnn_model == {}:
            return {}
        keys = [k for k in self.entries if k.startswith("rnn")]
        out = frozenset(k for k in keys if held_out is not None and held_out(k))
        if not out and self.rnn_model is not None:
            return self.rnn_model
        if out not in self._rnn_fits:
            self._rnn_fits[out] = rnn_workspace.fit(
                (problem_from_key(k).params, self.entries[k]) for k in keys if k not in out)
        return self._rnn_fits[out]

    def pools(self) -> dict[str, tuple[list[str], Any, Any, Any]]:
        """Per bucket (and per op): keys, and features, sizes and workspaces as arrays, of
        the measured problems (built on first use)."""
        if self._pools is None:
            import numpy as np

            groups: dict[str, list[tuple[str, tuple[float, ...], int]]] = {}
            for key in sorted(self.entries):
                problem = problem_from_key(key)
                row = (key, features(problem), problem.size)
                groups.setdefault(bucket(problem), []).append(row)
                groups.setdefault(problem.op, []).append(row)
            self._pools = {
                name: ([k for k, _, _ in rows], np.array([f for _, f, _ in rows], dtype=float),
                       np.array([n for _, _, n in rows], dtype=float),
                       np.array([self.entries[k] for k, _, _ in rows], dtype=float))
                for name, rows in groups.items()}
        return self._pools

    def to_dict(self) -> dict[str, Any]:
        return {"version": 2, "machine": self.machine, "coverage": self.coverage,
                "quantile": QUANTILE,
                "envelopes": {op: [list(row) for row in e.bins]
                              for op, e in sorted(self.envelopes.items())},
                "rnn_model": _rnn_model_dict(self.rnn_fit()),
                "entries": dict(sorted(self.entries.items()))}


def _rnn_model_dict(model: dict[str, tuple[float, ...]]) -> dict[str, Any]:
    from torchinspect.memory.rnn_workspace import TERMS

    return {"terms": list(TERMS), "fitted_on": "the RNN entries of this table",
            "groups": {name: list(coef) for name, coef in sorted(model.items())}}


def table_from_dict(data: dict[str, Any]) -> WorkspaceTable:
    """Validate and build (a malformed file raises ValueError)."""
    if not isinstance(data, dict) or data.get("version") != 2:
        raise ValueError("not a version-2 workspace table")
    entries = data.get("entries", {})
    if not isinstance(entries, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and v >= 0 for k, v in entries.items()):
        raise ValueError("entries must map problem keys to byte counts")
    envelopes = {str(op): Envelope(tuple((int(b), int(a), int(w)) for b, a, w in rows))
                 for op, rows in dict(data.get("envelopes", {})).items()}
    return WorkspaceTable(dict(data.get("machine", {})), dict(entries), envelopes,
                          str(data.get("coverage", "")), _rnn_model_from(data.get("rnn_model")))


def _rnn_model_from(data: Any) -> dict[str, tuple[float, ...]] | None:
    """The stored RNN workspace model (None: none stored, or for other terms: refitted)."""
    from torchinspect.memory.rnn_workspace import TERMS

    if not isinstance(data, dict) or data.get("terms") != list(TERMS):
        return None
    groups = data.get("groups")
    if not isinstance(groups, dict) or not all(
            isinstance(c, list) and len(c) == len(TERMS) and all(
                isinstance(v, (int, float)) for v in c) for c in groups.values()):
        raise ValueError("rnn_model groups must map names to one coefficient per term")
    return {str(name): tuple(float(v) for v in c) for name, c in groups.items()}


def held_out_errors(measured: dict[str, int], owners: dict[str, set[str]]) -> dict[
        str, list[tuple[str, int, int, int]]]:
    """Cross-validation: each measured problem estimated from the table without every
    problem whose owners (the models, or RNN configurations, it was measured for) all lie
    among its own, as if none of its models had been swept. Per `envelope_key`: (key, size,
    measured, point)."""
    table = WorkspaceTable({}, dict(measured))
    out: dict[str, list[tuple[str, int, int, int]]] = {}
    for key in sorted(measured):
        problem = problem_from_key(key)
        mine = owners.get(key, {key})
        point = table.nearest(problem, functools.partial(owned_by, owners, mine))
        if point is not None:
            out.setdefault(envelope_key(problem), []).append(
                (key, problem.size, measured[key], point))
    return out


def owned_by(owners: dict[str, set[str]], mine: set[str], key: str) -> bool:
    """Whether every owner of ``key`` is among ``mine`` (it goes when they are left out)."""
    return owners.get(key, {key}) <= mine


def build_table(measured: dict[str, int], machine: dict[str, Any], coverage: str,
                owners: dict[str, set[str]] | None = None) -> WorkspaceTable:
    """The shipped table from measurements: the entries, and each op's envelope from
    `held_out_errors` (no owners: each problem held out alone)."""
    errors = held_out_errors(measured, owners or {})
    envelopes = {op: envelope([(s, w - p) for _, s, w, p in rows])
                 for op, rows in errors.items()}
    return WorkspaceTable(machine, dict(measured), envelopes, coverage)


def load_table() -> WorkspaceTable:
    """The table shipped with torchinspect (an empty one if the data file is missing)."""
    try:
        raw = resources.files("torchinspect.memory").joinpath("data", TABLE_FILE).read_bytes()
    except (FileNotFoundError, OSError):
        return WorkspaceTable({}, {})
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
            # measured on another GPU: 0 up to the point plus the envelope of this size
            found = Estimate(found.point, 0, found.point + self.table.spread(problem)[0],
                             "estimate")
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
            rnn = {p.op.startswith("rnn") for p in self.estimated.values()}
            how = ("the nearest measured problem's, scaled" if rnn == {False} else
                   "the RNN workspace model's (fitted on the measured calls)" if rnn == {True}
                   else "a convolution's the nearest measured problem's, scaled, an RNN "
                        "call's the RNN workspace model's")
            out.append(f"{len(self.estimated)} cuDNN workspace(s) not measured for {gpu} "
                       f"(table {where}): each is {how}, within the spread cross-validation "
                       "found for problems of its size")
        return out
