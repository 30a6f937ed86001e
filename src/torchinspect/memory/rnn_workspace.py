"""cuDNN's RNN workspace for a configuration nobody measured: a linear model in its terms.

Measured on an H100 (`benchmarks/cudnn_rnn_memory.py`, the RNN grid of
`benchmarks/cudnn_workspace_sweep.py`), every RNN configuration's workspace is a straight
line in the tokens it runs (sequence x batch), ``W = A + S x tokens``, and across
configurations the two coefficients follow the shapes:

* ``A``, what does not grow with the tokens: about the bytes of the weights (the measured
  LSTMs: the weights plus 8 MiB per layer and direction, at every hidden size, with and
  without projections);
* ``S``, the bytes per token: about 5 hidden-wide vectors per direction plus 4 more for a
  second direction, one input-wide vector (two when the input arrives batch-first: the
  transposed copy), and one ``proj_size``-wide vector per direction for an LSTM with
  projections; not the layers.

So the workspace of an unmeasured problem is `TERMS` (bytes) times coefficients fitted by
least squares, relative to each measurement (weighted by ``1 / W``), per kind of cell and
mode (`group`: the backward's workspace is the training forward's, as the measured backward
peaks show, so they share a fit). The coefficients are fitted when the shipped table is
built, from its RNN entries only, and stored in it; `fit` also serves cross-validation
(refitted without a configuration's own problems). Leave-one-configuration-out over the
table's RNN entries it lands within 5% for about nine LSTM or GRU calls in ten, where the
nearest measured problem scaled by size did for about one in ten (``cudnn_workspace_sweep.py
rnn-check``; the table per op and cell is generated on benchmarks/RESULTS-memory.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torchinspect.memory.constants import value

MIB = 1 << 20
KINDS = ("lstm", "gru", "rnn_tanh", "rnn_relu")
GATE_ROWS = {kind: value(f"cudnn_rnn.gate_rows.{kind}") for kind in KINDS}
TERMS = (
    "weights",
    "weights, half precision in eval (their per-call copy)",
    "MiB per layer and direction",
    "tokens x directions x hidden",
    "tokens x (directions - 1) x hidden",
    "tokens x input",
    "tokens x input, batch-first",
    "tokens x directions x proj_size",
    "tokens x directions x hidden, small-hidden kernel",
)
# cuDNN's persistent kernel for small hidden sizes (PyTorch's use_rnn_persist_small_h)
SMALL_HIDDEN = {kind: value(f"cudnn_rnn.small_hidden.{kind}") for kind in KINDS}


def weight_bytes(p: dict[str, Any]) -> int:
    """The bytes of the RNN's weights (and biases) in the problem's precision."""
    hidden, layers, dirs, proj = p["hidden"], p["layers"], p["dirs"], p.get("proj") or 0
    rows = GATE_ROWS[p["kind"]] * hidden
    out = proj or hidden
    n = 0
    for layer in range(layers):
        width = p["input"] if layer == 0 else out * dirs
        n += dirs * (rows * (width + out) + (2 * rows if p["bias"] else 0) + proj * hidden)
    return n * _element(p)


def terms(p: dict[str, Any]) -> tuple[float, ...]:
    """The problem's `TERMS`, in bytes (the params of an RNN `workspace.Problem`)."""
    e = _element(p)
    tokens = p["seq"] * p["batch"]
    hidden, dirs, proj = p["hidden"], p["dirs"], p.get("proj") or 0
    weights = weight_bytes(p)
    return (float(weights), float(weights if e == 2 and not p["train"] else 0),
            float(p["layers"] * dirs * MIB), float(tokens * e * dirs * hidden),
            float(tokens * e * (dirs - 1) * hidden), float(tokens * e * p["input"]),
            float(tokens * e * p["input"] if p["bf"] else 0), float(tokens * e * dirs * proj),
            float(tokens * e * dirs * hidden if hidden <= SMALL_HIDDEN[p["kind"]] else 0))


def group(p: dict[str, Any]) -> str:
    """The fit a problem belongs to: its cell (a ReLU RNN is a tanh one) and mode (the
    backward with the training forward)."""
    kind = "rnn_tanh" if p["kind"] == "rnn_relu" else p["kind"]
    return f"{kind}/{'train' if p['train'] else 'eval'}"


def fit(rows: Iterable[tuple[dict[str, Any], int]]) -> dict[str, tuple[float, ...]]:
    """Coefficients per `group` from (params, measured bytes) rows; a group with fewer rows
    than terms gets none."""
    import numpy as np

    by: dict[str, list[tuple[tuple[float, ...], int]]] = {}
    for p, nbytes in rows:
        by.setdefault(group(p), []).append((terms(p), nbytes))
    out = {}
    for name, found in sorted(by.items()):
        if len(found) < len(TERMS):
            continue
        a = np.array([t for t, _ in found], dtype=float)
        b = np.array([n for _, n in found], dtype=float)
        weight = 1.0 / np.maximum(b, MIB)  # relative errors, a workspace under 1 MiB as 1 MiB
        coef = np.linalg.lstsq(a * weight[:, None], b * weight, rcond=None)[0]
        out[name] = tuple(round(float(c), 6) for c in coef)
    return out


def predict(p: dict[str, Any], model: dict[str, tuple[float, ...]]) -> int | None:
    """The model's workspace bytes for a problem (None: no fit for its group)."""
    coef = model.get(group(p))
    if coef is None:
        return None
    return max(0, int(sum(c * t for c, t in zip(coef, terms(p), strict=True))))


def _element(p: dict[str, Any]) -> int:
    return {"fp32": 4, "bf16": 2, "fp16": 2, "fp64": 8}.get(p["dtype"], 4)
